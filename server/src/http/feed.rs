//! A user's feed (user token): pages, polling, badges, seen/read watermarks.
//! Positions, cursors and the watermark arithmetic are the core crate's — the
//! code the browser runs as WebAssembly.

use chrono::{DateTime, Utc};
use poem_openapi::{
    param::{Header, Path, Query},
    payload::Json,
    ApiResponse, Enum, Object, OpenApi,
};
use tidings_core::{ItemState, Position};

use serde::ser::{Serialize, SerializeStruct, Serializer};

use super::{
    direct_json::{rfc3339, DirectJson},
    ApiTags,
};
use crate::{
    app::state::AppState,
    db::replicas::Lsn,
    feed::{self, Badges, FeedError, FeedItem, FeedStatus, Mark, Marked, PageFrom, Source},
    http::auth::{UserCtx, UserTokenAuth},
    http::error::{ApiError, ApiResult, ProblemCode},
    store::paging,
};

pub struct FeedApi {
    pub state: AppState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum, serde::Serialize)]
#[oai(rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum ItemSource {
    /// An activity event of one of the user's teams.
    Event,
    /// A transactional in-app alert addressed to the user.
    Alert,
}

/// One feed item.
#[derive(Debug, Object)]
#[oai(example)]
pub struct FeedItemOut {
    /// Item id (unique across events and alerts); use it to mark one item read.
    pub id: i64,
    /// The item's position, for `before`, `after` and `up_to`.
    pub cursor: String,
    #[oai(rename = "type")]
    pub item_type: String,
    /// The event's team; null for alerts.
    pub team_id: Option<String>,
    pub actor_id: Option<String>,
    /// The event's object, or the alert's entity.
    pub object_id: Option<String>,
    /// Alerts only: the alert's subject line.
    #[oai(skip_serializing_if_is_none)]
    pub subject: Option<String>,
    pub payload: serde_json::Value,
    pub created_at: DateTime<Utc>,
    /// At or below the seen watermark, or read (reading implies seeing).
    pub seen: bool,
    /// At or below the read watermark, or marked read one by one.
    pub read: bool,
    pub source: ItemSource,
}

// Fields in sorted order, as `ToJSON` writes them (`super::direct_json`).
impl Serialize for FeedItemOut {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct At<'a>(&'a DateTime<Utc>);
        impl Serialize for At<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                rfc3339(self.0, s)
            }
        }
        let mut o = s.serialize_struct("FeedItemOut", 12)?;
        o.serialize_field("actor_id", &self.actor_id)?;
        o.serialize_field("created_at", &At(&self.created_at))?;
        o.serialize_field("cursor", &self.cursor)?;
        o.serialize_field("id", &self.id)?;
        o.serialize_field("object_id", &self.object_id)?;
        o.serialize_field("payload", &self.payload)?;
        o.serialize_field("read", &self.read)?;
        o.serialize_field("seen", &self.seen)?;
        o.serialize_field("source", &self.source)?;
        if let Some(subject) = &self.subject {
            o.serialize_field("subject", subject)?;
        }
        o.serialize_field("team_id", &self.team_id)?;
        o.serialize_field("type", &self.item_type)?;
        o.end()
    }
}

impl poem_openapi::types::Example for FeedItemOut {
    fn example() -> Self {
        FeedItemOut {
            id: 1_306,
            cursor: Position::new(7_415, 1_306).to_cursor(),
            item_type: "comment.created".into(),
            team_id: Some("design".into()),
            actor_id: Some("alice".into()),
            object_id: Some("doc-42".into()),
            subject: None,
            payload: serde_json::json!({"text": "Looks good to me", "doc_title": "Q3 plan"}),
            created_at: DateTime::<Utc>::UNIX_EPOCH,
            seen: true,
            read: false,
            source: ItemSource::Event,
        }
    }
}

