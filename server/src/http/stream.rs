//! The live feed over Server-Sent Events (user token or stream ticket), and
//! the tickets `EventSource` needs. The stream itself is `crate::stream`.

use std::{task::Poll, time::Duration};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use poem::{web::sse::Event, Body, IntoResponse, Response};
use poem_openapi::{
    param::{Header, Query},
    payload::{EventStream, Json},
    registry::{MetaResponses, Registry},
    types::ToJSON,
    ApiResponse, Enum, Object, OpenApi, Union,
};
use tidings_core::Position;
use tokio::time::Instant;

use super::{
    feed::{item_out, watermarks_out, FeedItemOut, WatermarksOut},
    ApiTags,
};
use crate::{
    app::state::AppState,
    http::auth::{StreamAuth, UserTokenAuth},
    http::error::{ApiError, ApiResult},
    stream::{self, OpenError, RegisterError, ResetReason, Resume, StreamMessage},
};

/// A comment line this often keeps proxies from closing an idle stream.
const HEARTBEAT: Duration = Duration::from_secs(15);

pub struct StreamApi {
    pub state: AppState,
}

/// A stream ticket: pass it as `?ticket=` within a minute, once.
#[derive(Debug, Object)]
pub struct StreamTicketOut {
    pub ticket: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(ApiResponse)]
pub enum TicketCreated {
    #[oai(status = 201)]
    Created(Json<StreamTicketOut>),
}

/// Data of a `marks` event: the user's watermarks and badge counts after a
/// change from any tab, device or instance.
#[derive(Debug, Object)]
pub struct MarksEventOut {
    #[oai(flatten)]
    pub watermarks: WatermarksOut,
    /// The change's consistency token, when reads may be served by hot
    /// standbys (absent otherwise): send it as `Tidings-Consistency-Token` on
    /// the next read, on any instance, and that read reflects the change.
    #[oai(skip_serializing_if_is_none)]
    pub consistency_token: Option<String>,
}

/// Data of a `membership` event: the user left this team; drop its items.
#[derive(Debug, Object)]
pub struct MembershipEventOut {
    pub team_id: String,
    /// Always true.
    pub removed: bool,
}

/// Why the stream ends with `reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum ResetReasonOut {
    /// The resume cursor (`Last-Event-ID` or `after`) does not decode.
    InvalidCursor,
    /// More items than the replay limit lie after the resume cursor.
    TooFarBehind,
    /// The client read slower than items arrived.
    SlowConsumer,
    /// The user opened more streams; this was the oldest.
    Superseded,
    /// The user joined a team, or the primary was lost and another took
    /// over: items may lie below what was sent; refetch, then reconnect.
    Resync,
    /// The server is shutting down; reconnect (another instance answers).
    Shutdown,
    /// The credential the stream was opened with expired, was revoked, or
    /// its signing secret was rotated out: open a new stream with a fresh
    /// token (or a ticket bought with one).
    CredentialEnded,
}

/// Data of a `reset` event, always the stream's last: refetch the feed, then
/// open a new stream (`after` = the refetched head).
#[derive(Debug, Object)]
pub struct ResetEventOut {
    pub reason: ResetReasonOut,
}

/// The data of the stream's events, by SSE event name: `item`
/// (`FeedItemOut`, with `id:` its cursor), `marks` (`MarksEventOut`),
/// `membership` (`MembershipEventOut`) and `reset` (`ResetEventOut`).
#[derive(Debug, Union)]
#[oai(one_of)]
pub enum StreamEventOut {
    Item(FeedItemOut),
    Marks(MarksEventOut),
    Membership(MembershipEventOut),
    Reset(ResetEventOut),
}

fn reset_out(reason: ResetReason) -> ResetReasonOut {
    match reason {
        ResetReason::InvalidCursor => ResetReasonOut::InvalidCursor,
        ResetReason::TooFarBehind => ResetReasonOut::TooFarBehind,
        ResetReason::SlowConsumer => ResetReasonOut::SlowConsumer,
        ResetReason::Superseded => ResetReasonOut::Superseded,
        ResetReason::Resync => ResetReasonOut::Resync,
        ResetReason::Shutdown => ResetReasonOut::Shutdown,
        ResetReason::CredentialEnded => ResetReasonOut::CredentialEnded,
    }
}

