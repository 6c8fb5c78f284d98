//! Limits per tenant and per user (ARCHITECTURE.md, "Limits per tenant";
//! invariant 11): token-bucket rate limits and each tenant's share of the
//! database pool, checked once per request when its credential is (see
//! `auth`), before the handler runs.
//!
//! - **Buckets** ([`BucketKind`]): a tenant's writes; its reads (every
//!   user-token request but the stream's) and each user's; its stream
//!   connects and each user's; its reads with an API key (GET and HEAD). Rates: the tenant's own
//!   (`tenant_rate_limits`, cached for [`OVERRIDE_TTL`]) or the server's
//!   defaults (`config::LimitsConfig`). Buckets live in this instance's
//!   memory: a tenant's budget across a cluster is the rate times the
//!   number of instances.
//! - **Pool share** ([`share`]): a request holds one of its tenant's permits
//!   until its handler has answered.
//! - **Held refusals** ([`Limits::hold_refusal`]): a request a bucket refused
//!   is answered only after a pause, at most a bounded number per tenant at
//!   once, so a client that retries at once cannot turn refusals into a flood
//!   of round trips.
//!
//! Buckets are drawn on as early as the credential is known: before the body
//! is read when it comes in a header (`auth::admit_before_body`), else by the
//! credential's checker; a request draws on them once ([`Limits::take_tokens`]).
//!
//! What a request was admitted with (its permit, the buckets' states for the
//! `RateLimit` headers) is kept in a task-local slot ([`hold_during`]) that the
//! API's admission middleware opens around each request; outside one (no
//! middleware) the permit is released at once.

pub mod bucket;
pub mod share;

use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use uuid::Uuid;

use self::{
    bucket::{Bucket, Taken},
    share::{SharePermit, Shares},
};
use crate::{
    app::config::{LimitsConfig, Rate, RateDefaults},
    db::PrimaryPool,
    store::rate_limits::{self as store, RateRow},
};

/// How long a tenant's own rates are cached: a change reaches the instance
/// that made it at once and every other within this.
pub const OVERRIDE_TTL: Duration = Duration::from_secs(5);
/// Buckets not used for this long are dropped (and start full when used again:
/// by then a bucket of any sensible rate would have refilled).
const BUCKET_IDLE: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BucketKind {
    Writes,
    Reads,
    UserReads,
    Streams,
    UserStreams,
    /// Reads with an API key (a tenant's backend).
    KeyReads,
}

impl BucketKind {
    pub const ALL: [BucketKind; 6] = [
        BucketKind::Writes,
        BucketKind::Reads,
        BucketKind::UserReads,
        BucketKind::Streams,
        BucketKind::UserStreams,
        BucketKind::KeyReads,
    ];

    /// The name in `tenant_rate_limits.bucket`, the admin API and the
    /// `RateLimit` headers.
    pub fn as_str(self) -> &'static str {
        match self {
            BucketKind::Writes => "writes",
            BucketKind::Reads => "reads",
            BucketKind::UserReads => "user_reads",
            BucketKind::Streams => "stream_connects",
            BucketKind::UserStreams => "user_stream_connects",
            BucketKind::KeyReads => "key_reads",
        }
    }

    pub fn parse(name: &str) -> Option<BucketKind> {
        BucketKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    fn per_user(self) -> bool {
        matches!(self, BucketKind::UserReads | BucketKind::UserStreams)
    }

    fn default_rate(self, defaults: &RateDefaults) -> Rate {
        match self {
            BucketKind::Writes => defaults.writes,
            BucketKind::Reads => defaults.reads,
            BucketKind::UserReads => defaults.user_reads,
            BucketKind::Streams => defaults.streams,
            BucketKind::UserStreams => defaults.user_streams,
            BucketKind::KeyReads => defaults.key_reads,
        }
    }
}

/// Which buckets a request draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestClass {
    /// Events and alerts: the tenant's writes.
    Writes,
    /// Every other user-token request: the user's reads, then the tenant's.
    Reads,
    /// The stream and its tickets: the user's connects, then the tenant's.
    Streams,
    /// GET and HEAD with an API key: the tenant's key reads.
    KeyReads,
    /// Everything else a tenant's backend does (the pool share still holds).
    Unmetered,
}