/// A page of the feed, newest first.
#[derive(Debug, Object)]
#[oai(example)]
pub struct FeedOut {
    pub items: Vec<FeedItemOut>,
    /// Pass as `before` for the next older page; null when there is none (and
    /// always null on an `after` page).
    pub next_before: Option<String>,
    /// Poll with `after=head` for what is new, and send it as `up_to` to mark
    /// what was shown. Without `after`: the newest item visible in the whole
    /// feed (null when the feed is empty). With `after`: the newest item of
    /// this page, or, when the page is empty, the newest item of the feed or
    /// the cursor, whichever is later — never behind the cursor, whichever
    /// server (primary or hot standby) answered.
    pub head: Option<String>,
    /// Unread items in the whole feed, exact up to 1,000 (then 1,000 and
    /// `counts_capped`).
    pub unread_count: u32,
    /// Unseen items in the whole feed, likewise capped.
    pub unseen_count: u32,
    /// True when a count passed 1,000 (show "1000+").
    pub counts_capped: bool,
}

// Fields in sorted order, as `ToJSON` writes them (`super::direct_json`).
impl Serialize for FeedOut {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut o = s.serialize_struct("FeedOut", 6)?;
        o.serialize_field("counts_capped", &self.counts_capped)?;
        o.serialize_field("head", &self.head)?;
        o.serialize_field("items", &self.items)?;
        o.serialize_field("next_before", &self.next_before)?;
        o.serialize_field("unread_count", &self.unread_count)?;
        o.serialize_field("unseen_count", &self.unseen_count)?;
        o.end()
    }
}

impl poem_openapi::types::Example for FeedOut {
    fn example() -> Self {
        let item = <FeedItemOut as poem_openapi::types::Example>::example();
        FeedOut {
            head: Some(item.cursor.clone()),
            next_before: Some(item.cursor.clone()),
            items: vec![item],
            unread_count: 3,
            unseen_count: 1,
            counts_capped: false,
        }
    }
}

/// Where to move a watermark to.
#[derive(Debug, Object)]
#[oai(deny_unknown_fields, example)]
pub struct MarkIn {
    /// The position the client last received (normally the `head` it was
    /// given). Absent: the current head. A cursor beyond the head is clamped to
    /// it; a cursor behind the watermark changes nothing.
    pub up_to: Option<String>,
}

impl poem_openapi::types::Example for MarkIn {
    fn example() -> Self {
        MarkIn {
            up_to: Some(Position::new(7_415, 1_306).to_cursor()),
        }
    }
}

/// The user's watermarks and fresh badge counts.
#[derive(Debug, Object)]
#[oai(example)]
pub struct WatermarksOut {
    /// Everything at or below is seen: the later of the seen and read
    /// watermarks, since reading implies seeing. Null: nothing yet.
    pub seen: Option<String>,
    /// Everything at or below is read. Null: nothing yet.
    pub read: Option<String>,
    pub unread_count: u32,
    pub unseen_count: u32,
    /// True when a count passed 1,000.
    pub counts_capped: bool,
}

impl poem_openapi::types::Example for WatermarksOut {
    fn example() -> Self {
        let at = Position::new(7_415, 1_306).to_cursor();
        WatermarksOut {
            seen: Some(at.clone()),
            read: Some(at),
            unread_count: 0,
            unseen_count: 0,
            counts_capped: false,
        }
    }
}

/// Badge counts.
#[derive(Debug, Object)]
#[oai(example)]
pub struct CountsOut {
    /// Items above the read watermark not read one by one; exact up to 1,000.
    pub unread: u32,
    /// Items above the seen watermark (or read watermark, if later) not read
    /// one by one; exact up to 1,000.
    pub unseen: u32,
    /// True when a count passed 1,000: the count reads 1,000, show "1000+".
    pub capped: bool,
}

// Fields in sorted order, as `ToJSON` writes them (`super::direct_json`).
impl Serialize for CountsOut {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut o = s.serialize_struct("CountsOut", 3)?;
        o.serialize_field("capped", &self.capped)?;
        o.serialize_field("unread", &self.unread)?;
        o.serialize_field("unseen", &self.unseen)?;
        o.end()
    }
}

impl poem_openapi::types::Example for CountsOut {
    fn example() -> Self {
        CountsOut {
            unread: 12,
            unseen: 3,
            capped: false,
        }
    }
}