fn event_out(message: StreamMessage) -> StreamEventOut {
    match message {
        StreamMessage::Item(item, state) => StreamEventOut::Item(item_out((*item).clone(), state)),
        StreamMessage::Marks(status, token) => StreamEventOut::Marks(MarksEventOut {
            watermarks: watermarks_out(status),
            consistency_token: token.map(|t| t.to_string()),
        }),
        StreamMessage::MembershipRemoved(team_id) => {
            StreamEventOut::Membership(MembershipEventOut {
                team_id,
                removed: true,
            })
        }
        StreamMessage::Reset(reason) => StreamEventOut::Reset(ResetEventOut {
            reason: reset_out(reason),
        }),
    }
}

/// The SSE event names, each with the schema of its data: what
/// [`sse_event`] sends, and what the published document declares as the
/// stream's `x-sse-events` map (`http::document`), so a generated client can
/// type each event by its name.
pub const SSE_EVENTS: [(&str, &str); 4] = [
    (ITEM_EVENT, "FeedItemOut"),
    (MARKS_EVENT, "MarksEventOut"),
    (MEMBERSHIP_EVENT, "MembershipEventOut"),
    (RESET_EVENT, "ResetEventOut"),
];
const ITEM_EVENT: &str = "item";
const MARKS_EVENT: &str = "marks";
const MEMBERSHIP_EVENT: &str = "membership";
const RESET_EVENT: &str = "reset";

fn sse_event(event: StreamEventOut) -> Event {
    match event {
        StreamEventOut::Item(item) => {
            let id = item.cursor.clone();
            Event::message(item.to_json_string())
                .event_type(ITEM_EVENT)
                .id(id)
        }
        StreamEventOut::Marks(marks) => {
            Event::message(marks.to_json_string()).event_type(MARKS_EVENT)
        }
        StreamEventOut::Membership(m) => {
            Event::message(m.to_json_string()).event_type(MEMBERSHIP_EVENT)
        }
        StreamEventOut::Reset(r) => Event::message(r.to_json_string()).event_type(RESET_EVENT),
    }
}

/// The stream's answer. OpenAPI describes it exactly as poem-openapi's
/// `EventStream` of [`StreamEventOut`] (`meta` and `register` are that
/// type's), but each event leaves as one `Bytes` frame of the body:
/// `EventStream` turns its events into an `AsyncRead` and back into frames
/// through a 4 KiB `ReaderStream` buffer that every open stream held, an
/// eighth of its memory (heap profile: bench/findings/stream.md). The
/// heartbeat is the same comment line, at the same interval.
pub struct LiveEvents(stream::LiveFeed);

type DescribedAs = EventStream<futures::stream::BoxStream<'static, StreamEventOut>>;

impl ApiResponse for LiveEvents {
    fn meta() -> MetaResponses {
        <DescribedAs as ApiResponse>::meta()
    }

    fn register(registry: &mut Registry) {
        <DescribedAs as ApiResponse>::register(registry);
    }
}

impl IntoResponse for LiveEvents {
    fn into_response(self) -> Response {
        let mut events = self
            .0
            .map(|message| Bytes::from(sse_event(event_out(message)).to_string()));
        let heartbeat = Bytes::from_static(b":\n\n");
        let mut interval = tokio::time::interval_at(Instant::now() + HEARTBEAT, HEARTBEAT);
        let body = futures::stream::poll_fn(move |cx| {
            if let Poll::Ready(event) = events.poll_next_unpin(cx) {
                return Poll::Ready(event.map(Ok::<_, std::io::Error>));
            }
            interval.poll_tick(cx).map(|_| Some(Ok(heartbeat.clone())))
        });
        Response::builder()
            .content_type("text/event-stream")
            .header("X-Accel-Buffering", "no")
            .header("Cache-Control", "no-cache")
            .body(Body::from_bytes_stream(body))
    }
}