impl RequestClass {
    /// The class of a request by method and route template, and whether it
    /// carries a user token (else an API key). Writes are named one by one;
    /// a new write endpoint joins here.
    pub fn of(method: &str, route: &str, user_token: bool) -> RequestClass {
        if user_token {
            if route.starts_with("/v1/feed/stream") {
                RequestClass::Streams
            } else {
                RequestClass::Reads
            }
        } else if method == "POST"
            && matches!(route, "/v1/events" | "/v1/events/batch" | "/v1/alerts")
        {
            RequestClass::Writes
        } else if matches!(method, "GET" | "HEAD") {
            RequestClass::KeyReads
        } else {
            RequestClass::Unmetered
        }
    }

    /// The buckets, most specific first: a request the user's bucket refuses
    /// costs the tenant's nothing.
    fn buckets(self) -> &'static [BucketKind] {
        match self {
            RequestClass::Writes => &[BucketKind::Writes],
            RequestClass::Reads => &[BucketKind::UserReads, BucketKind::Reads],
            RequestClass::Streams => &[BucketKind::UserStreams, BucketKind::Streams],
            RequestClass::KeyReads => &[BucketKind::KeyReads],
            RequestClass::Unmetered => &[],
        }
    }
}

/// A tenant's own rates, and its own cap on open streams per instance;
/// `None`: the server's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantRates {
    rates: Vec<(BucketKind, Rate)>,
    open_streams: Option<u32>,
}

impl TenantRates {
    pub fn new(rates: impl IntoIterator<Item = (BucketKind, Rate)>) -> Self {
        let mut rates: Vec<(BucketKind, Rate)> = rates.into_iter().collect();
        rates.sort_by_key(|(k, _)| *k);
        rates.dedup_by_key(|(k, _)| *k);
        TenantRates {
            rates,
            open_streams: None,
        }
    }

    /// With the tenant's own cap on open streams (`None`: the server's share).
    pub fn with_open_streams(mut self, open_streams: Option<u32>) -> Self {
        self.open_streams = open_streams;
        self
    }

    pub fn get(&self, kind: BucketKind) -> Option<Rate> {
        self.rates.iter().find(|(k, _)| *k == kind).map(|(_, r)| *r)
    }

    /// The tenant's own cap on its open streams per instance.
    pub fn open_streams(&self) -> Option<u32> {
        self.open_streams
    }
}

/// One bucket's state after a request, for the `RateLimit` headers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    pub kind: BucketKind,
    pub rate: Rate,
    pub taken: Taken,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// A bucket is empty: retry after `retry_after`.
    Limited {
        retry_after: Duration,
        quotas: Vec<Quota>,
    },
    /// The tenant's share of the pool stayed taken for the whole wait.
    ShareBusy { retry_after: Duration },
}

#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error("refused by a limit")]
    Refused(Refusal),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct BucketKey {
    kind: BucketKind,
    tenant: Uuid,
    /// Per-user buckets only.
    user: Option<String>,
    /// The rate is part of the key: a changed rate starts a new bucket.
    per_second_bits: u64,
    burst: u32,
}

/// Whose buckets a request has drawn on, and as which class.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Drawn {
    tenant: Uuid,
    user: Option<String>,
    class: RequestClass,
}

pub struct Limits {
    enabled: bool,
    defaults: RateDefaults,
    overrides: moka::future::Cache<Uuid, Arc<TenantRates>>,
    buckets: moka::future::Cache<BucketKey, Option<Arc<Bucket>>>,
    shares: Shares,
    /// The longest pause before a refusal is answered (zero: none).
    refusal_hold: Duration,
    /// Refusals held at once, per tenant (the permits never wait).
    held_refusals: Shares,
}

