//! Liveness and readiness, for load balancers and orchestrators.

use poem_openapi::{payload::Json, ApiResponse, Object, OpenApi};

use super::ApiTags;
use crate::{db, state::AppState};

pub struct HealthApi {
    pub state: AppState,
}

#[derive(Debug, Object)]
pub struct HealthOut {
    /// `ok`, or what is not ready yet.
    pub status: String,
}

#[derive(ApiResponse)]
pub enum ReadyResponse {
    /// The database is reachable and every migration is applied.
    #[oai(status = 200)]
    Ready(Json<HealthOut>),
    /// The database is unreachable or migrations are missing.
    #[oai(status = 503)]
    NotReady(Json<HealthOut>),
}

#[OpenApi(tag = "ApiTags::Health")]
impl HealthApi {
    /// Liveness: the process is up and serving HTTP.
    #[oai(path = "/healthz", method = "get", operation_id = "health.live")]
    async fn healthz(&self) -> Json<HealthOut> {
        Json(HealthOut {
            status: "ok".into(),
        })
    }

    /// Readiness: the database answers and the schema is current.
    #[oai(path = "/readyz", method = "get", operation_id = "health.ready")]
    async fn readyz(&self) -> ReadyResponse {
        let not_ready = |status: &str| {
            ReadyResponse::NotReady(Json(HealthOut {
                status: status.into(),
            }))
        };
        match db::migrations_applied(&self.state.pool).await {
            Ok(true) => ReadyResponse::Ready(Json(HealthOut {
                status: "ok".into(),
            })),
            Ok(false) => not_ready("migrations pending"),
            Err(err) => {
                tracing::warn!(error = %err, "readiness check failed");
                not_ready("database unreachable")
            }
        }
    }
}