/// A changed watermark.
#[derive(ApiResponse)]
pub enum MarkResponse {
    /// The watermarks after the change.
    #[oai(status = 200)]
    Ok(
        Json<WatermarksOut>,
        /// The change's consistency token, when reads may be served by hot
        /// standbys: send it back in the header of the same name on a read
        /// that must reflect the change (this server also remembers it for
        /// the user's next reads for a minute).
        #[oai(header = "Tidings-Consistency-Token")]
        Option<String>,
    ),
}

/// A consistency token from a header, if any: a bad one is refused, never ignored.
fn consistency_token(header: Option<&str>) -> ApiResult<Option<Lsn>> {
    header
        .filter(|h| !h.is_empty())
        .map(|h| {
            h.parse::<Lsn>().map_err(|e| {
                ApiError::bad_request(
                    ProblemCode::InvalidConsistencyToken,
                    format!("Tidings-Consistency-Token: {e}"),
                )
            })
        })
        .transpose()
}

#[OpenApi(tag = "ApiTags::Feed")]
impl FeedApi {
    /// Read the feed, newest first.
    ///
    /// The feed holds the events of the user's teams positioned after their
    /// join, and their in-app alerts. Items are ordered by position (the
    /// writing transaction, then the item id) and served only once every
    /// transaction that could still add an item below them has ended, so paging
    /// with `before` and polling with `after` never skip an item.
    ///
    /// - no cursor: the newest `limit` items.
    /// - `before`: the newest `limit` items older than the cursor (next page:
    ///   `before=next_before`).
    /// - `after`: the **oldest** `limit` items newer than the cursor, answered
    ///   newest first; `head` is the newest of them, so polling with
    ///   `after=head` until a page comes back with fewer than `limit` items
    ///   visits every new item exactly once, however large the backlog.
    #[oai(path = "/v1/feed", method = "get", operation_id = "feed.list")]
    async fn list(
        &self,
        auth: UserTokenAuth,
        /// Page size, 1–100 (default 20).
        limit: Query<Option<u32>>,
        /// Items older than this cursor (`next_before` of the previous page).
        before: Query<Option<String>>,
        /// Items newer than this cursor (`head` of the previous answer).
        after: Query<Option<String>>,
        /// The consistency token of a change this read must reflect (from the
        /// answer to a mark).
        #[oai(name = "Tidings-Consistency-Token")]
        consistency: Header<Option<String>>,
    ) -> ApiResult<DirectJson<FeedOut>> {
        let limit = paging::limit(limit.0, feed::DEFAULT_LIMIT, feed::MAX_LIMIT)?;
        let token = consistency_token(consistency.0.as_deref())?;
        let from = match (before.0.as_deref(), after.0.as_deref()) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_request(
                    ProblemCode::ConflictingCursors,
                    "pass either before or after, not both",
                ))
            }
            (Some(b), None) => PageFrom::Before(Some(Position::from_cursor(b)?)),
            (None, Some(a)) => PageFrom::After(Position::from_cursor(a)?),
            (None, None) => PageFrom::Before(None),
        };
        let user = auth.0;
        let page = feed::read_page(
            &self.state,
            user.tenant_id,
            &user.user_id,
            from,
            limit,
            token,
        )
        .await
        .map_err(feed_problem)?;
        Ok(DirectJson(FeedOut {
            items: page
                .items
                .into_iter()
                .map(|(item, state)| item_out(item, state))
                .collect(),
            next_before: page.next_before.map(|p| p.to_cursor()),
            head: page.head.map(|p| p.to_cursor()),
            unread_count: page.badges.unread,
            unseen_count: page.badges.unseen,
            counts_capped: page.badges.capped,
        }))
    }

    /// Badge counts.
    ///
    /// Unread and unseen items of the whole feed, exact up to 1,000 (then 1,000
    /// and `capped`). Cheaper than a feed page: poll this for a badge, or follow
    /// the stream's `marks` and `item` events.
    #[oai(path = "/v1/feed/counts", method = "get", operation_id = "feed.counts")]
    async fn counts(
        &self,
        auth: UserTokenAuth,
        /// The consistency token of a change these counts must reflect.
        #[oai(name = "Tidings-Consistency-Token")]
        consistency: Header<Option<String>>,
    ) -> ApiResult<DirectJson<CountsOut>> {
        let token = consistency_token(consistency.0.as_deref())?;
        let user = auth.0;
        let status = feed::status(&self.state, user.tenant_id, &user.user_id, token)
            .await
            .map_err(feed_problem)?;
        Ok(DirectJson(CountsOut {
            unread: status.badges.unread,
            unseen: status.badges.unseen,
            capped: status.badges.capped,
        }))
    }

    /// Mark everything up to a position seen.
    ///
    /// The seen watermark moves to `up_to` (or the current head), clamped to
    /// the head, and never moves back: a late or replayed request changes
    /// nothing.
    #[oai(
        path = "/v1/feed/seen",
        method = "post",
        operation_id = "feed.mark_seen"
    )]
    async fn mark_seen(&self, auth: UserTokenAuth, body: Json<MarkIn>) -> ApiResult<MarkResponse> {
        self.mark(auth.0, Mark::Seen, body.0).await
    }

    /// Mark everything up to a position read.
    ///
    /// The read watermark moves to `up_to` (or the current head), clamped to
    /// the head, and never moves back. Reading implies seeing: items at or
    /// below the read watermark count as seen (the seen watermark itself is
    /// left alone; the answer's `seen` is the later of the two).
    #[oai(
        path = "/v1/feed/read",
        method = "post",
        operation_id = "feed.mark_read"
    )]
    async fn mark_read(&self, auth: UserTokenAuth, body: Json<MarkIn>) -> ApiResult<MarkResponse> {
        self.mark(auth.0, Mark::Read, body.0).await
    }

    /// Mark one item read.
    ///
    /// For items above the read watermark. At most 1,000 items can be read one
    /// by one above it (then 422 `too_many_individual_reads`: mark all read);
    /// entries are dropped as the watermark passes them. 404 when the item is
    /// not in this user's feed.
    #[oai(
        path = "/v1/feed/items/:id/read",
        method = "post",
        operation_id = "feed.items.mark_read"
    )]
    async fn mark_item_read(
        &self,
        auth: UserTokenAuth,
        /// The item's `id`.
        id: Path<i64>,
    ) -> ApiResult<MarkResponse> {
        let user = auth.0;
        let marked = feed::mark_item_read(&self.state, user.tenant_id, &user.user_id, id.0)
            .await
            .map_err(feed_problem)?;
        Ok(mark_response(marked))
    }
}