impl Limits {
    pub fn new(config: &LimitsConfig, pool_size: u32) -> Self {
        Limits {
            enabled: config.rate_limits,
            defaults: config.rates(),
            overrides: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(OVERRIDE_TTL)
                .build(),
            buckets: moka::future::Cache::builder()
                .max_capacity(1_000_000)
                .time_to_idle(BUCKET_IDLE)
                .build(),
            shares: Shares::new(
                config.tenant_share(pool_size),
                crate::app::config::defaults::DB_ACQUIRE_TIMEOUT,
            ),
            refusal_hold: config.refusal_hold(),
            held_refusals: Shares::new(config.rate_refusals_held_per_tenant, Duration::ZERO),
        }
    }

    pub fn defaults(&self) -> &RateDefaults {
        &self.defaults
    }

    /// Connections one tenant's requests may hold at once.
    pub fn share_per_tenant(&self) -> usize {
        self.shares.per_tenant()
    }

    /// The rate a tenant's bucket runs at: its own, else the default.
    pub fn effective(&self, own: &TenantRates, kind: BucketKind) -> Rate {
        own.get(kind)
            .unwrap_or_else(|| kind.default_rate(&self.defaults))
    }

    /// Admits one request of `tenant` (and `user`, for user tokens) of
    /// `class`: takes a token from each of its buckets (unless the request
    /// already has, [`Limits::take_tokens`]), then a permit of the tenant's
    /// pool share, and keeps both in the request's slot. A refusal is
    /// recorded there too (see [`Held::refused`]).
    pub async fn admit(
        &self,
        pool: &PrimaryPool,
        tenant: Uuid,
        user: Option<&str>,
        class: RequestClass,
    ) -> Result<(), AdmitError> {
        self.take_tokens(pool, tenant, user, class).await?;
        let permit = self.shares.acquire(tenant).await.ok_or_else(|| {
            refused(Refusal::ShareBusy {
                retry_after: Duration::from_secs(1),
            })
        })?;
        with_held(move |held| held.permit = Some(permit));
        Ok(())
    }

    /// Admits one unit of `tenant`'s work for a consumer that serves every
    /// tenant in turn (the NATS inbox): the buckets of `class`, then a
    /// permit of the tenant's pool share only if one is free now, since
    /// waiting behind one tenant's share would hold up every other tenant's
    /// work. The work holds the returned permit while it runs.
    pub async fn admit_without_waiting(
        &self,
        pool: &PrimaryPool,
        tenant: Uuid,
        class: RequestClass,
    ) -> Result<SharePermit, AdmitError> {
        self.take_tokens(pool, tenant, None, class).await?;
        self.shares.try_acquire(tenant).ok_or_else(|| {
            refused(Refusal::ShareBusy {
                retry_after: Duration::from_secs(1),
            })
        })
    }

    /// Takes a token from each bucket of a request of `class`, once per
    /// request: a second call for the same tenant, user and class (the
    /// credential's checker after `auth::admit_before_body`) takes nothing.
    /// The buckets' states are kept in the request's slot for the headers; a
    /// refusal is recorded there too.
    pub async fn take_tokens(
        &self,
        pool: &PrimaryPool,
        tenant: Uuid,
        user: Option<&str>,
        class: RequestClass,
    ) -> Result<(), AdmitError> {
        if !self.enabled || class == RequestClass::Unmetered {
            return Ok(());
        }
        let drawn = Drawn {
            tenant,
            user: user.map(str::to_owned),
            class,
        };
        let mut already = false;
        // After a refusal nothing was admitted: a second call draws again.
        with_held(|held| already = held.refused.is_none() && held.drawn.as_ref() == Some(&drawn));
        if already {
            return Ok(());
        }
        with_held(|held| held.drawn = Some(drawn));
        let own = self.tenant_rates(pool, tenant).await?;
        let mut quotas = Vec::new();
        for &kind in class.buckets() {
            let rate = self.effective(&own, kind);
            let key = BucketKey {
                kind,
                tenant,
                user: kind.per_user().then(|| user.unwrap_or_default().to_owned()),
                per_second_bits: rate.per_second.to_bits(),
                burst: rate.burst,
            };
            // `None`: an unlimited rate.
            let Some(bucket) = self
                .buckets
                .get_with(key, async move { Bucket::new(rate).map(Arc::new) })
                .await
            else {
                continue;
            };
            let taken = bucket.take();
            quotas.push(Quota { kind, rate, taken });
            if !taken.allowed {
                return Err(refused(Refusal::Limited {
                    retry_after: taken.wait,
                    quotas,
                }));
            }
        }
        with_held(|held| held.quotas = quotas);
        Ok(())
    }

