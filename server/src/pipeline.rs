//! A few shared connections on which concurrent single statements are
//! pipelined (ARCHITECTURE.md, "The pipeline").
//!
//! **Why.** sqlx runs one statement at a time per connection: sixteen
//! concurrent one-statement requests keep sixteen backends, and each
//! statement wakes its backend from sleep and waits for its answer alone. On
//! tokio-postgres, statements from any number of tasks go down one
//! connection back to back; the backend answers them in order and finds the
//! next one already waiting, so it sleeps and wakes once for many. In the
//! lab (bench/README.md, "the pipeline"), sixteen loops of the readiness
//! statement on two shared connections cost 13 µs of client and 24 µs of
//! backend CPU per statement, against sqlx's 22 and 40 and pgbench's 15
//! and 39, and ran 1.2-1.4x pgbench's rate.
//!
//! **What may run here (the contract).** A statement waits behind every
//! statement sent before it on its connection, so only statements whose
//! cost is small and does not grow with anyone's data: one slow statement
//! would hold up every request behind it, across tenants. And only reads:
//! a statement whose connection is found closed is sent again on a new one,
//! which must be harmless. Today that is the readiness probe's statement
//! ([`crate::db::migrations_applied`]). The store's statements run on sqlx
//! and its pool, inside transactions or on connections routed to standbys;
//! they are not moved here (ARCHITECTURE.md says what moving one needs).
//!
//! **Not behind a transaction pooler.** Statements are prepared once per
//! connection (unnamed ones are parsed and planned again each time: 3x the
//! backend CPU in the lab), and a transaction pooler does not keep a
//! prepared statement from one transaction to the next. There
//! ([`crate::config::Pooler::Transaction`]) no pipeline is made.
//!
//! **When it cannot connect** (the database down, or a `DATABASE_URL` only
//! sqlx understands: it also reads `PG*` variables and `.pgpass`, which
//! tokio-postgres does not), [`Pipeline::query_one`] answers
//! [`PipelineError::Unavailable`] at once for a second, and the caller uses
//! the pool instead: the pipeline is a faster road, never the only one.

use std::{
    collections::HashMap,
    str::FromStr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use tokio_postgres::{types::ToSql, Client, Config, NoTls, Row, Statement};

use crate::config::SessionTimeouts;

/// How long after a failed connection attempt a slot answers
/// [`PipelineError::Unavailable`] without trying again: a database that is
/// down is not asked for a connection by every probe.
const RETRY_CONNECT_AFTER: Duration = Duration::from_secs(1);

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What sessions of the pipeline call themselves in `pg_stat_activity`,
/// unless `DATABASE_URL` names the application.
pub const APPLICATION_NAME: &str = "tidings pipeline";

/// URL parameters tokio-postgres understands. sqlx accepts more (and
/// tokio-postgres refuses a URL with any it does not know); the others are
/// dropped, which costs at worst a connection that fails, and then the pool.
const KNOWN_PARAMETERS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// No connection to send the statement on: use the pool.
    #[error("pipeline unavailable: {0}")]
    Unavailable(String),
    /// The statement's own answer: an error of the database, or the
    /// connection lost with the statement on it (twice).
    #[error(transparent)]
    Statement(#[from] tokio_postgres::Error),
}

/// The shared connections. Cheap to share behind an `Arc`; connects lazily,
/// at the first statement, and again whenever a connection is found closed.
pub struct Pipeline {
    config: Config,
    timeouts: SessionTimeouts,
    slots: Box<[Slot]>,
    /// Round robin over the slots.
    next: AtomicUsize,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("connections", &self.slots.len())
            .finish_non_exhaustive()
    }
}

/// One connection's place: the live session, if any.
#[derive(Default)]
struct Slot {
    live: Mutex<Option<Arc<Session>>>,
    /// Held while connecting (one attempt at a time per slot); it keeps the
    /// last failed attempt's pause: until when, and why.
    connecting: tokio::sync::Mutex<Option<(Instant, String)>>,
}

struct Session {
    client: Client,
    /// Statements prepared on this connection, by their text.
    prepared: Mutex<HashMap<&'static str, Statement>>,
}

impl Pipeline {
    /// A pipeline of `connections` connections to `url` (a `DATABASE_URL`),
    /// each with the pool's session timeouts. `None` when `connections` is 0.
    pub fn new(
        url: &str,
        connections: usize,
        timeouts: SessionTimeouts,
    ) -> anyhow::Result<Option<Self>> {
        if connections == 0 {
            return Ok(None);
        }
        Ok(Some(Pipeline {
            config: config_of(url)?,
            timeouts,
            slots: (0..connections).map(|_| Slot::default()).collect(),
            next: AtomicUsize::new(0),
        }))
    }

    /// Runs `sql`, a statement that answers one row, on the next connection
    /// in turn.
    pub async fn query_one(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, PipelineError> {
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()];
        let mut session = slot.session(self).await?;
        match session.query_one(sql, params).await {
            // The connection closed under it (a restart, a terminated
            // backend): once more on a new one (reads only: the contract).
            Err(err) if err.is_closed() => {
                slot.forget(&session);
                session = slot.session(self).await?;
                Ok(session.query_one(sql, params).await?)
            }
            answer => Ok(answer?),
        }
    }

