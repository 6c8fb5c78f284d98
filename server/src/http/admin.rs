//! Operator endpoints: tenants and their API keys.

use chrono::{DateTime, Utc};
use poem_openapi::{param::Path, payload::Json, ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use crate::{
    app::config::Rate,
    app::state::AppState,
    http::auth::AdminAuth,
    http::error::{ApiError, ApiResult, ProblemCode},
    store,
    tenants::limits::{BucketKind, TenantRates},
    tenants::{self, TenantError},
};

pub struct AdminApi {
    pub state: AppState,
}

#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct TenantIn {
    /// A display name, 1–255 bytes.
    pub name: String,
}

/// A new tenant and its credentials. `api_key` is shown only once.
#[derive(Debug, Object)]
pub struct TenantCreatedOut {
    pub tenant_id: Uuid,
    pub name: String,
    pub api_key_id: Uuid,
    /// Server-to-server credential (`Authorization: Bearer tdk_…`). Stored only as a hash.
    pub api_key: String,
    /// HS256 key (its UTF-8 bytes) for signing user tokens with claims `sub`, `tid`, `exp`.
    pub signing_secret: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Object)]
pub struct ApiKeyOut {
    pub api_key_id: Uuid,
    /// Shown only once.
    pub api_key: String,
}

/// How long a tenant's feed is kept.
#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct FeedRetentionIn {
    /// Seconds the tenant's events and in-app feed items are kept (at least 1);
    /// `null` or absent: the server's `TIDINGS_RETENTION_FEED_SECS` (unset there:
    /// forever). A feed cursor older than this pages to the end of the feed.
    pub feed_retention_secs: Option<i64>,
}

#[derive(Debug, Object)]
pub struct FeedRetentionOut {
    pub tenant_id: Uuid,
    /// The tenant's own setting; `null`: the server's default.
    pub feed_retention_secs: Option<i64>,
}

#[derive(ApiResponse)]
pub enum FeedRetentionSet {
    #[oai(status = 200)]
    Set(Json<FeedRetentionOut>),
}

/// One token bucket: `per_second` tokens added per second (0: unlimited), at
/// most `burst` held; each request takes one.
#[derive(Debug, Clone, Copy, Object)]
#[oai(deny_unknown_fields)]
pub struct RateIn {
    /// Tokens added per second: 0 (unlimited) or 0.001 to 1,000,000.
    pub per_second: f64,
    /// Most tokens held, 1 to 1,000,000: the requests a client may send at once.
    pub burst: u32,
}

/// A tenant's own rates. A bucket left out (or `null`) takes the server's
/// default (`TIDINGS_RATE_*`); the whole set is replaced.
#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct TenantRateLimitsIn {
    /// POST /v1/events, /v1/events/batch and /v1/alerts, per tenant.
    pub writes: Option<RateIn>,
    /// Requests with a user token (but the stream's), all the tenant's users together.
    pub reads: Option<RateIn>,
    /// Requests with a user token (but the stream's), per user.
    pub user_reads: Option<RateIn>,
    /// GET /v1/feed/stream and POST /v1/feed/stream-tickets, per tenant.
    pub stream_connects: Option<RateIn>,
    /// The same, per user.
    pub user_stream_connects: Option<RateIn>,
    /// GET and HEAD requests with an API key, per tenant.
    pub key_reads: Option<RateIn>,
    /// Most streams the tenant may hold open on each instance, 1 to
    /// 1,000,000; left out: the server's share
    /// (`TIDINGS_STREAM_TENANT_SHARE_PERCENT`).
    pub open_streams: Option<u32>,
}

/// The tenant's cap on open streams as it is enforced.
#[derive(Debug, Object)]
pub struct OpenStreamsOut {
    /// Most streams the tenant may hold open on each instance.
    pub max: u32,
    /// True: the tenant's own cap; false: the server's share.
    pub own: bool,
}

/// A bucket's rate as it is enforced.
#[derive(Debug, Object)]
pub struct RateOut {
    pub per_second: f64,
    pub burst: u32,
    /// True: the tenant's own rate; false: the server's default.
    pub own: bool,
}

/// The rates a tenant's requests are held to, on each instance (buckets are
/// per instance).
#[derive(Debug, Object)]
pub struct TenantRateLimitsOut {
    pub tenant_id: Uuid,
    pub writes: RateOut,
    pub reads: RateOut,
    pub user_reads: RateOut,
    pub stream_connects: RateOut,
    pub user_stream_connects: RateOut,
    pub key_reads: RateOut,
    pub open_streams: OpenStreamsOut,
    /// Whether this server enforces rate limits at all (`TIDINGS_RATE_LIMITS`).
    pub enforced: bool,
}

#[derive(ApiResponse)]
pub enum TenantRateLimits {
    #[oai(status = 200)]
    Ok(Json<TenantRateLimitsOut>),
}

