//! The live feed (ARCHITECTURE.md, "The live stream"; invariant 12): a user's
//! feed pushed as it grows, exactly — the same items as `GET /v1/feed`, in
//! position order, each once, resumable from the last position received.
//!
//! - [`hub`]: connections and routing, in memory.
//! - [`run`]: per instance, one tick loop (one horizon statement, one tail
//!   statement per tick, only while streams are open) and two listeners:
//!   membership changes (`membership` events) and marks (`marks` events).
//! - [`open`]: one connection — register with the hub first, then catch up
//!   from the database below the tenant's floor, then forward what the hub
//!   dispatches, dropping anything at or below the last position sent.
//! - tickets: `EventSource` cannot send headers; a user token buys a
//!   single-use ticket valid for a minute, stored only as a hash.

pub mod hub;

use std::{collections::VecDeque, pin::Pin, sync::Arc, time::Instant};

use chrono::{DateTime, Utc};
use futures::Stream;
use sha2::{Digest, Sha256};
use tidings_core::{classify, ItemState, Position, ReadSet, UserId, Watermarks};
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use self::hub::{CloseReason, Hub, HubLimits, RegisterError};
use self::hub::{Outgoing, Registration};
use crate::{
    app::shutdown::Shutdown,
    app::state::AppState,
    db::listen::{Event, Subscription},
    db::replicas::Lsn,
    store::{
        feed::{self as feed_store, FeedItem, FeedStatus, PageFrom},
        horizon as horizon_store,
        notify::{CredentialsChanged, MarksChanged, MembershipsChanged, NotifyChannel},
        stream as stream_store, teams as team_store, tenants as tenant_store,
    },
    tenants::credentials::{random_token, revocation_cutoff_second, CredentialTerm},
};

/// Rows read per tick at most; a larger backlog takes several ticks.
const TAIL_LIMIT: i64 = 5000;
/// Catch-up page size.
const CATCH_UP_PAGE: u32 = 100;
/// Woken tails begin at least this far apart, so that writes arriving
/// faster cost at most ~100 tails a second (two statements each) rather
/// than two statements per write; a write waits at most this long for its
/// tail to begin.
const MIN_TAIL_GAP: std::time::Duration = std::time::Duration::from_millis(10);

/// What a stream sends, in order.
#[derive(Debug, Clone)]
pub enum StreamMessage {
    Item(Arc<FeedItem>, ItemState),
    /// The marks, and the change's consistency token (with standbys).
    Marks(FeedStatus, Option<Lsn>),
    MembershipRemoved(String),
    /// The last message: the client refetches, then opens a new stream.
    Reset(ResetReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    /// The resume cursor does not decode.
    InvalidCursor,
    /// More than the replay limit lies after the resume cursor.
    TooFarBehind,
    SlowConsumer,
    Superseded,
    Resync,
    Shutdown,
    /// The credential the stream was opened with ended.
    CredentialEnded,
}

impl ResetReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ResetReason::InvalidCursor => "invalid_cursor",
            ResetReason::TooFarBehind => "too_far_behind",
            ResetReason::SlowConsumer => "slow_consumer",
            ResetReason::Superseded => "superseded",
            ResetReason::Resync => "resync",
            ResetReason::Shutdown => "shutdown",
            ResetReason::CredentialEnded => "credential_ended",
        }
    }
}

/// Where a stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// New items only.
    Live,
    /// Every item after this position first.
    After(Position),
    /// The client sent a cursor that does not decode.
    Invalid,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Register(#[from] RegisterError),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

pub type LiveFeed = Pin<Box<dyn Stream<Item = StreamMessage> + Send>>;

// ---------------------------------------------------------------------------
// Tickets

fn ticket_hash(ticket: &str) -> Vec<u8> {
    Sha256::digest(ticket.as_bytes()).to_vec()
}

/// A new ticket for the user, bought with a token of `term`, and when it
/// expires (never after the token).
pub async fn issue_ticket(
    state: &AppState,
    tenant_id: Uuid,
    user: &UserId,
    term: &CredentialTerm,
) -> sqlx::Result<(String, DateTime<Utc>)> {
    let ticket = format!("tds_{}", random_token(32));
    let ttl = state.settings.stream.stream_ticket_ttl_secs.max(1) as i64;
    let ttl = ttl.min((term.expires_at - Utc::now().timestamp()).max(1));
    let expires_at = stream_store::insert_stream_ticket(
        &state.pool,
        &ticket_hash(&ticket),
        tenant_id,
        user,
        ttl,
        &stream_store::TicketCredential {
            issued_at: term.issued_at,
            expires_at: term.expires_at,
            signing_key_id: term.signing_key_id.clone(),
        },
    )
    .await?;
    Ok((ticket, expires_at))
}

/// A ticket taken: whose, and the credential it was bought with.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub tenant_id: Uuid,
    pub user_id: String,
    pub term: CredentialTerm,
}