#[OpenApi(tag = "ApiTags::Feed")]
impl StreamApi {
    /// Create a stream ticket.
    ///
    /// For `EventSource`, which cannot send an `Authorization` header: pass
    /// the ticket as `GET /v1/feed/stream?ticket=…`. Single use, valid for 60
    /// seconds (`TIDINGS_STREAM_TICKET_TTL_SECS`), never logged.
    #[oai(
        path = "/v1/feed/stream-tickets",
        method = "post",
        operation_id = "feed.stream_tickets.create"
    )]
    async fn create_ticket(&self, auth: UserTokenAuth) -> ApiResult<TicketCreated> {
        let user = auth.0;
        let (ticket, expires_at) =
            stream::issue_ticket(&self.state, user.tenant_id, &user.user_id, &user.term).await?;
        Ok(TicketCreated::Created(Json(StreamTicketOut {
            ticket,
            expires_at,
        })))
    }

    /// Stream the feed live (Server-Sent Events).
    ///
    /// `text/event-stream`, for `EventSource` or any SSE client. The same
    /// items as `GET /v1/feed`, in position order, each once: an item is sent
    /// only when every feed write below it has ended, and the positions sent
    /// on one stream strictly increase. Events (data: JSON):
    ///
    /// - `item`: a feed item exactly as `GET /v1/feed` returns it
    ///   ([FeedItemOut](#/components/schemas/FeedItemOut)); its SSE `id` is
    ///   its cursor.
    /// - `marks`: the user's watermarks and badge counts
    ///   ([WatermarksOut](#/components/schemas/WatermarksOut)), whenever they
    ///   or an item's read state change, from any tab, device or instance.
    /// - `membership`: `{team_id, removed: true}`
    ///   ([MembershipEventOut](#/components/schemas/MembershipEventOut)): the
    ///   user left the team; drop its items.
    /// - `reset` ([ResetEventOut](#/components/schemas/ResetEventOut)): always
    ///   the last event; refetch the feed, then open a new stream with
    ///   `after` = the refetched head. Sent when the resume cursor cannot be
    ///   used, when the client reads too slowly, when the user opened too
    ///   many streams (the oldest closes), after the user joined a team, when
    ///   the credential the stream was opened with ends (its `exp`, a
    ///   revocation of the user's tokens, or its signing secret rotated out),
    ///   and when the server shuts down.
    /// - a comment line (`:`) every 15 seconds as a heartbeat.
    ///
    /// Resume: `Last-Event-ID` (sent by `EventSource` on reconnect) or
    /// `after` replays every item after that cursor, then goes live, with no
    /// gap and no duplicate. Without either, only new items are sent.
    /// Authentication: a user token, or `?ticket=` from
    /// `POST /v1/feed/stream-tickets`. 503 with `Retry-After` when this
    /// instance holds its maximum number of streams, or the tenant its share
    /// of them.
    #[oai(path = "/v1/feed/stream", method = "get", operation_id = "feed.stream")]
    async fn stream(
        &self,
        auth: StreamAuth,
        // The `StreamTicketAuth` scheme reads it; declared as a parameter too,
        // so generated clients can pass it.
        /// A stream ticket from `POST /v1/feed/stream-tickets`, instead of a
        /// user token: for `EventSource`, which cannot send headers. Single
        /// use, valid for a minute.
        #[oai(name = "ticket")]
        _ticket: Query<Option<String>>,
        /// Resume after this cursor (the last `id` received).
        after: Query<Option<String>>,
        /// Set by `EventSource` on reconnect; wins over `after`.
        #[oai(name = "Last-Event-ID")]
        last_event_id: Header<Option<String>>,
    ) -> ApiResult<LiveEvents> {
        let user = auth.user();
        let resume = match last_event_id.0.as_deref().or(after.0.as_deref()) {
            None => Resume::Live,
            Some(cursor) => match Position::from_cursor(cursor) {
                Ok(position) => Resume::After(position),
                Err(_) => Resume::Invalid,
            },
        };
        let live = stream::open(
            &self.state,
            user.tenant_id,
            user.user_id,
            &user.term,
            resume,
        )
        .await
        .map_err(|err| match err {
            OpenError::Register(
                full @ (RegisterError::Full
                | RegisterError::TenantFull
                | RegisterError::ShuttingDown),
            ) => ApiError::Overloaded {
                detail: full.to_string(),
                retry_after_secs: 1,
            },
            OpenError::Db(db) => db.into(),
        })?;
        Ok(LiveEvents(live))
    }
}