impl FeedApi {
    async fn mark(&self, user: UserCtx, mark: Mark, body: MarkIn) -> ApiResult<MarkResponse> {
        let proposed = body
            .up_to
            .as_deref()
            .map(Position::from_cursor)
            .transpose()?;
        let marked = feed::mark_up_to(&self.state, user.tenant_id, &user.user_id, mark, proposed)
            .await
            .map_err(feed_problem)?;
        Ok(mark_response(marked))
    }
}

fn feed_problem(err: FeedError) -> ApiError {
    match err {
        FeedError::ItemNotFound(_) => {
            ApiError::not_found(ProblemCode::ItemNotFound, err.to_string())
        }
        FeedError::TooManyIndividualReads(full) => {
            ApiError::unprocessable(ProblemCode::TooManyIndividualReads, full.to_string())
        }
        FeedError::Db(db) => db.into(),
    }
}

pub(super) fn item_out(item: FeedItem, state: ItemState) -> FeedItemOut {
    FeedItemOut {
        id: item.position.id,
        cursor: item.position.to_cursor(),
        item_type: item.item_type,
        team_id: item.team_id,
        actor_id: item.actor_id,
        object_id: item.object_id,
        subject: item.subject,
        payload: item.payload,
        created_at: item.created_at,
        seen: state.seen,
        read: state.read,
        source: match item.source {
            Source::Event => ItemSource::Event,
            Source::Alert => ItemSource::Alert,
        },
    }
}

