//! The in-memory side of the live stream: which connections want which
//! tenant's teams and users, and how far each tenant has been tailed.
//!
//! Nothing here touches the database: the tick loop (`super::tail`) reads the
//! rows and hands them to [`Hub::dispatch`], which routes each to the
//! connections of its team (events) or recipient (in-app alerts) with a
//! non-blocking send. A connection whose buffer is full is dropped (it will
//! receive `reset`), so one slow client never holds up the others or grows
//! the server's memory.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::{
        atomic::{AtomicU8, Ordering},
        Arc, Mutex,
    },
};

use tidings_core::Position;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::db::replicas::Lsn;
use crate::store::{
    feed::{FeedItem, FeedStatus},
    horizon::{feed_write_lock_key, FeedHorizons},
    stream::{TailRange, TailRow},
    teams::Membership,
};
use crate::tenants::credentials::CredentialTerm;

/// What the hub hands a connection. Kept to two words: a stream's channel
/// allocates its first block of 32 slots when it opens, so each word here
/// is 256 bytes of every open stream (the marks inline made it 2.5 KiB).
#[derive(Debug, Clone)]
pub enum Outgoing {
    Item(Arc<FeedItem>),
    /// The user's marks, and the change's consistency token (with standbys).
    Marks(Arc<(FeedStatus, Option<Lsn>)>),
    /// The user left this team.
    MembershipRemoved(Box<String>),
}

/// Why the hub closed a connection (read by the connection once its channel
/// is closed, to say so in its last event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CloseReason {
    /// Still open, or closed by the client.
    None = 0,
    /// Its buffer filled: the client reads slower than items arrive.
    SlowConsumer = 1,
    /// The user opened more streams than allowed; this was the oldest.
    Superseded = 2,
    /// The server is shutting down.
    Shutdown = 3,
    /// The user joined a team, memberships may have been missed, or the
    /// primary was lost and another took over: the client refetches (items
    /// may lie below what was sent).
    Resync = 4,
    /// The credential the stream was opened with expired, was revoked, or
    /// its signing secret stopped verifying.
    CredentialEnded = 5,
}

impl CloseReason {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => CloseReason::SlowConsumer,
            2 => CloseReason::Superseded,
            3 => CloseReason::Shutdown,
            4 => CloseReason::Resync,
            5 => CloseReason::CredentialEnded,
            _ => CloseReason::None,
        }
    }
}

/// Shared between the hub and one connection.
#[derive(Debug, Default)]
pub struct ConnShared {
    reason: AtomicU8,
}

impl ConnShared {
    pub fn reason(&self) -> CloseReason {
        CloseReason::from_u8(self.reason.load(Ordering::SeqCst))
    }

