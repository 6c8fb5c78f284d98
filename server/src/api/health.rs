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
    /// The readiness check that failed: `database`, `migrations` or `listen`.
    #[oai(skip_serializing_if_is_none)]
    pub check: Option<String>,
}

#[derive(ApiResponse)]
pub enum ReadyResponse {
    /// The database is reachable and every migration is applied.
    #[oai(status = 200)]
    Ready(Json<HealthOut>),
    /// The database is unreachable, migrations are missing, or a LISTEN
    /// connection of this instance has been down longer than
    /// `TIDINGS_READY_LISTEN_DOWN_SECS`; `check` says which.
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
            check: None,
        })
    }

    /// Readiness: the database answers, the schema is current, and this
    /// instance's LISTEN connections are up (or were down only briefly).
    #[oai(path = "/readyz", method = "get", operation_id = "health.ready")]
    async fn readyz(&self) -> ReadyResponse {
        let not_ready = |check: &str, status: String| {
            ReadyResponse::NotReady(Json(HealthOut {
                status,
                check: Some(check.into()),
            }))
        };
        match db::migrations_applied(&self.state.pool).await {
            Ok(true) => {}
            Ok(false) => return not_ready("migrations", "migrations pending".into()),
            Err(err) => {
                tracing::warn!(error = %err, "readiness check failed");
                return not_ready("database", "database unreachable".into());
            }
        }
        if let Some((channel, down)) = crate::listen::longest_down() {
            if down > self.state.settings.ops.ready_listen_down() {
                return not_ready(
                    "listen",
                    format!("LISTEN on {channel} down for {} s", down.as_secs()),
                );
            }
        }
        ReadyResponse::Ready(Json(HealthOut {
            status: "ok".into(),
            check: None,
        }))
    }
}
