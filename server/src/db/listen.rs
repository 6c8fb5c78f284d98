//! The one LISTEN loop: connect, subscribe, report, and on any failure
//! reconnect with [`Backoff`]. Every listener of the server (the membership
//! cache, the outbox workers, team expansion) is built on [`Subscription`].
//!
//! Notifications sent while a listener is disconnected are lost, so a
//! subscription reports [`Event::Down`] when a session ends and [`Event::Up`]
//! once a new one is subscribed: each user decides what a gap means (the cache
//! flushes; workers look for work, since they may have missed a wake-up).

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
    time::{Duration, Instant},
};

use sqlx::{postgres::PgListener, PgPool};
use tokio::{sync::watch, task::JoinHandle};

use crate::{
    app::instruments, app::shutdown::Shutdown, store::notify::NotifyChannel,
    workers::backoff::Backoff,
};

#[derive(Debug)]
pub enum Event {
    /// Subscribed: notifications from now on arrive. Any sent before may not.
    Up,
    Notification(String),
    /// The session ended; notifications are lost until the next `Up`.
    Down,
}

/// A LISTEN session on one channel that reconnects by itself.
pub struct Subscription {
    pool: PgPool,
    channel: NotifyChannel,
    shutdown: Shutdown,
    listener: Option<PgListener>,
    backoff: Backoff,
    /// Pause before the next connection attempt (after a failure).
    pause: Option<std::time::Duration>,
    /// This subscription's entry in [`SESSIONS`].
    slot: u64,
}

/// Since when each live subscription of this process has had no session
/// (`None`: subscribed). Readiness reads it: an instance whose LISTEN has been
/// down for long serves from bypassed caches and polls, and says so.
static SESSIONS: Mutex<BTreeMap<u64, (&'static str, Option<Instant>)>> =
    Mutex::new(BTreeMap::new());
static NEXT_SLOT: AtomicU64 = AtomicU64::new(0);

fn mark(slot: u64, channel: &'static str, down_since: Option<Instant>) {
    instruments::listen_up(channel, down_since.is_none());
    if let Ok(mut sessions) = SESSIONS.lock() {
        sessions.insert(slot, (channel, down_since));
    }
}

/// The channel whose subscription has been without a session the longest,
/// and for how long; `None` when every subscription is up.
pub fn longest_down() -> Option<(&'static str, Duration)> {
    let sessions = SESSIONS.lock().ok()?;
    sessions
        .values()
        .filter_map(|(channel, since)| since.map(|since| (*channel, since.elapsed())))
        .max_by_key(|(_, down)| *down)
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Ok(mut sessions) = SESSIONS.lock() {
            sessions.remove(&self.slot);
        }
    }
}

impl Subscription {
    pub fn new(pool: PgPool, channel: NotifyChannel, shutdown: Shutdown) -> Self {
        let slot = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
        // Not subscribed yet: down from the start, so one that never comes up
        // is noticed too.
        mark(slot, channel.name(), Some(Instant::now()));
        Subscription {
            pool,
            channel,
            shutdown,
            listener: None,
            backoff: Backoff::default(),
            pause: None,
            slot,
        }
    }

    /// The next event; `None` once shutdown is requested. Connection failures
    /// are logged and retried here, with backoff, and never returned.
    pub async fn next(&mut self) -> Option<Event> {
        let channel = self.channel.name();
        loop {
            if self.shutdown.is_requested() {
                return None;
            }
            let Some(listener) = self.listener.as_mut() else {
                if let Some(pause) = self.pause.take() {
                    if self.shutdown.sleep(pause).await {
                        return None;
                    }
                }
                let connected = tokio::select! {
                    _ = self.shutdown.wait() => return None,
                    connected = connect(&self.pool, self.channel) => connected,
                };
                match connected {
                    Ok(listener) => {
                        self.listener = Some(listener);
                        self.backoff.reset();
                        mark(self.slot, channel, None);
                        tracing::debug!(channel, "LISTEN up");
                        return Some(Event::Up);
                    }
                    Err(err) => {
                        tracing::warn!(channel, error = %err, "LISTEN failed; retrying");
                        self.pause = Some(self.backoff.next_pause());
                        continue;
                    }
                }
            };
            let received = tokio::select! {
                _ = self.shutdown.wait() => return None,
                received = listener.try_recv() => received,
            };
            match received {
                Ok(Some(notification)) => {
                    return Some(Event::Notification(notification.payload().to_owned()))
                }
                Ok(None) => tracing::warn!(channel, "LISTEN connection lost; reconnecting"),
                Err(err) => tracing::warn!(channel, error = %err, "LISTEN failed; reconnecting"),
            }
            self.listener = None;
            self.pause = Some(self.backoff.next_pause());
            mark(self.slot, channel, Some(Instant::now()));
            return Some(Event::Down);
        }
    }
}

async fn connect(pool: &PgPool, channel: NotifyChannel) -> sqlx::Result<PgListener> {
    #[cfg(feature = "test-hooks")]
    if crate::app::test_hooks::armed(crate::app::test_hooks::LISTEN_REFUSED) {
        return Err(sqlx::Error::Protocol(format!(
            "{}=1: LISTEN refused",
            crate::app::test_hooks::LISTEN_REFUSED
        )));
    }
    let mut listener = PgListener::connect_with(pool).await?;
    // A lost connection must end the session (and be reported as `Down`), not
    // be reconnected silently inside sqlx.
    listener.eager_reconnect(false);
    listener.listen(channel.name()).await?;
    Ok(listener)
}

/// A task that bumps the returned counter on every event of a subscription:
/// each notification, each reconnect and each loss, since after a gap there
/// may be work nobody announced. For workers that only need waking.
pub fn spawn_waker(
    pool: PgPool,
    channel: NotifyChannel,
    shutdown: Shutdown,
) -> (JoinHandle<()>, watch::Receiver<u64>) {
    let (wake, woken) = watch::channel(0u64);
    let task = tokio::spawn(async move {
        let mut subscription = Subscription::new(pool, channel, shutdown);
        while subscription.next().await.is_some() {
            wake.send_modify(|n| *n = n.wrapping_add(1));
        }
    });
    (task, woken)
}