/// The tenant, user and credential of a ticket, once: taking it deletes it.
/// `None` for an unknown, used or expired ticket. A ticket minted before
/// tickets kept their credential counts as a token issued when it was
/// minted, living the longest a token may, bound to no signing key.
pub async fn take_ticket(state: &AppState, ticket: &str) -> sqlx::Result<Option<Ticket>> {
    let ttl = state.settings.stream.stream_ticket_ttl_secs.max(1) as i64;
    let Some(taken) =
        stream_store::take_stream_ticket(&state.pool, &ticket_hash(ticket), ttl).await?
    else {
        return Ok(None);
    };
    let term = match taken.credential {
        Some(c) => CredentialTerm {
            issued_at: c.issued_at,
            expires_at: c.expires_at,
            signing_key_id: c.signing_key_id,
        },
        None => {
            let minted = taken.minted_at.timestamp();
            let longest = state.settings.auth.user_token_max_lifetime_secs;
            CredentialTerm {
                issued_at: minted,
                expires_at: minted.saturating_add(i64::try_from(longest).unwrap_or(i64::MAX)),
                signing_key_id: None,
            }
        }
    };
    Ok(Some(Ticket {
        tenant_id: taken.tenant_id,
        user_id: taken.user_id,
        term,
    }))
}

// ---------------------------------------------------------------------------
// One connection

struct Connection {
    state: AppState,
    tenant_id: Uuid,
    user: UserId,
    registration: Registration,
    teams: Arc<[team_store::Membership]>,
    marks: Watermarks,
    pending: VecDeque<StreamMessage>,
    /// Catch-up still to read: items after this position, below the floor.
    catch_up: Option<Position>,
    replayed: usize,
    last_sent: Position,
    ended: bool,
}

/// Opens a stream for the user, with a credential of `term` (the stream
/// ends when it does): registers it with the hub (so nothing dispatched from
/// now on is missed), then reads the catch-up lazily as the client consumes
/// it.
pub async fn open(
    state: &AppState,
    tenant_id: Uuid,
    user: UserId,
    term: &CredentialTerm,
    resume: Resume,
) -> Result<LiveFeed, OpenError> {
    let tenant_cap = match state
        .limits
        .tenant_rates(&state.pool, tenant_id)
        .await?
        .open_streams()
    {
        Some(own) => own as usize,
        None => state.settings.stream.tenant_share(),
    };
    // Fresh from the database, not the cache: the hub routes by these teams
    // from now on, and a change from here on is announced to the hub.
    let teams: Arc<[team_store::Membership]> =
        team_store::list_memberships_of_user(&state.pool, tenant_id, &user)
            .await?
            .into();
    let horizon = state.horizons.fresh(&state.replicas).await?.of(tenant_id);
    let registration = state
        .stream
        .register(tenant_id, &user, &teams, horizon, term, tenant_cap)?;
    let floor = registration.floor;
    let (status, _) = feed_store::read_status(
        &state.pool,
        tenant_id,
        &user,
        &teams,
        catch_up_horizon(floor),
        None,
    )
    .await?;
    let (catch_up, last_sent, pending) = match resume {
        Resume::Live => (None, Position::ORIGIN, VecDeque::new()),
        Resume::After(after) => {
            // Cursors carry a checksum, not a signature (the core computes
            // it in the browser too), so a client may send any position. One
            // beyond the present would filter out every item until the
            // present passed it: a forged maximum silenced the stream for
            // good. Clamping to the present was chosen over keying the
            // checksum, which would change every cursor and the core's
            // encoding for a harm done only to oneself; it changes nothing
            // for a cursor the server handed out, which always lies below
            // the horizon read just now.
            let after = after.min(Position::new(horizon, 0));
            (Some(after), after, VecDeque::new())
        }
        Resume::Invalid => (
            None,
            Position::ORIGIN,
            VecDeque::from([StreamMessage::Reset(ResetReason::InvalidCursor)]),
        ),
    };
    let connection = Connection {
        state: state.clone(),
        tenant_id,
        user,
        registration,
        teams,
        marks: status.marks,
        ended: false,
        pending,
        catch_up,
        replayed: 0,
        last_sent,
    };
    Ok(Box::pin(futures::stream::unfold(
        connection,
        |mut c| async move { c.next().await.map(|m| (m, c)) },
    )))
}