    /// Pauses before a request's refusal is answered: for its `Retry-After`
    /// (whole seconds, so at least one), at most the configured hold, when
    /// one of its tenant's held-refusal permits is free; otherwise, and for
    /// anything but an empty bucket, at once. A client that retries as soon
    /// as it is answered then sends one request per connection per pause,
    /// and one tenant holds at most its permits' worth of connections.
    /// Returns whether the answer was held.
    pub async fn hold_refusal(&self, held: &Held) -> bool {
        let (Some(Refusal::Limited { retry_after, .. }), Some(drawn)) =
            (&held.refused, &held.drawn)
        else {
            return false;
        };
        let pause = retry_after_secs(*retry_after).min(self.refusal_hold);
        if pause.is_zero() {
            return false;
        }
        let Some(_permit) = self.held_refusals.try_acquire(drawn.tenant) else {
            crate::app::instruments::refusal_not_held();
            return false;
        };
        let _held = crate::app::instruments::refusal_held();
        tokio::time::sleep(pause).await;
        true
    }

    /// A tenant's own rates, cached for [`OVERRIDE_TTL`].
    pub async fn tenant_rates(
        &self,
        pool: &PrimaryPool,
        tenant: Uuid,
    ) -> Result<Arc<TenantRates>, sqlx::Error> {
        if let Some(hit) = self.overrides.get(&tenant).await {
            return Ok(hit);
        }
        let own = Arc::new(read_own(pool, tenant).await?);
        self.overrides.insert(tenant, own.clone()).await;
        Ok(own)
    }

    /// A tenant's own rates as stored now (the admin API; no cache);
    /// `None` when the tenant does not exist.
    pub async fn read_tenant_rates(
        &self,
        pool: &PrimaryPool,
        tenant: Uuid,
    ) -> Result<Option<TenantRates>, sqlx::Error> {
        if !crate::store::tenants::tenant_exists(pool, tenant).await? {
            return Ok(None);
        }
        Ok(Some(read_own(pool, tenant).await?))
    }

    /// Replaces a tenant's own rates (buckets not given take the defaults
    /// again); `false` when the tenant does not exist. Valid rates only
    /// (`Rate::valid`): the caller checked them.
    pub async fn set_tenant_rates(
        &self,
        pool: &PrimaryPool,
        tenant: Uuid,
        rates: &TenantRates,
    ) -> Result<bool, sqlx::Error> {
        let mut tx = pool.begin().await?;
        if !crate::store::tenants::tenant_exists(&mut *tx, tenant).await? {
            return Ok(false);
        }
        let rows: Vec<RateRow> = rates
            .rates
            .iter()
            .map(|(kind, rate)| RateRow {
                bucket: kind.as_str().to_owned(),
                per_second: rate.per_second,
                burst: i32::try_from(rate.burst).unwrap_or(i32::MAX),
            })
            .collect();
        let keep: Vec<&str> = rows.iter().map(|r| r.bucket.as_str()).collect();
        store::delete_other_tenant_rate_limits(&mut *tx, tenant, &keep).await?;
        store::upsert_tenant_rate_limits(&mut *tx, tenant, &rows).await?;
        let open_streams = rates
            .open_streams
            .map(|n| i32::try_from(n).unwrap_or(i32::MAX));
        store::set_tenant_max_open_streams(&mut *tx, tenant, open_streams).await?;
        tx.commit().await?;
        self.overrides.invalidate(&tenant).await;
        Ok(true)
    }
}

async fn read_own(pool: &PrimaryPool, tenant: Uuid) -> Result<TenantRates, sqlx::Error> {
    let rows = store::list_tenant_rate_limits(pool, tenant).await?;
    let open_streams = store::find_tenant_max_open_streams(pool, tenant)
        .await?
        .and_then(|n| u32::try_from(n).ok());
    Ok(tenant_rates_of(rows).with_open_streams(open_streams))
}