    fn close(&self, reason: CloseReason) {
        // The first reason wins.
        let _ = self.reason.compare_exchange(
            CloseReason::None as u8,
            reason as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

type ConnId = u64;

struct Conn {
    tenant_id: Uuid,
    user_id: String,
    /// Team → the membership's join position (items after it are the user's).
    teams: HashMap<String, Position>,
    sender: mpsc::Sender<Outgoing>,
    shared: Arc<ConnShared>,
    /// The credential's `iat` (a revocation after it ends the connection).
    issued_at: i64,
    /// The signing secret the credential verified with.
    signing_key_id: Option<String>,
    /// When the connection ends (Unix seconds): the credential's expiry, or
    /// earlier once its signing secret is retiring. Kept in `deadlines`.
    deadline: i64,
}

struct TenantRoute {
    lock_key: i64,
    /// Everything of this tenant below `floor` has been dispatched (or was
    /// there before any connection of this tenant registered).
    floor: Position,
    by_team: HashMap<String, HashSet<ConnId>>,
    /// A user's connections, oldest first.
    by_user: HashMap<String, Vec<ConnId>>,
    /// Connections of this tenant here (its share of the instance's slots).
    open: usize,
}

#[derive(Default)]
struct HubState {
    next_id: ConnId,
    conns: HashMap<ConnId, Conn>,
    tenants: HashMap<Uuid, TenantRoute>,
    /// (deadline, connection), soonest first.
    deadlines: BTreeSet<(i64, ConnId)>,
    closed: bool,
}

/// Limits the hub enforces.
#[derive(Debug, Clone, Copy)]
pub struct HubLimits {
    pub max_connections: usize,
    pub max_per_user: usize,
    pub buffer: usize,
}

pub struct Hub {
    state: Mutex<HubState>,
    limits: HubLimits,
    /// Set by a feed write this instance committed for a tenant with
    /// streams here; the tail loop reads at once instead of at its tick.
    woken: tokio::sync::Notify,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    #[error("this instance serves its maximum number of streams")]
    Full,
    #[error("this tenant holds its share of this instance's streams")]
    TenantFull,
    #[error("this instance is shutting down")]
    ShuttingDown,
}

/// A registered connection: its channel, where its catch-up must end, and
/// the guard that unregisters it when dropped.
pub struct Registration {
    pub receiver: mpsc::Receiver<Outgoing>,
    /// Items of the tenant below this position are not dispatched to this
    /// connection: its catch-up reads them from the database.
    pub floor: Position,
    pub shared: Arc<ConnShared>,
    pub guard: RegistrationGuard,
}

pub struct RegistrationGuard {
    hub: Arc<Hub>,
    id: ConnId,
}

impl Drop for RegistrationGuard {
    fn drop(&mut self) {
        self.hub.with_state(|s| remove_conn(s, self.id));
    }
}

impl Hub {
    pub fn new(limits: HubLimits) -> Self {
        Hub {
            state: Mutex::new(HubState::default()),
            limits,
            woken: tokio::sync::Notify::new(),
        }
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut HubState) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut state)
    }

    /// Open connections on this instance.
    pub fn connections(&self) -> usize {
        self.with_state(|s| s.conns.len())
    }

    /// Registers a connection of `user` with `teams`, opened with a
    /// credential of `term` (the connection ends when it does). `horizon` is
    /// a horizon of the tenant (any: it becomes the tenant's floor only when
    /// this is the tenant's first connection here). The user's oldest stream
    /// is closed if this one would pass the per-user limit; past the
    /// tenant's `tenant_cap` connections here, or the instance's, it is
    /// refused.
    pub fn register(
        self: &Arc<Self>,
        tenant_id: Uuid,
        user_id: &str,
        teams: &[Membership],
        horizon: i64,
        term: &CredentialTerm,
        tenant_cap: usize,
    ) -> Result<Registration, RegisterError> {
        let (sender, receiver) = mpsc::channel(self.limits.buffer);
        let shared = Arc::new(ConnShared::default());
        let (id, floor) = self.with_state(|s| {
            if s.closed {
                return Err(RegisterError::ShuttingDown);
            }
            let oldest = s
                .tenants
                .get(&tenant_id)
                .and_then(|t| t.by_user.get(user_id))
                .filter(|ids| ids.len() >= self.limits.max_per_user)
                .and_then(|ids| ids.first().copied());
            // The user's own oldest stream makes room for this one.
            let freed = usize::from(oldest.is_some());
            if s.conns.len() - freed >= self.limits.max_connections {
                return Err(RegisterError::Full);
            }
            let tenant_open = s.tenants.get(&tenant_id).map_or(0, |t| t.open);
            if tenant_open - freed >= tenant_cap.max(1) {
                return Err(RegisterError::TenantFull);
            }
            if let Some(oldest) = oldest {
                close_conn(s, oldest, CloseReason::Superseded);
            }
            s.next_id += 1;
            let id = s.next_id;
            let route = s.tenants.entry(tenant_id).or_insert_with(|| TenantRoute {
                lock_key: feed_write_lock_key(tenant_id),
                floor: Position::new(horizon, 0),
                by_team: HashMap::new(),
                by_user: HashMap::new(),
                open: 0,
            });
            route.open += 1;
            for m in teams {
                route
                    .by_team
                    .entry(m.team_id.clone())
                    .or_default()
                    .insert(id);
            }
            route
                .by_user
                .entry(user_id.to_string())
                .or_default()
                .push(id);
            let floor = route.floor;
            s.conns.insert(
                id,
                Conn {
                    tenant_id,
                    user_id: user_id.to_string(),
                    teams: teams
                        .iter()
                        .map(|m| (m.team_id.clone(), m.joined))
                        .collect(),
                    sender,
                    shared: shared.clone(),
                    issued_at: term.issued_at,
                    signing_key_id: term.signing_key_id.clone(),
                    deadline: term.expires_at,
                },
            );
            s.deadlines.insert((term.expires_at, id));
            Ok((id, floor))
        })?;
        Ok(Registration {
            receiver,
            floor,
            shared,
            guard: RegistrationGuard {
                hub: self.clone(),
                id,
            },
        })
    }

    /// What the next tail should read: for each tenant with connections, from
    /// its floor up to its horizon, when that range can hold anything.
    pub fn plan(&self, horizons: &FeedHorizons) -> Vec<TailRange> {
        self.with_state(|s| {
            s.tenants
                .iter()
                .filter_map(|(&tenant_id, route)| {
                    let below_tx = horizons.of_key(route.lock_key);
                    (route.floor < Position::new(below_tx, 0)).then_some(TailRange {
                        tenant_id,
                        from: route.floor,
                        below_tx,
                    })
                })
                .collect()
        })
    }

    /// Routes the rows a tail read for `plan` and moves each tenant's floor.
    /// `complete_below`: when the read hit its limit, the position after its
    /// last row (rows at or beyond it were not read).
    pub fn dispatch(
        &self,
        plan: &[TailRange],
        rows: Vec<TailRow>,
        complete_below: Option<Position>,
    ) {
        let mut by_tenant: HashMap<Uuid, Vec<TailRow>> = HashMap::new();
        for row in rows {
            by_tenant.entry(row.tenant_id).or_default().push(row);
        }
        self.with_state(|s| {
            for range in plan {
                let Some(route) = s.tenants.get(&range.tenant_id) else {
                    continue;
                };
                // A route created after the plan may start below what was
                // read; the next tick reads it from its own floor.
                if route.floor < range.from {
                    continue;
                }
                let mut bound = Position::new(range.below_tx, 0);
                if let Some(limit) = complete_below {
                    bound = bound.min(limit);
                }
                let floor = route.floor;
                let mut slow = Vec::new();
                for row in by_tenant.remove(&range.tenant_id).unwrap_or_default() {
                    let position = row.item.position;
                    if position < floor || position >= bound {
                        continue;
                    }
                    let item = Arc::new(row.item);
                    let targets: Vec<ConnId> = match (&row.recipient_id, &item.team_id) {
                        (Some(recipient), _) => {
                            route.by_user.get(recipient).cloned().unwrap_or_default()
                        }
                        (None, Some(team)) => route
                            .by_team
                            .get(team)
                            .map(|ids| ids.iter().copied().collect())
                            .unwrap_or_default(),
                        (None, None) => Vec::new(),
                    };
                    for id in targets {
                        let Some(conn) = s.conns.get(&id) else {
                            continue;
                        };
                        let member_after = match &item.team_id {
                            Some(team) if row.recipient_id.is_none() => conn.teams.get(team),
                            _ => Some(&Position::ORIGIN),
                        };
                        if member_after.is_none_or(|joined| position <= *joined) {
                            continue;
                        }
                        if conn.sender.try_send(Outgoing::Item(item.clone())).is_err() {
                            slow.push(id);
                        }
                    }
                }
                if let Some(route) = s.tenants.get_mut(&range.tenant_id) {
                    route.floor = route.floor.max(bound);
                }
                for id in slow {
                    close_conn(s, id, CloseReason::SlowConsumer);
                }
            }
        })
    }

    /// The users with connections here (for a resync of memberships).
    pub fn connected_users(&self) -> Vec<(Uuid, String)> {
        self.with_state(|s| {
            s.tenants
                .iter()
                .flat_map(|(&t, route)| route.by_user.keys().map(move |u| (t, u.clone())))
                .collect()
        })
    }

    pub fn has_user(&self, tenant_id: Uuid, user_id: &str) -> bool {
        self.with_state(|s| {
            s.tenants
                .get(&tenant_id)
                .is_some_and(|t| t.by_user.contains_key(user_id))
        })
    }

    pub fn has_tenants(&self) -> bool {
        self.with_state(|s| !s.tenants.is_empty())
    }

    /// After a feed write of `tenant_id` committed on this instance: when
    /// the tenant has streams here, the tail loop reads now rather than at
    /// its next tick. A wake while a tail runs is kept for after it.
    pub fn wake_for(&self, tenant_id: Uuid) {
        if self.with_state(|s| s.tenants.contains_key(&tenant_id)) {
            self.woken.notify_one();
        }
    }

    /// Returns at the next [`Hub::wake_for`] (at once if one came since the
    /// last call).
    pub async fn woken(&self) {
        self.woken.notified().await;
    }

    /// Sends the user's new marks to each of their connections.
    pub fn send_marks(
        &self,
        tenant_id: Uuid,
        user_id: &str,
        status: FeedStatus,
        token: Option<Lsn>,
    ) {
        let marks = Arc::new((status, token));
        self.to_user(tenant_id, user_id, |_| Some(Outgoing::Marks(marks.clone())));
    }

    /// Applies the user's current memberships: a team left is announced and
    /// no longer routed; a team joined closes the connection with `Resync`
    /// (its items may lie below positions already sent).
    pub fn apply_memberships(&self, tenant_id: Uuid, user_id: &str, teams: &[Membership]) {
        let now: HashMap<&str, Position> = teams
            .iter()
            .map(|m| (m.team_id.as_str(), m.joined))
            .collect();
        self.with_state(|s| {
            let ids = user_conns(s, tenant_id, user_id);
            for id in ids {
                let Some(conn) = s.conns.get_mut(&id) else {
                    continue;
                };
                let joined = now
                    .iter()
                    .any(|(team, at)| conn.teams.get(*team) != Some(at));
                if joined {
                    close_conn(s, id, CloseReason::Resync);
                    continue;
                }
                let left: Vec<String> = conn
                    .teams
                    .keys()
                    .filter(|team| !now.contains_key(team.as_str()))
                    .cloned()
                    .collect();
                if left.is_empty() {
                    continue;
                }
                let mut full = false;
                for team in &left {
                    conn.teams.remove(team);
                    full |= conn
                        .sender
                        .try_send(Outgoing::MembershipRemoved(Box::new(team.clone())))
                        .is_err();
                }
                if let Some(route) = s.tenants.get_mut(&tenant_id) {
                    for team in &left {
                        if let Some(ids) = route.by_team.get_mut(team) {
                            ids.remove(&id);
                            if ids.is_empty() {
                                route.by_team.remove(team);
                            }
                        }
                    }
                }
                if full {
                    close_conn(s, id, CloseReason::SlowConsumer);
                }
            }
        })
    }

    /// Ends every connection whose credential has expired by `now` (Unix
    /// seconds). The tick loop calls it each tick.
    pub fn close_expired(&self, now: i64) {
        self.with_state(|s| {
            while let Some(&(deadline, id)) = s.deadlines.first() {
                if deadline > now {
                    break;
                }
                close_conn(s, id, CloseReason::CredentialEnded);
            }
        })
    }

    /// Ends the user's connections opened with a credential issued before
    /// `cutoff` (Unix seconds; the user's tokens were revoked).
    pub fn close_revoked(&self, tenant_id: Uuid, user_id: &str, cutoff: i64) {
        self.with_state(|s| {
            for id in user_conns(s, tenant_id, user_id) {
                if s.conns.get(&id).is_some_and(|c| c.issued_at < cutoff) {
                    close_conn(s, id, CloseReason::CredentialEnded);
                }
            }
        })
    }

    /// Applies the tenant's signing secrets as they are now, `(key id,
    /// verifies until)` (`None`: no end): a connection whose secret is not
    /// among them ends now; one whose secret verifies until some instant
    /// ends then at the latest.
    pub fn apply_signing_keys(&self, tenant_id: Uuid, keys: &[(String, Option<i64>)]) {
        self.with_state(|s| {
            let ids: Vec<ConnId> = s
                .tenants
                .get(&tenant_id)
                .map(|t| t.by_user.values().flatten().copied().collect())
                .unwrap_or_default();
            for id in ids {
                let Some(conn) = s.conns.get_mut(&id) else {
                    continue;
                };
                let key = conn
                    .signing_key_id
                    .as_deref()
                    .and_then(|k| keys.iter().find(|(id, _)| id == k));
                match key {
                    None => close_conn(s, id, CloseReason::CredentialEnded),
                    Some((_, Some(until))) if *until < conn.deadline => {
                        s.deadlines.remove(&(conn.deadline, id));
                        conn.deadline = *until;
                        s.deadlines.insert((*until, id));
                    }
                    Some(_) => {}
                }
            }
        })
    }

    /// The tenants with connections here.
    pub fn connected_tenants(&self) -> Vec<Uuid> {
        self.with_state(|s| s.tenants.keys().copied().collect())
    }

    /// Closes every connection of the user with `reason`.
    pub fn close_user(&self, tenant_id: Uuid, user_id: &str, reason: CloseReason) {
        self.with_state(|s| {
            let ids = user_conns(s, tenant_id, user_id);
            for id in ids {
                close_conn(s, id, reason);
            }
        })
    }

    /// Closes every connection and refuses new ones.
    /// Closes every open stream with `reason`; new ones may open.
    pub fn close_every_stream(&self, reason: CloseReason) {
        self.with_state(|s| {
            let ids: Vec<ConnId> = s.conns.keys().copied().collect();
            for id in ids {
                close_conn(s, id, reason);
            }
        })
    }

    pub fn close_all(&self, reason: CloseReason) {
        self.with_state(|s| {
            s.closed = true;
            let ids: Vec<ConnId> = s.conns.keys().copied().collect();
            for id in ids {
                close_conn(s, id, reason);
            }
        })
    }

    fn to_user(&self, tenant_id: Uuid, user_id: &str, message: impl Fn(&Conn) -> Option<Outgoing>) {
        self.with_state(|s| {
            let ids = user_conns(s, tenant_id, user_id);
            let mut slow = Vec::new();
            for id in ids {
                let Some(conn) = s.conns.get(&id) else {
                    continue;
                };
                if let Some(m) = message(conn) {
                    if conn.sender.try_send(m).is_err() {
                        slow.push(id);
                    }
                }
            }
            for id in slow {
                close_conn(s, id, CloseReason::SlowConsumer);
            }
        })
    }
}

/// The user's connections, oldest first (a copy: callers close some of them).
fn user_conns(s: &HubState, tenant_id: Uuid, user_id: &str) -> Vec<ConnId> {
    s.tenants
        .get(&tenant_id)
        .and_then(|t| t.by_user.get(user_id))
        .cloned()
        .unwrap_or_default()
}

/// Records why, then unregisters: dropping the sender ends the connection's
/// channel once it has drained what was sent before.
fn close_conn(s: &mut HubState, id: ConnId, reason: CloseReason) {
    if let Some(conn) = s.conns.get(&id) {
        conn.shared.close(reason);
    }
    remove_conn(s, id);
}

fn remove_conn(s: &mut HubState, id: ConnId) {
    let Some(conn) = s.conns.remove(&id) else {
        return;
    };
    s.deadlines.remove(&(conn.deadline, id));
    let Some(route) = s.tenants.get_mut(&conn.tenant_id) else {
        return;
    };
    route.open = route.open.saturating_sub(1);
    for team in conn.teams.keys() {
        if let Some(ids) = route.by_team.get_mut(team) {
            ids.remove(&id);
            if ids.is_empty() {
                route.by_team.remove(team);
            }
        }
    }
    if let Some(ids) = route.by_user.get_mut(&conn.user_id) {
        ids.retain(|&i| i != id);
        if ids.is_empty() {
            route.by_user.remove(&conn.user_id);
        }
    }
    if route.by_user.is_empty() {
        s.tenants.remove(&conn.tenant_id);
    }
}

#[cfg(test)]
mod tests {
    use super::Outgoing;

    /// Every word of a slot is 256 bytes of each open stream (see `Outgoing`).
    #[test]
    fn a_channel_slot_is_two_words() {
        assert!(std::mem::size_of::<Outgoing>() <= 2 * std::mem::size_of::<usize>());
    }
}