fn mark_response(marked: Marked) -> MarkResponse {
    MarkResponse::Ok(
        Json(watermarks_out(marked.status)),
        marked.token.map(|t| t.to_string()),
    )
}

fn cursor_or_null(p: Position) -> Option<String> {
    (p != Position::ORIGIN).then(|| p.to_cursor())
}

pub(super) fn watermarks_out(status: FeedStatus) -> WatermarksOut {
    let FeedStatus {
        marks,
        badges: Badges {
            unread,
            unseen,
            capped,
        },
    } = status;
    WatermarksOut {
        seen: cursor_or_null(marks.effective_seen()),
        read: cursor_or_null(marks.read),
        unread_count: unread,
        unseen_count: unseen,
        counts_capped: capped,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use poem_openapi::types::{Example, ToJSON};
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;
    use crate::http::direct_json::same_bytes_as_to_json;

    /// Any JSON a payload column could hold: nested objects with keys in any
    /// order, escapes and non-ASCII text, integers of either sign and floats.
    fn payload() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e12f64..1e12).prop_map(Value::from),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((".{0,6}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    fn item() -> impl Strategy<Value = FeedItemOut> {
        (
            (any::<i64>(), ".{0,12}", ".{0,12}"),
            (
                prop::option::of(".{0,8}"),
                prop::option::of(".{0,8}"),
                prop::option::of(".{0,8}"),
                prop::option::of(".{0,8}"),
            ),
            payload(),
            // Whole seconds, milliseconds, microseconds and nanoseconds: the
            // fraction's width is where RFC 3339 writers differ.
            (
                0i64..4_102_444_800,
                prop_oneof![
                    Just(0u32),
                    (0u32..1_000).prop_map(|ms| ms * 1_000_000),
                    (0u32..1_000_000).prop_map(|us| us * 1_000),
                    0u32..1_000_000_000,
                ],
            ),
            (any::<bool>(), any::<bool>(), any::<bool>()),
        )
            .prop_map(
                |(
                    (id, cursor, item_type),
                    (team_id, actor_id, object_id, subject),
                    payload,
                    (secs, nanos),
                    (seen, read, alert),
                )| {
                    FeedItemOut {
                        id,
                        cursor,
                        item_type,
                        team_id,
                        actor_id,
                        object_id,
                        subject,
                        payload,
                        created_at: Utc.timestamp_opt(secs, nanos).unwrap(),
                        seen,
                        read,
                        source: if alert {
                            ItemSource::Alert
                        } else {
                            ItemSource::Event
                        },
                    }
                },
            )
    }

    fn page() -> impl Strategy<Value = FeedOut> {
        (
            prop::collection::vec(item(), 0..4),
            prop::option::of(".{0,12}"),
            prop::option::of(".{0,12}"),
            any::<u32>(),
            any::<u32>(),
            any::<bool>(),
        )
            .prop_map(
                |(items, next_before, head, unread_count, unseen_count, counts_capped)| FeedOut {
                    items,
                    next_before,
                    head,
                    unread_count,
                    unseen_count,
                    counts_capped,
                },
            )
    }

    #[test]
    fn the_documented_examples_serialise_as_to_json_does() {
        assert!(same_bytes_as_to_json(&FeedOut::example()));
        assert!(same_bytes_as_to_json(&CountsOut::example()));
        let mut alert = FeedItemOut::example();
        alert.subject = Some("Invoice overdue".into());
        alert.team_id = None;
        alert.source = ItemSource::Alert;
        assert!(same_bytes_as_to_json(&alert));
    }

    proptest! {
        #[test]
        fn a_feed_page_serialises_as_to_json_does(page in page()) {
            prop_assert!(
                same_bytes_as_to_json(&page),
                "serde: {}\nToJSON: {}",
                serde_json::to_string(&page).unwrap(),
                serde_json::to_string(&page.to_json()).unwrap()
            );
        }

        #[test]
        fn counts_serialise_as_to_json_does(unread: u32, unseen: u32, capped: bool) {
            let counts = CountsOut { unread, unseen, capped };
            prop_assert!(same_bytes_as_to_json(&counts));
        }
    }
}
