//! Recipients' contact data: `PUT/GET/DELETE /v1/users/{user_id}`.

use chrono::{DateTime, Utc};
use poem_openapi::{param::Path, payload::Json, ApiResponse, Object, OpenApi};
use tidings_core::UserId;

use super::ApiTags;
use crate::{
    alerts::quiet_hours::QuietHours,
    alerts::templates::locale::{self, Locale},
    app::state::AppState,
    http::auth::ApiKeyAuth,
    http::error::{ApiError, ApiResult, ProblemCode},
    store::users::{self, ContactData, UserRow},
};

pub struct UsersApi {
    pub state: AppState,
}

pub const MAX_EMAIL_BYTES: usize = 254;
pub const MAX_DISPLAY_NAME_BYTES: usize = 255;

#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct UserIn {
    /// Where email alerts go. Without one, email alerts to this user are `skipped`.
    pub email: Option<String>,
    pub display_name: Option<String>,
    /// BCP 47 language tag (`fr-BE`): the locale templates are chosen in
    /// (the user's, then its language, the tenant's default, then `en`).
    /// Stored in canonical case.
    pub locale: Option<String>,
    /// IANA time zone name (`Europe/Brussels`): dates in templates are shown
    /// in it, and quiet hours are kept in it (UTC when unset).
    pub timezone: Option<String>,
    /// A daily window in which the user's non-critical email and webhook
    /// deliveries wait; in-app items are never held.
    pub quiet_hours: Option<QuietHoursIn>,
}

/// A daily window, local time in the user's time zone: a delivery due inside
/// it goes out at its end. `start` after `end` crosses midnight (`22:00` to
/// `07:00`). Applied when the alert is written; a critical category passes.
#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct QuietHoursIn {
    /// `HH:MM` or `HH:MM:SS`, inclusive.
    pub start: String,
    /// `HH:MM` or `HH:MM:SS`, exclusive; not equal to `start`.
    pub end: String,
}

/// Quiet hours as stored: `HH:MM:SS`, local time in the user's time zone.
#[derive(Debug, Object)]
pub struct QuietHoursOut {
    pub start: String,
    pub end: String,
}