/// The horizon that reads exactly the rows below `floor`: a floor inside a
/// transaction's rows (a tail cut by its limit) lies above a final tx.
fn catch_up_horizon(floor: Position) -> i64 {
    if floor.id == 0 {
        floor.tx
    } else {
        floor.tx + 1
    }
}

impl Connection {
    async fn next(&mut self) -> Option<StreamMessage> {
        loop {
            if let Some(message) = self.pending.pop_front() {
                if matches!(message, StreamMessage::Reset(_)) {
                    self.ended = true;
                    self.pending.clear();
                }
                return Some(message);
            }
            if self.ended {
                return None;
            }
            if let Some(after) = self.catch_up {
                match self.read_catch_up(after).await {
                    Ok(()) => continue,
                    Err(err) => {
                        // The client reconnects and resumes from what it got.
                        tracing::warn!(error = %err, "stream catch-up failed");
                        return None;
                    }
                }
            }
            let Some(outgoing) = self.registration.receiver.recv().await else {
                let reason = match self.registration.shared.reason() {
                    CloseReason::None => return None,
                    CloseReason::SlowConsumer => ResetReason::SlowConsumer,
                    CloseReason::Superseded => ResetReason::Superseded,
                    CloseReason::Shutdown => ResetReason::Shutdown,
                    CloseReason::Resync => ResetReason::Resync,
                    CloseReason::CredentialEnded => ResetReason::CredentialEnded,
                };
                self.pending.push_back(StreamMessage::Reset(reason));
                continue;
            };
            match outgoing {
                Outgoing::Item(item) => {
                    if item.position <= self.last_sent {
                        continue;
                    }
                    self.last_sent = item.position;
                    let state = classify(item.position, &self.marks, &ReadSet::new());
                    return Some(StreamMessage::Item(item, state));
                }
                Outgoing::Marks(marks) => {
                    let (status, token) = *marks;
                    self.marks = status.marks;
                    return Some(StreamMessage::Marks(status, token));
                }
                Outgoing::MembershipRemoved(team) => {
                    return Some(StreamMessage::MembershipRemoved(*team));
                }
            }
        }
    }

