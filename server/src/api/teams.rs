//! Team memberships (API key). A member sees the team's events whose feed
//! position is after the membership's own; removing a member hides the team's
//! events from their feed and badges at once, on every instance.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use chrono::{DateTime, Utc};
use poem_openapi::{
    param::{Path, Query},
    payload::Json,
    ApiResponse, Object, OpenApi,
};

use super::ApiTags;
use crate::{
    auth::ApiKeyAuth,
    error::{ApiError, ApiResult},
    state::AppState,
    store::{self, teams::MemberRow},
};

pub struct TeamsApi {
    pub state: AppState,
}

/// A team membership.
#[derive(Debug, Object)]
#[oai(example)]
pub struct MemberOut {
    pub team_id: String,
    pub user_id: String,
    /// The feed position of the join: the member sees the team's events after
    /// it. Re-adding an existing member keeps it.
    pub joined_cursor: String,
    pub created_at: DateTime<Utc>,
}

impl poem_openapi::types::Example for MemberOut {
    fn example() -> Self {
        MemberOut {
            team_id: "design".into(),
            user_id: "alice".into(),
            joined_cursor: tidings_core::Position::new(7_412, 1_305).to_cursor(),
            created_at: DateTime::<Utc>::UNIX_EPOCH,
        }
    }
}

impl From<MemberRow> for MemberOut {
    fn from(row: MemberRow) -> Self {
        MemberOut {
            joined_cursor: row.joined().to_cursor(),
            team_id: row.team_id,
            user_id: row.user_id,
            created_at: row.created_at,
        }
    }
}

/// One page of a team's members, ordered by user id.
#[derive(Debug, Object)]
pub struct MemberPage {
    pub members: Vec<MemberOut>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

#[derive(ApiResponse)]
pub enum PutMemberResponse {
    /// The user joined the team now.
    #[oai(status = 201)]
    Created(Json<MemberOut>),
    /// The user already was a member; nothing changed.
    #[oai(status = 200)]
    Existing(Json<MemberOut>),
}

#[derive(ApiResponse)]
pub enum DeleteMemberResponse {
    /// Removed; the team's events left the user's feed.
    #[oai(status = 204)]
    Removed,
}

const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 100;

#[OpenApi(tag = "ApiTags::Teams")]
impl TeamsApi {
    /// Add a member to a team.
    ///
    /// Idempotent: 201 the first time, 200 with the unchanged membership after.
    /// The member sees the team's events written after the join: each event and
    /// each membership has a feed position (the writing transaction, then a
    /// sequence number), and a member's feed holds the team's events positioned
    /// after the membership. Events written by transactions that were still open
    /// when the membership was written may fall on either side.
    #[oai(
        path = "/v1/teams/:team_id/members/:user_id",
        method = "put",
        operation_id = "teams.members.put"
    )]
    async fn put_member(
        &self,
        auth: ApiKeyAuth,
        team_id: Path<String>,
        user_id: Path<String>,
    ) -> ApiResult<PutMemberResponse> {
        tidings_core::validate_id("team_id", &team_id)?;
        tidings_core::validate_id("user_id", &user_id)?;
        let tenant_id = auth.0.tenant_id;
        let (row, created) =
            store::teams::add_member(&self.state.pool, tenant_id, &team_id, &user_id).await?;
        // This instance hears its own NOTIFY too; dropping the entry now makes
        // the change visible here without waiting for that round trip.
        self.state
            .caches
            .memberships
            .invalidate(tenant_id, &user_id)
            .await;
        Ok(if created {
            PutMemberResponse::Created(Json(row.into()))
        } else {
            PutMemberResponse::Existing(Json(row.into()))
        })
    }

    /// Remove a member from a team.
    ///
    /// The team's events disappear from the user's feed and badge counts at
    /// once, on every server instance. Re-adding the user later starts a new
    /// join position: events between leaving and re-joining stay hidden.
    #[oai(
        path = "/v1/teams/:team_id/members/:user_id",
        method = "delete",
        operation_id = "teams.members.delete"
    )]
    async fn delete_member(
        &self,
        auth: ApiKeyAuth,
        team_id: Path<String>,
        user_id: Path<String>,
    ) -> ApiResult<DeleteMemberResponse> {
        tidings_core::validate_id("team_id", &team_id)?;
        tidings_core::validate_id("user_id", &user_id)?;
        let tenant_id = auth.0.tenant_id;
        let removed =
            store::teams::remove_member(&self.state.pool, tenant_id, &team_id, &user_id).await?;
        self.state
            .caches
            .memberships
            .invalidate(tenant_id, &user_id)
            .await;
        if removed {
            Ok(DeleteMemberResponse::Removed)
        } else {
            Err(ApiError::not_found(
                "membership_not_found",
                format!("{:?} is not a member of team {:?}", &*user_id, &*team_id),
            ))
        }
    }

    /// List a team's members, ordered by user id.
    #[oai(
        path = "/v1/teams/:team_id/members",
        method = "get",
        operation_id = "teams.members.list"
    )]
    async fn list_members(
        &self,
        auth: ApiKeyAuth,
        team_id: Path<String>,
        /// Page size, 1–100 (default 50).
        limit: Query<Option<u32>>,
        /// `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<MemberPage>> {
        tidings_core::validate_id("team_id", &team_id)?;
        let limit = limit.0.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::bad_request(
                "invalid_limit",
                format!("limit must be 1..={MAX_LIMIT}"),
            ));
        }
        let after_user = cursor.0.as_deref().map(decode_member_cursor).transpose()?;
        let mut rows = store::teams::list_members(
            &self.state.pool,
            auth.0.tenant_id,
            &team_id,
            after_user.as_deref(),
            i64::from(limit) + 1,
        )
        .await?;
        let next_cursor = if rows.len() > limit as usize {
            rows.truncate(limit as usize);
            rows.last().map(|r| URL_SAFE_NO_PAD.encode(&r.user_id))
        } else {
            None
        };
        Ok(Json(MemberPage {
            members: rows.into_iter().map(MemberOut::from).collect(),
            next_cursor,
        }))
    }
}

/// A member cursor is the last user id of the previous page, base64url-encoded
/// so any id survives a query string.
fn decode_member_cursor(cursor: &str) -> Result<String, ApiError> {
    let invalid = || ApiError::bad_request("invalid_cursor", "not a member list cursor");
    let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| invalid())?;
    let user_id = String::from_utf8(bytes).map_err(|_| invalid())?;
    tidings_core::validate_id("cursor", &user_id).map_err(|_| invalid())?;
    Ok(user_id)
}