    async fn connect(&self) -> Result<Session, String> {
        let connecting = async {
            let (client, connection) = self.config.connect(NoTls).await?;
            tokio::spawn(async move {
                if let Err(err) = connection.await {
                    tracing::debug!(error = %err, "pipeline connection ended");
                }
            });
            // As the pool's sessions have them (`db::with_session_timeouts`).
            client
                .batch_execute(&self.timeouts.set_statements(false))
                .await?;
            Ok::<_, tokio_postgres::Error>(client)
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Ok(Ok(client)) => Ok(Session {
                client,
                prepared: Mutex::default(),
            }),
            Ok(Err(err)) => Err(err.to_string()),
            Err(_) => Err(format!("no connection within {CONNECT_TIMEOUT:?}")),
        }
    }
}

impl Slot {
    fn current(&self) -> Option<Arc<Session>> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.as_ref()
            .filter(|session| !session.client.is_closed())
            .cloned()
    }

    /// The slot's open session, connecting first when it has none.
    async fn session(&self, pipeline: &Pipeline) -> Result<Arc<Session>, PipelineError> {
        if let Some(session) = self.current() {
            return Ok(session);
        }
        let mut refused = self.connecting.lock().await;
        // Another caller may have connected while this one waited.
        if let Some(session) = self.current() {
            return Ok(session);
        }
        if let Some((until, why)) = refused.as_ref() {
            if Instant::now() < *until {
                return Err(PipelineError::Unavailable(why.clone()));
            }
        }
        match pipeline.connect().await {
            Ok(session) => {
                let session = Arc::new(session);
                *self.live.lock().unwrap_or_else(|e| e.into_inner()) = Some(session.clone());
                *refused = None;
                Ok(session)
            }
            Err(why) => {
                tracing::warn!(error = %why, "pipeline cannot connect; its statements use the pool");
                *refused = Some((Instant::now() + RETRY_CONNECT_AFTER, why.clone()));
                Err(PipelineError::Unavailable(why))
            }
        }
    }

    /// Drops `session` if it is still the slot's (a caller found it closed).
    fn forget(&self, session: &Arc<Session>) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if live.as_ref().is_some_and(|s| Arc::ptr_eq(s, session)) {
            *live = None;
        }
    }
}

impl Session {
    async fn query_one(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, tokio_postgres::Error> {
        let cached = self
            .prepared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(sql)
            .cloned();
        let statement = match cached {
            Some(statement) => statement,
            None => {
                let statement = self.client.prepare(sql).await?;
                self.prepared
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(sql, statement.clone());
                statement
            }
        };
        self.client.query_one(&statement, params).await
    }
}

/// tokio-postgres's configuration from a `DATABASE_URL` as sqlx takes it:
/// parameters only sqlx knows are dropped, and the sessions are named
/// [`APPLICATION_NAME`] unless the URL names them.
fn config_of(url: &str) -> anyhow::Result<Config> {
    let mut parsed = url::Url::parse(url)?;
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(key, _)| KNOWN_PARAMETERS.contains(&key.as_ref()))
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect();
    if kept.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(kept);
        // Form encoding writes a space as `+`, which tokio-postgres reads as
        // a plus (a plus itself was written `%2B`).
        let query = parsed.query().map(|q| q.replace('+', "%20"));
        parsed.set_query(query.as_deref());
    }
    let mut config = Config::from_str(parsed.as_str())?;
    if config.get_application_name().is_none() {
        config.application_name(APPLICATION_NAME);
    }
    config.connect_timeout(CONNECT_TIMEOUT);
    Ok(config)
}

#[cfg(test)]
mod tests {
    use tokio_postgres::config::Host;

    use super::*;

    #[test]
    fn a_url_keeps_what_tokio_postgres_knows_and_drops_what_only_sqlx_does() {
        let config = config_of(
            "postgres://ann:p%40ss%2Fword@db.example:6543/tidings?statement-cache-capacity=0&sslmode=disable&options=-c%20search_path%3Dx%2By",
        )
        .unwrap();
        assert_eq!(config.get_user(), Some("ann"));
        assert_eq!(config.get_password(), Some(&b"p@ss/word"[..]), "decoded");
        assert_eq!(config.get_dbname(), Some("tidings"));
        assert_eq!(config.get_hosts(), &[Host::Tcp("db.example".into())]);
        assert_eq!(config.get_ports(), &[6543]);
        assert_eq!(config.get_options(), Some("-c search_path=x+y"));
        assert_eq!(config.get_application_name(), Some(APPLICATION_NAME));
    }

    #[test]
    fn a_url_that_names_the_application_keeps_its_name() {
        let config = config_of("postgresql://u@h/d?application_name=billing").unwrap();
        assert_eq!(config.get_application_name(), Some("billing"));
    }

    #[test]
    fn no_connections_is_no_pipeline() {
        let none = Pipeline::new("postgres://u@h/d", 0, SessionTimeouts::default()).unwrap();
        assert!(none.is_none());
    }
}
