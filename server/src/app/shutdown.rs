//! One shutdown signal for the HTTP server and every background worker.

use tokio::sync::watch;

/// Cloneable handle; `wait` resolves once shutdown has been requested.
#[derive(Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

pub struct ShutdownTrigger {
    tx: watch::Sender<bool>,
}

pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger { tx }, Shutdown { rx })
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        let _ = self.tx.send(true);
    }
}

impl Shutdown {
    pub fn is_requested(&self) -> bool {
        *self.rx.borrow()
    }

    pub async fn wait(&mut self) {
        // An error means the trigger is gone, which also means shutting down.
        let _ = self.rx.wait_for(|requested| *requested).await;
    }

    /// Sleeps for `duration` unless shutdown comes first; true if it did.
    pub async fn sleep(&mut self, duration: std::time::Duration) -> bool {
        tokio::select! {
            _ = self.wait() => true,
            _ = tokio::time::sleep(duration) => false,
        }
    }
}

/// SIGINT and SIGTERM handlers, installed before the server announces itself so
/// that a signal arriving right after start-up is never handled by the default
/// action (which would leave an embedded PostgreSQL running).
pub struct OsSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl OsSignals {
    pub fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(OsSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    pub async fn recv(mut self) {
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM received; shutting down"),
            _ = self.int.recv() => tracing::info!("SIGINT received; shutting down"),
        }
    }
}