#[derive(Debug, Object)]
pub struct UserOut {
    pub user_id: String,
    pub email: Option<String>,
    pub display_name: Option<String>,
    pub locale: Option<String>,
    pub timezone: Option<String>,
    pub quiet_hours: Option<QuietHoursOut>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<UserRow> for UserOut {
    fn from(r: UserRow) -> Self {
        UserOut {
            user_id: r.user_id,
            email: r.email,
            display_name: r.display_name,
            locale: r.locale,
            timezone: r.timezone,
            quiet_hours: r
                .quiet_start
                .zip(r.quiet_end)
                .map(|(start, end)| QuietHoursOut {
                    start: start.format("%H:%M:%S").to_string(),
                    end: end.format("%H:%M:%S").to_string(),
                }),
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[derive(ApiResponse)]
pub enum UserResponse {
    #[oai(status = 200)]
    Ok(Json<UserOut>),
}

#[derive(ApiResponse)]
pub enum UserDeleted {
    /// The contact data is gone. Notifications already written are kept.
    #[oai(status = 204)]
    Deleted,
}

/// Deliberately minimal: one `@` with something on both sides, no whitespace or
/// control characters, at most 254 bytes (RFC 5321's path limit). The SMTP
/// server is the judge of the rest.
pub fn validate_email(email: &str) -> ApiResult<()> {
    let bad = |why: &str| {
        Err(ApiError::unprocessable(
            ProblemCode::InvalidEmail,
            format!("email {why}"),
        ))
    };
    if email.len() > MAX_EMAIL_BYTES {
        return bad("is longer than 254 bytes");
    }
    if email.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("must not contain whitespace or control characters");
    }
    match email.split_once('@') {
        Some((local, domain))
            if !local.is_empty() && !domain.is_empty() && !domain.contains('@') =>
        {
            Ok(())
        }
        _ => bad("must be of the form local@domain"),
    }
}

#[OpenApi(tag = "ApiTags::Users")]
impl UsersApi {
    /// Create or replace a recipient's contact data.
    ///
    /// Email, display name, locale (BCP 47, for templates), IANA time zone and
    /// quiet hours.
    /// Fields left out are cleared. Feeds and memberships do not need this; only
    /// email and templated deliveries do.
    #[oai(
        path = "/v1/users/:user_id",
        method = "put",
        operation_id = "users.put"
    )]
    async fn put(
        &self,
        auth: ApiKeyAuth,
        /// The user, as the tenant names them (1–255 bytes, no control characters).
        user_id: Path<String>,
        body: Json<UserIn>,
    ) -> ApiResult<UserResponse> {
        let user = UserId::parse(user_id.0)?;
        if let Some(email) = &body.email {
            validate_email(email)?;
        }
        if let Some(name) = &body.display_name {
            if name.len() > MAX_DISPLAY_NAME_BYTES || name.chars().any(char::is_control) {
                return Err(ApiError::unprocessable(
                    ProblemCode::InvalidDisplayName,
                    "display_name must be at most 255 bytes without control characters",
                ));
            }
        }
        let locale = body
            .locale
            .as_deref()
            .map(Locale::parse)
            .transpose()
            .map_err(|e| ApiError::unprocessable(ProblemCode::InvalidLocale, e.to_string()))?;
        if let Some(timezone) = &body.timezone {
            locale::parse_timezone(timezone).map_err(|e| {
                ApiError::unprocessable(ProblemCode::InvalidTimezone, e.to_string())
            })?;
        }
        let quiet_hours = body
            .quiet_hours
            .as_ref()
            .map(|q| QuietHours::parse(&q.start, &q.end))
            .transpose()
            .map_err(|e| ApiError::unprocessable(ProblemCode::InvalidQuietHours, e.to_string()))?;
        let row = users::upsert_user(
            &self.state.pool,
            auth.0.tenant_id,
            &user,
            ContactData {
                email: body.email.as_deref(),
                display_name: body.display_name.as_deref(),
                locale: locale.as_ref().map(Locale::as_str),
                timezone: body.timezone.as_deref(),
                quiet_hours: quiet_hours.map(|q| (q.start, q.end)),
            },
        )
        .await?;
        Ok(UserResponse::Ok(Json(row.into())))
    }

    /// Read a recipient's contact data.
    ///
    /// 404 when none was stored for this user.
    #[oai(
        path = "/v1/users/:user_id",
        method = "get",
        operation_id = "users.get"
    )]
    async fn get(
        &self,
        auth: ApiKeyAuth,
        /// The user, as the tenant names them (1–255 bytes, no control characters).
        user_id: Path<String>,
    ) -> ApiResult<UserResponse> {
        let user = UserId::parse(user_id.0)?;
        let row = users::get_user(&self.state.pool, auth.0.tenant_id, &user)
            .await?
            .ok_or_else(|| ApiError::not_found(ProblemCode::UserNotFound, "no such user"))?;
        Ok(UserResponse::Ok(Json(row.into())))
    }

    /// Forget a recipient's contact data.
    ///
    /// Later alerts find no email address for the user: their emails are
    /// `skipped`.
    #[oai(
        path = "/v1/users/:user_id",
        method = "delete",
        operation_id = "users.delete"
    )]
    async fn delete(
        &self,
        auth: ApiKeyAuth,
        /// The user, as the tenant names them (1–255 bytes, no control characters).
        user_id: Path<String>,
    ) -> ApiResult<UserDeleted> {
        let user = UserId::parse(user_id.0)?;
        if users::delete_user(&self.state.pool, auth.0.tenant_id, &user).await? {
            Ok(UserDeleted::Deleted)
        } else {
            Err(ApiError::not_found(
                ProblemCode::UserNotFound,
                "no such user",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::validate_email;

    #[test]
    fn email_shape_is_checked_minimally() {
        assert!(validate_email("a@b").is_ok());
        assert!(validate_email("first.last+tag@example.co.uk").is_ok());
        for bad in [
            "",
            "ab",
            "@b",
            "a@",
            "a@b@c",
            "a b@c",
            "a@b\n",
            &format!("{}@b", "a".repeat(253)),
        ] {
            assert!(validate_email(bad).is_err(), "{bad:?} accepted");
        }
    }
}
