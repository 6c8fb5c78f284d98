//! Liveness and readiness, for load balancers and orchestrators.

use poem_openapi::{payload::Json, ApiResponse, Object, OpenApi};

use super::ApiTags;
use crate::{app::state::AppState, db, db::replicas::Health};

pub struct HealthApi {
    pub state: AppState,
}

#[derive(Debug, Object)]
pub struct HealthOut {
    /// `ok`, or what is not ready yet.
    pub status: String,
    /// Readiness only, when not ready: the check that failed, `primary` (none
    /// reachable, or the route reached a standby: as during a failover),
    /// `database` (another database error), `migrations` or `listen`.
    #[oai(skip_serializing_if_is_none)]
    pub check: Option<String>,
    /// Readiness only, when hot standbys are configured: each standby's state.
    /// A standby out of rotation does not make the server unready (its reads
    /// go to the primary).
    #[oai(skip_serializing_if_is_none)]
    pub standbys: Option<Vec<StandbyOut>>,
    /// Readiness only, when hot standbys are configured: where reads went
    /// since start.
    #[oai(skip_serializing_if_is_none)]
    pub reads: Option<ReadsOut>,
}

/// One hot standby as this server sees it.
#[derive(Debug, Object)]
pub struct StandbyOut {
    /// host:port
    pub name: String,
    /// `up` (in rotation), `starting`, `lagging`, `promoted` or `down`.
    pub state: String,
    /// The WAL position it had replayed at the last check.
    pub replayed_lsn: String,
    /// How far behind the primary it was at the last check, in ms (`up` and
    /// `lagging` only).
    #[oai(skip_serializing_if_is_none)]
    pub lag_ms: Option<u64>,
    /// The age, at the last check, of the newest per-tenant feed horizon it
    /// had replayed and could serve with, in ms: its replay lag plus the time
    /// between horizon readings on the primary (`up` and `lagging` only;
    /// absent when it had replayed none recent enough). Over
    /// `TIDINGS_REPLICA_MAX_HORIZON_AGE_MS` the standby is `lagging`.
    #[oai(skip_serializing_if_is_none)]
    pub horizon_age_ms: Option<u64>,
    /// Why it is `down`.
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
}

/// Counts of reads that may be served by a standby, by where they went.
#[derive(Debug, Object)]
pub struct ReadsOut {
    /// Served by a standby.
    pub standby: u64,
    /// Served by the primary: no standby in rotation.
    pub primary_no_standby: u64,
    /// Served by a standby after waiting for it to replay a consistency token.
    pub waited_for_standby: u64,
    /// Served by the primary: no standby replayed the token within the wait.
    pub primary_standby_behind: u64,
    /// Served by the primary after failing on a standby.
    pub primary_after_standby_error: u64,
    /// Served by the primary: the standby had replayed no feed horizon recent
    /// enough to serve with.
    pub primary_standby_horizon_old: u64,
}

impl HealthOut {
    fn of(status: &str) -> Self {
        HealthOut {
            status: status.into(),
            check: None,
            standbys: None,
            reads: None,
        }
    }
}

fn replica_detail(state: &AppState) -> (Option<Vec<StandbyOut>>, Option<ReadsOut>) {
    let replicas = &state.replicas;
    if !replicas.has_standbys() {
        return (None, None);
    }
    let standbys = replicas
        .statuses()
        .into_iter()
        .map(|s| StandbyOut {
            name: s.name,
            state: s.health.label().into(),
            replayed_lsn: s.replayed.to_string(),
            lag_ms: match &s.health {
                Health::Up { lag, .. } | Health::Lagging { lag, .. } => {
                    Some(lag.as_millis() as u64)
                }
                _ => None,
            },
            horizon_age_ms: match &s.health {
                Health::Up { horizon_age, .. } => Some(horizon_age.as_millis() as u64),
                Health::Lagging { horizon_age, .. } => {
                    horizon_age.map(|age| age.as_millis() as u64)
                }
                _ => None,
            },
            error: match s.health {
                Health::Down { error } => Some(error),
                _ => None,
            },
        })
        .collect();
    let c = replicas.counts();
    let reads = ReadsOut {
        standby: c.standby,
        primary_no_standby: c.primary_no_standby,
        waited_for_standby: c.waited,
        primary_standby_behind: c.primary_behind,
        primary_after_standby_error: c.primary_after_error,
        primary_standby_horizon_old: c.primary_horizon_old,
    };
    (Some(standbys), Some(reads))
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
    /// Liveness.
    ///
    /// The process is up and serving HTTP. It reads nothing: use it to restart a
    /// hung process, not to route traffic.
    #[oai(path = "/healthz", method = "get", operation_id = "health.live")]
    async fn healthz(&self) -> Json<HealthOut> {
        Json(HealthOut::of("ok"))
    }

    /// Readiness.
    ///
    /// The database answers, there is a primary, the schema is current, and this
    /// instance's LISTEN connections are up (or were down only briefly); hot
    /// standbys are reported with their lag and the horizon's age. 503 names the
    /// failing check.
    #[oai(path = "/readyz", method = "get", operation_id = "health.ready")]
    async fn readyz(&self) -> ReadyResponse {
        // Err((check, status)): the first check that failed.
        let ready = match db::readiness(&self.state.pool).await {
            Ok(db::Readiness::Ready) => match crate::db::listen::longest_down() {
                Some((channel, down)) if down > self.state.settings.ops.ready_listen_down() => {
                    Err((
                        "listen",
                        format!("LISTEN on {channel} down for {} s", down.as_secs()),
                    ))
                }
                _ => Ok(()),
            },
            Ok(db::Readiness::MigrationsPending) => {
                Err(("migrations", "migrations pending".to_string()))
            }
            // The route to the primary reached a standby, or reached nothing
            // as while a failover runs: no primary takes writes.
            Ok(db::Readiness::NoPrimary) => Err((
                "primary",
                "no primary: the database is a standby".to_string(),
            )),
            Err(err) if crate::store::is_unavailable(&err) => {
                tracing::warn!(error = %err, "readiness check failed");
                Err((
                    "primary",
                    "no primary: the database is unreachable".to_string(),
                ))
            }
            Err(err) => {
                tracing::warn!(error = %err, "readiness check failed");
                Err(("database", "database error".to_string()))
            }
        };
        let (standbys, reads) = replica_detail(&self.state);
        match ready {
            Ok(()) => ReadyResponse::Ready(Json(HealthOut {
                standbys,
                reads,
                ..HealthOut::of("ok")
            })),
            Err((check, status)) => ReadyResponse::NotReady(Json(HealthOut {
                check: Some(check.into()),
                standbys,
                reads,
                ..HealthOut::of(&status)
            })),
        }
    }
}