    /// One page of the catch-up: items after `after` and below the floor.
    async fn read_catch_up(&mut self, after: Position) -> sqlx::Result<()> {
        let floor = self.registration.floor;
        let page = feed_store::read_feed(
            &self.state.pool,
            self.tenant_id,
            &self.user,
            &self.teams,
            PageFrom::After(after),
            CATCH_UP_PAGE,
            catch_up_horizon(floor),
            None,
        )
        .await?;
        self.marks = page.marks;
        let more = page.more;
        let read = page.items.len();
        let mut items: Vec<FeedItem> = page
            .items
            .into_iter()
            .filter(|i| i.position < floor)
            .collect();
        let reached_floor = items.len() < read;
        // Pages come newest first.
        items.reverse();
        self.catch_up = match items.last() {
            Some(last) if more && !reached_floor => Some(last.position),
            _ => None,
        };
        self.replayed += items.len();
        if self.replayed > self.state.settings.stream.stream_max_replay {
            self.catch_up = None;
            self.pending
                .push_back(StreamMessage::Reset(ResetReason::TooFarBehind));
            return Ok(());
        }
        for item in items {
            if item.position <= self.last_sent {
                continue;
            }
            self.last_sent = item.position;
            let read = if item.individually_read {
                ReadSet::try_from(vec![item.position]).unwrap_or_default()
            } else {
                ReadSet::new()
            };
            let state = classify(item.position, &self.marks, &read);
            self.pending
                .push_back(StreamMessage::Item(Arc::new(item), state));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Per instance

/// Starts the tick loop and the two listeners; each returns on shutdown.
pub fn spawn(state: &AppState, shutdown: &Shutdown) -> Vec<JoinHandle<()>> {
    vec![
        tokio::spawn(run_tail(state.clone(), shutdown.clone())),
        tokio::spawn(run_memberships(state.clone(), shutdown.clone())),
        tokio::spawn(run_marks(state.clone(), shutdown.clone())),
    ]
}

/// Each tick while streams are open, and soon after a feed write this
/// instance committed for a tenant with streams here: one horizon statement
/// (shared with feed readers) and one tail statement after it, routed in
/// memory. Writes committed by other instances wait for the tick.
async fn run_tail(state: AppState, mut shutdown: Shutdown) {
    let tick = state.settings.stream.tick();
    let gap = MIN_TAIL_GAP.min(tick);
    let mut primary_lost = false;
    let mut last_tail = Instant::now();
    loop {
        let woken = tokio::select! {
            stop = shutdown.sleep(tick) => if stop { break } else { false },
            () = state.stream.woken() => true,
        };
        if woken {
            // A burst of writes shares one tail.
            let since = last_tail.elapsed();
            if since < gap && shutdown.sleep(gap - since).await {
                break;
            }
        }
        last_tail = Instant::now();
        state.stream.close_expired(Utc::now().timestamp());
        if !state.stream.has_tenants() {
            continue;
        }
        match tail_once(&state).await {
            Ok(()) if primary_lost => {
                // The primary came back, or another took over: transaction
                // ids the lost one handed out may be handed out again below
                // what streams were sent (docs/design/failover.md), so every
                // stream resets and its client refetches.
                primary_lost = false;
                tracing::warn!("the primary answers again; resetting every open stream");
                state.stream.close_every_stream(CloseReason::Resync);
            }
            Ok(()) => {}
            Err(err) => {
                primary_lost |= crate::store::is_unavailable(&err);
                tracing::warn!(error = %err, "stream tail failed; retrying next tick");
            }
        }
    }
    state.stream.close_all(CloseReason::Shutdown);
}

async fn tail_once(state: &AppState) -> sqlx::Result<()> {
    let started = Instant::now();
    let horizons = Arc::new(horizon_store::read_feed_horizons(&state.pool).await?);
    state.horizons.publish(started, horizons.clone());
    let plan = state.stream.plan(&horizons);
    if plan.is_empty() {
        return Ok(());
    }
    let rows = stream_store::read_tail(&state.pool, &plan, TAIL_LIMIT).await?;
    let complete_below = (rows.len() as i64 >= TAIL_LIMIT)
        .then(|| rows.last().map(|r| r.item.position))
        .flatten()
        .map(|last| Position::new(last.tx, last.id + 1));
    state.stream.dispatch(&plan, rows, complete_below);
    Ok(())
}

/// Membership changes of connected users: teams left are announced, teams
/// joined resync the connection. Credential changes (a user's tokens
/// revoked, a tenant's signing secret rotated) end the streams they affect,
/// on every instance, as soon as the notice arrives. After the listener was
/// down (changes may have been missed) every connected user is checked.
async fn run_memberships(state: AppState, shutdown: Shutdown) {
    let mut subscription =
        Subscription::new(state.listen_pool.clone(), NotifyChannel::Cache, shutdown);
    let mut was_up = false;
    while let Some(event) = subscription.next().await {
        let users = match event {
            Event::Up if was_up => {
                for tenant_id in state.stream.connected_tenants() {
                    check_signing_keys(&state, tenant_id).await;
                }
                let users = state.stream.connected_users();
                for (tenant_id, user_id) in &users {
                    check_revocation(&state, *tenant_id, user_id).await;
                }
                users
            }
            Event::Up => {
                was_up = true;
                Vec::new()
            }
            Event::Down => Vec::new(),
            Event::Notification(payload) => {
                if let Some(changed) = CredentialsChanged::parse(&payload) {
                    credentials_changed(&state, changed).await;
                    continue;
                }
                match MembershipsChanged::parse(&payload) {
                    Some(c) if state.stream.has_user(c.tenant_id, &c.user_id) => {
                        vec![(c.tenant_id, c.user_id)]
                    }
                    _ => Vec::new(),
                }
            }
        };
        for (tenant_id, user_id) in users {
            match team_store::list_memberships_of_user(&state.pool, tenant_id, &user_id).await {
                Ok(teams) => state.stream.apply_memberships(tenant_id, &user_id, &teams),
                Err(err) => {
                    tracing::warn!(error = %err, "reading memberships for streams failed");
                    state
                        .stream
                        .close_user(tenant_id, &user_id, CloseReason::Resync);
                }
            }
        }
    }
}

/// A credential notice: this instance's credential caches forget what
/// changed (so requests see it at once too), and the streams it ends end.
async fn credentials_changed(state: &AppState, changed: CredentialsChanged) {
    match changed {
        CredentialsChanged::UserTokensRevoked { tenant_id, user_id } => {
            state
                .auth_cache
                .forget_revocation(tenant_id, &user_id)
                .await;
            if state.stream.has_user(tenant_id, &user_id) {
                check_revocation(state, tenant_id, &user_id).await;
            }
        }
        CredentialsChanged::SigningSecretRotated { tenant_id } => {
            state
                .auth_cache
                .signing_secrets
                .invalidate(&tenant_id)
                .await;
            check_signing_keys(state, tenant_id).await;
        }
    }
}

/// Ends the user's streams opened with a credential issued before the
/// user's revocation cutoff (rounded up to whole seconds, as tokens' `iat`).
async fn check_revocation(state: &AppState, tenant_id: Uuid, user_id: &str) {
    match tenant_store::find_user_token_cutoff(&state.pool, tenant_id, user_id).await {
        Ok(Some(at)) => {
            let cutoff = revocation_cutoff_second(at);
            state.stream.close_revoked(tenant_id, user_id, cutoff);
        }
        Ok(None) => {}
        Err(err) => {
            tracing::warn!(error = %err, "reading a revocation for streams failed; closing the user's streams");
            state
                .stream
                .close_user(tenant_id, user_id, CloseReason::CredentialEnded);
        }
    }
}

/// Applies the tenant's signing secrets as stored now to its streams.
async fn check_signing_keys(state: &AppState, tenant_id: Uuid) {
    if !state.stream.connected_tenants().contains(&tenant_id) {
        return;
    }
    let keys = match tenant_store::find_signing_keys(&state.pool, tenant_id).await {
        Ok(Some(row)) => {
            let mut keys = vec![(row.signing_key_id, None)];
            if let Some(previous) = row.previous_signing_key_id {
                let until = row.previous_signing_expires_at.map(|at| at.timestamp());
                keys.push((previous, until));
            }
            keys
        }
        Ok(None) => Vec::new(),
        Err(err) => {
            tracing::warn!(error = %err, "reading signing keys for streams failed");
            return;
        }
    };
    state.stream.apply_signing_keys(tenant_id, &keys);
}

/// Marks of connected users: each change is read once per instance and sent
/// to every connection of the user.
async fn run_marks(state: AppState, shutdown: Shutdown) {
    let mut subscription =
        Subscription::new(state.listen_pool.clone(), NotifyChannel::Marks, shutdown);
    while let Some(event) = subscription.next().await {
        let Event::Notification(payload) = event else {
            continue;
        };
        let Some(changed) = MarksChanged::parse(&payload) else {
            tracing::warn!(payload, "unknown marks notification");
            continue;
        };
        if !state.stream.has_user(changed.tenant_id, &changed.user_id) {
            continue;
        }
        // From the primary: a standby may not have replayed the change yet.
        // With standbys, the token (read after the status, so at or past the
        // change) lets the client's next read elsewhere reflect it, and this
        // instance remembers it for the user.
        let status = async {
            let teams = team_store::list_memberships_of_user(
                &state.pool,
                changed.tenant_id,
                &changed.user_id,
            )
            .await?;
            let horizon = state
                .horizons
                .fresh(&state.replicas)
                .await?
                .of(changed.tenant_id);
            let status = feed_store::read_status(
                &state.pool,
                changed.tenant_id,
                &changed.user_id,
                &teams,
                horizon,
                None,
            )
            .await?
            .0;
            let token = state
                .replicas
                .written_by(changed.tenant_id, &changed.user_id)
                .await?;
            Ok::<_, sqlx::Error>((status, token))
        };
        match status.await {
            Ok((status, token)) => {
                state
                    .stream
                    .send_marks(changed.tenant_id, &changed.user_id, status, token)
            }
            Err(err) => tracing::warn!(error = %err, "reading marks for streams failed"),
        }
    }
}