#[derive(ApiResponse)]
pub enum TenantCreated {
    #[oai(status = 201)]
    Created(Json<TenantCreatedOut>),
}

#[derive(ApiResponse)]
pub enum KeyCreated {
    #[oai(status = 201)]
    Created(Json<ApiKeyOut>),
}

#[derive(ApiResponse)]
pub enum KeyRevoked {
    #[oai(status = 204)]
    Revoked,
}

#[OpenApi(tag = "ApiTags::Admin")]
impl AdminApi {
    /// Create a tenant.
    ///
    /// The answer carries the tenant's first API key and its user-token signing
    /// secret, each shown only this once: store them. The name is a label; it
    /// need not be unique.
    #[oai(
        path = "/v1/admin/tenants",
        method = "post",
        operation_id = "admin.tenant.create"
    )]
    async fn create_tenant(
        &self,
        _auth: AdminAuth,
        body: Json<TenantIn>,
    ) -> ApiResult<TenantCreated> {
        let t = tenants::create_tenant(&self.state.pool, &self.state.secrets, &body.name)
            .await
            .map_err(tenant_problem)?;
        Ok(TenantCreated::Created(Json(TenantCreatedOut {
            tenant_id: t.tenant_id,
            name: t.name,
            api_key_id: t.api_key_id,
            api_key: t.api_key,
            signing_secret: t.signing_secret,
            created_at: t.created_at,
        })))
    }

    /// Issue another API key.
    ///
    /// For rotation: earlier keys stay valid until revoked, so a deployment can
    /// switch to the new key before the old one is revoked. The key is shown
    /// only in this answer.
    #[oai(
        path = "/v1/admin/tenants/:tenant_id/keys",
        method = "post",
        operation_id = "admin.key.create"
    )]
    async fn create_key(
        &self,
        _auth: AdminAuth,
        /// The tenant's id, as `POST /v1/admin/tenants` answered it.
        tenant_id: Path<Uuid>,
    ) -> ApiResult<KeyCreated> {
        let (api_key_id, api_key) = tenants::issue_api_key(&self.state.pool, tenant_id.0)
            .await
            .map_err(tenant_problem)?;
        Ok(KeyCreated::Created(Json(ApiKeyOut {
            api_key_id,
            api_key,
        })))
    }

    /// Revoke an API key.
    ///
    /// Takes effect at once on the instance that answers and within seconds on
    /// the others. 404 when the key is not an unrevoked key of this tenant.
    #[oai(
        path = "/v1/admin/tenants/:tenant_id/keys/:key_id",
        method = "delete",
        operation_id = "admin.key.revoke"
    )]
    async fn revoke_key(
        &self,
        _auth: AdminAuth,
        /// The tenant's id, as `POST /v1/admin/tenants` answered it.
        tenant_id: Path<Uuid>,
        /// The key's id (`api_key_id`).
        key_id: Path<Uuid>,
    ) -> ApiResult<KeyRevoked> {
        if tenants::revoke_api_key(&self.state, tenant_id.0, key_id.0).await? {
            Ok(KeyRevoked::Revoked)
        } else {
            Err(ApiError::not_found(
                ProblemCode::ApiKeyNotFound,
                "no such unrevoked key for this tenant",
            ))
        }
    }

    /// Set a tenant's own rate limits.
    ///
    /// Replaces the tenant's own rates: buckets left out take the server's
    /// defaults again. Every instance enforces them within seconds (the
    /// instance that answers, at once); a bucket whose rate changes starts full.
    #[oai(
        path = "/v1/admin/tenants/:tenant_id/rate-limits",
        method = "put",
        operation_id = "admin.tenant.rate_limits.set"
    )]
    async fn set_rate_limits(
        &self,
        _auth: AdminAuth,
        /// The tenant's id, as `POST /v1/admin/tenants` answered it.
        tenant_id: Path<Uuid>,
        body: Json<TenantRateLimitsIn>,
    ) -> ApiResult<TenantRateLimits> {
        let rates = Self::rates_in(&body)?;
        if !self
            .state
            .limits
            .set_tenant_rates(&self.state.pool, tenant_id.0, &rates)
            .await?
        {
            return Err(ApiError::not_found(
                ProblemCode::TenantNotFound,
                "no such tenant",
            ));
        }
        Ok(TenantRateLimits::Ok(Json(
            self.rate_limits_out(tenant_id.0, &rates),
        )))
    }

    /// Read a tenant's rate limits.
    ///
    /// Each bucket's rate: the tenant's own where set, else the server's
    /// default, with which of the two applies.
    #[oai(
        path = "/v1/admin/tenants/:tenant_id/rate-limits",
        method = "get",
        operation_id = "admin.tenant.rate_limits.get"
    )]
    async fn get_rate_limits(
        &self,
        _auth: AdminAuth,
        /// The tenant's id, as `POST /v1/admin/tenants` answered it.
        tenant_id: Path<Uuid>,
    ) -> ApiResult<TenantRateLimits> {
        let own = self
            .state
            .limits
            .read_tenant_rates(&self.state.pool, tenant_id.0)
            .await?
            .ok_or_else(|| ApiError::not_found(ProblemCode::TenantNotFound, "no such tenant"))?;
        Ok(TenantRateLimits::Ok(Json(
            self.rate_limits_out(tenant_id.0, &own),
        )))
    }

    /// Set how long a tenant's feed is kept.
    ///
    /// Events and in-app items older than this are deleted by the retention
    /// purge within its next rounds.
    #[oai(
        path = "/v1/admin/tenants/:tenant_id/retention",
        method = "put",
        operation_id = "admin.tenant.retention"
    )]
    async fn set_feed_retention(
        &self,
        _auth: AdminAuth,
        /// The tenant's id, as `POST /v1/admin/tenants` answered it.
        tenant_id: Path<Uuid>,
        body: Json<FeedRetentionIn>,
    ) -> ApiResult<FeedRetentionSet> {
        let secs = Self::feed_retention_in_range(body.feed_retention_secs)?;
        if !store::retention::set_feed_retention(&self.state.pool, tenant_id.0, secs).await? {
            return Err(ApiError::not_found(
                ProblemCode::TenantNotFound,
                "no such tenant",
            ));
        }
        Ok(FeedRetentionSet::Set(Json(FeedRetentionOut {
            tenant_id: tenant_id.0,
            feed_retention_secs: secs,
        })))
    }
}