fn tenant_rates_of(rows: Vec<RateRow>) -> TenantRates {
    TenantRates::new(rows.into_iter().filter_map(|row| {
        let kind = BucketKind::parse(&row.bucket)?;
        let burst = u32::try_from(row.burst).ok()?;
        Some((
            kind,
            Rate {
                per_second: row.per_second,
                burst,
            },
        ))
    }))
}

/// Records a refusal (the metric and the request's slot) and returns it.
fn refused(refusal: Refusal) -> AdmitError {
    crate::app::instruments::limit_refused(refusal_label(&refusal));
    with_held(|held| {
        held.refused.get_or_insert_with(|| refusal.clone());
    });
    AdmitError::Refused(refusal)
}

/// The wait a refusal's `Retry-After` announces: whole seconds, rounded up,
/// at least one (what `ApiError::RateLimited` sends).
pub fn retry_after_secs(wait: Duration) -> Duration {
    Duration::from_secs(ceil_secs(wait).max(1))
}

fn refusal_label(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::Limited { quotas, .. } => quotas
            .iter()
            .find(|q| !q.taken.allowed)
            .map_or("rate", |q| q.kind.as_str()),
        Refusal::ShareBusy { .. } => "pool_share",
    }
}

/// What a request was admitted with, kept until it is answered.
#[derive(Default)]
pub struct Held {
    /// Each bucket's state after this request took its token.
    pub quotas: Vec<Quota>,
    /// The first refusal of this request. poem-openapi tries each scheme of a
    /// choice (the stream's user token or ticket) and answers with the last
    /// one's error, which would turn a 429 into a 401: the middleware answers
    /// with this instead.
    pub refused: Option<Refusal>,
    /// Whose buckets the request drew on (once per request).
    drawn: Option<Drawn>,
    permit: Option<SharePermit>,
}

tokio::task_local! {
    static HELD: Arc<Mutex<Held>>;
}

fn with_held(f: impl FnOnce(&mut Held)) {
    let _ = HELD.try_with(|held| f(&mut held.lock().unwrap_or_else(|e| e.into_inner())));
}

/// Runs a request with a slot for what it is admitted with; returns the
/// slot with the answer. The permit is released when the slot is dropped.
pub async fn hold_during<F: Future>(request: F) -> (F::Output, Held) {
    let slot = Arc::new(Mutex::new(Held::default()));
    let output = HELD.scope(slot.clone(), request).await;
    let held = std::mem::take(&mut *slot.lock().unwrap_or_else(|e| e.into_inner()));
    (output, held)
}

/// Whole seconds to wait, rounded up: a client that waits this long finds
/// what it waited for. (Here, not in `error`: `error` maps the limits'
/// refusals, so the limits must not import it.)
pub(crate) fn ceil_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classed_by_credential_method_and_route() {
        use RequestClass::*;
        for (method, route, user, class) in [
            ("POST", "/v1/events", false, Writes),
            ("POST", "/v1/events/batch", false, Writes),
            ("POST", "/v1/alerts", false, Writes),
            ("GET", "/v1/alerts/:alert_id", false, KeyReads),
            ("GET", "/v1/users/:user_id", false, KeyReads),
            ("GET", "/v1/teams/:team_id/members", false, KeyReads),
            ("HEAD", "/v1/deliveries", false, KeyReads),
            ("PUT", "/v1/users/:user_id", false, Unmetered),
            ("GET", "/v1/feed", true, Reads),
            ("GET", "/v1/feed/counts", true, Reads),
            ("POST", "/v1/feed/read", true, Reads),
            ("POST", "/v1/feed/stream-tickets", true, Streams),
            ("GET", "/v1/feed/stream", true, Streams),
        ] {
            assert_eq!(
                RequestClass::of(method, route, user),
                class,
                "{method} {route}"
            );
        }
    }

    #[test]
    fn bucket_names_round_trip() {
        for kind in BucketKind::ALL {
            assert_eq!(BucketKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(BucketKind::parse("nope"), None);
    }
}
