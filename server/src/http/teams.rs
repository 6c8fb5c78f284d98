//! Team memberships (API key). A member sees the team's events whose feed
//! position is after the membership's own; removing a member hides the team's
//! events from their feed and badges at once, on every instance.

use chrono::{DateTime, Utc};
use poem_openapi::{
    param::{Path, Query},
    payload::Json,
    ApiResponse, Object, OpenApi,
};

use super::ApiTags;
use tidings_core::{TeamId, UserId};

use crate::{
    app::state::AppState,
    feed::teams::{self, MemberRow},
    http::auth::ApiKeyAuth,
    http::error::{ApiError, ApiResult, ProblemCode},
    store::paging::PageRequest,
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
            team_id: row.team_id.into_string(),
            user_id: row.user_id.into_string(),
            created_at: row.created_at,
        }
    }
}

/// One page of a team's members, ordered by user id.
#[derive(Debug, Object)]
pub struct MemberPage {
    pub data: Vec<MemberOut>,
    /// Pass as `cursor` for the next page; null on the last page (a page has
    /// a cursor exactly when more members follow).
    pub next_cursor: Option<String>,
}

#[derive(ApiResponse)]
pub enum PutMemberResponse {
    /// The user joined the team now.
    #[oai(status = 201)]
    Created(
        Json<MemberOut>,
        /// The change's consistency token, when reads may be served by hot
        /// standbys: a read sent with it in the header of the same name
        /// reflects the change (the member's own reads on this server do for
        /// a minute without it).
        #[oai(header = "Tidings-Consistency-Token")]
        Option<String>,
    ),
    /// The user already was a member; nothing changed.
    #[oai(status = 200)]
    Existing(Json<MemberOut>),
}

#[derive(ApiResponse)]
pub enum DeleteMemberResponse {
    /// Removed; the team's events left the user's feed.
    #[oai(status = 204)]
    Removed(
        /// The change's consistency token, when reads may be served by hot
        /// standbys: a read sent with it in the header of the same name
        /// reflects the change (the member's own reads on this server do for
        /// a minute without it).
        #[oai(header = "Tidings-Consistency-Token")]
        Option<String>,
    ),
}

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
        /// The team, as the tenant names it (1–255 bytes, no control characters).
        team_id: Path<String>,
        /// The user, as the tenant names them (1–255 bytes, no control characters).
        user_id: Path<String>,
    ) -> ApiResult<PutMemberResponse> {
        let team = TeamId::parse(team_id.0)?;
        let user = UserId::parse(user_id.0)?;
        let change = teams::add_member(&self.state, auth.0.tenant_id, &team, &user)
            .await
            .map_err(|err| match err {
                err @ teams::AddMemberError::TooMany { .. } => {
                    ApiError::unprocessable(ProblemCode::MembershipLimit, err.to_string())
                }
                teams::AddMemberError::Db(db) => db.into(),
            })?;
        let (row, created) = change.outcome;
        Ok(if created {
            PutMemberResponse::Created(Json(row.into()), change.token.map(|t| t.to_string()))
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
        /// The team, as the tenant names it (1–255 bytes, no control characters).
        team_id: Path<String>,
        /// The user, as the tenant names them (1–255 bytes, no control characters).
        user_id: Path<String>,
    ) -> ApiResult<DeleteMemberResponse> {
        let team = TeamId::parse(team_id.0)?;
        let user = UserId::parse(user_id.0)?;
        let change = teams::remove_member(&self.state, auth.0.tenant_id, &team, &user).await?;
        if change.outcome {
            Ok(DeleteMemberResponse::Removed(
                change.token.map(|t| t.to_string()),
            ))
        } else {
            Err(ApiError::not_found(
                ProblemCode::MembershipNotFound,
                format!(
                    "{:?} is not a member of team {:?}",
                    user.as_str(),
                    team.as_str()
                ),
            ))
        }
    }

    /// List a team's members.
    ///
    /// Ordered by user id, a page at a time: pass `next_cursor` as `cursor` for
    /// the next page. An unknown team is an empty page (teams exist through
    /// their members).
    #[oai(
        path = "/v1/teams/:team_id/members",
        method = "get",
        operation_id = "teams.members.list"
    )]
    async fn list_members(
        &self,
        auth: ApiKeyAuth,
        /// The team, as the tenant names it (1–255 bytes, no control characters).
        team_id: Path<String>,
        /// Page size, 1–100 (default 50).
        limit: Query<Option<u32>>,
        /// `next_cursor` of the previous page (opaque).
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<MemberPage>> {
        let team = TeamId::parse(team_id.0)?;
        let page = PageRequest::parse(
            cursor.0.as_deref(),
            limit.0,
            teams::DEFAULT_LIMIT,
            teams::MAX_LIMIT,
        )?;
        let page = teams::list_members(&self.state, auth.0.tenant_id, &team, &page).await?;
        let page = page.map(MemberOut::from);
        Ok(Json(MemberPage {
            data: page.items,
            next_cursor: page.next_cursor,
        }))
    }
}