impl AdminApi {
    fn rate_limits_out(&self, tenant_id: Uuid, own: &TenantRates) -> TenantRateLimitsOut {
        let out = |kind: BucketKind| {
            let rate = self.state.limits.effective(own, kind);
            RateOut {
                per_second: rate.per_second,
                burst: rate.burst,
                own: own.get(kind).is_some(),
            }
        };
        TenantRateLimitsOut {
            tenant_id,
            writes: out(BucketKind::Writes),
            reads: out(BucketKind::Reads),
            user_reads: out(BucketKind::UserReads),
            stream_connects: out(BucketKind::Streams),
            user_stream_connects: out(BucketKind::UserStreams),
            key_reads: out(BucketKind::KeyReads),
            open_streams: OpenStreamsOut {
                max: own.open_streams().unwrap_or_else(|| {
                    u32::try_from(self.state.settings.stream.tenant_share()).unwrap_or(u32::MAX)
                }),
                own: own.open_streams().is_some(),
            },
            enforced: self.state.settings.limits.rate_limits,
        }
    }

    fn rates_in(body: &TenantRateLimitsIn) -> ApiResult<TenantRates> {
        let given = [
            (BucketKind::Writes, body.writes),
            (BucketKind::Reads, body.reads),
            (BucketKind::UserReads, body.user_reads),
            (BucketKind::Streams, body.stream_connects),
            (BucketKind::UserStreams, body.user_stream_connects),
            (BucketKind::KeyReads, body.key_reads),
        ];
        let mut rates = Vec::new();
        for (kind, rate) in given {
            let Some(rate) = rate else { continue };
            let rate = Rate {
                per_second: rate.per_second,
                burst: rate.burst,
            };
            if !rate.in_range() {
                return Err(ApiError::unprocessable(
                    ProblemCode::InvalidRateLimit,
                    format!(
                        "{}: per_second must be 0 (unlimited) or {} to {}, burst 1 to {}",
                        kind.as_str(),
                        Rate::MIN_PER_SECOND,
                        Rate::MAX,
                        Rate::MAX
                    ),
                ));
            }
            rates.push((kind, rate));
        }
        if let Some(max) = body.open_streams {
            if !(1.0..=Rate::MAX).contains(&f64::from(max)) {
                return Err(ApiError::unprocessable(
                    ProblemCode::InvalidRateLimit,
                    format!("open_streams must be 1 to {}", Rate::MAX),
                ));
            }
        }
        Ok(TenantRates::new(rates).with_open_streams(body.open_streams))
    }

    fn feed_retention_in_range(secs: Option<i64>) -> ApiResult<Option<i64>> {
        match secs {
            Some(s) if s < 1 => Err(ApiError::bad_request(
                ProblemCode::InvalidRetention,
                "feed_retention_secs must be at least 1, or null for the server's default",
            )),
            other => Ok(other),
        }
    }
}

fn tenant_problem(err: TenantError) -> ApiError {
    match err {
        TenantError::InvalidName(invalid) => invalid.into(),
        TenantError::NotFound => ApiError::not_found(ProblemCode::TenantNotFound, err.to_string()),
        TenantError::Db(db) => db.into(),
    }
}
