//! The outbox workers (ARCHITECTURE.md, invariant 6).
//!
//! Each loop: claim a batch (one statement, committed at once: a lease and an
//! attempt), deliver it outside any transaction with bounded concurrency,
//! record each result as it completes (grouped with the others completed
//! meanwhile, one statement per group, guarded by the attempt number), repeat.
//! Loops wake on `NotifyChannel::Outbox`, poll as a fallback, and claim again
//! at once after a non-empty batch. Any number of loops in any number of
//! processes share the work through `FOR UPDATE SKIP LOCKED`.
//!
//! Delivery is at least once: a worker that dies after sending but before
//! recording leaves a lease that expires, and the delivery is sent again with
//! the same id (webhook-id, Message-ID). At most `concurrency` deliveries are
//! sent and not yet recorded at any moment, so that is what a crash repeats. Every claim counts an attempt, so a
//! delivery that crashes its worker every time still ends `dead`.
//!
//! **Architecture invariant:** no transaction and no row lock is held while a
//! message is on the network.
//!
//! The settings, their defaults and why they are what they are:
//! [`OutboxConfig`](crate::config::OutboxConfig).

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
use tidings_core::NextAttempt;
use tokio::{
    sync::{mpsc, watch, Semaphore},
    task::JoinHandle,
};

use crate::secrets::{Purpose, SecretError, SecretKeys};
use crate::store::outbox::{self as store, ClaimedDelivery, CompletedDelivery, Completion};
use crate::{
    backoff::Backoff,
    channels::{
        email::EmailSender,
        webhook::{self, WebhookSender},
        Channels, Outcome,
    },
    config::OutboxConfig,
    db::PrimaryPool,
    deliveries::status::DeliveryStatus,
    instruments, listen,
    shutdown::Shutdown,
    state::AppState,
    store::notify::NotifyChannel,
};

impl OutboxConfig {
    /// The senders these settings describe; an unusable SMTP URL or From
    /// address is an error here, at start-up, not at the first email.
    pub fn channels(&self) -> anyhow::Result<Channels> {
        Ok(Channels {
            webhook: WebhookSender::new(self.allow_private, self.delivery_timeout)?,
            email: match &self.smtp_url {
                Some(url) => Some(EmailSender::new(
                    url,
                    &self.email_from,
                    self.delivery_timeout,
                )?),
                None => None,
            },
        })
    }

    /// A delivery of a batch claimed at `claimed_at` is started only before
    /// this instant, so that it finishes (timeout) and is recorded (a fifth of
    /// the lease as margin) before the lease ends and another worker may take it.
    fn start_deadline(&self, claimed_at: Instant) -> Instant {
        let usable = self
            .lease
            .saturating_sub(self.delivery_timeout)
            .saturating_sub(self.lease / 5);
        claimed_at + usable
    }
}

/// Starts the configured number of claim loops plus one LISTEN task.
pub fn spawn(state: &AppState, shutdown: &Shutdown) -> Vec<JoinHandle<()>> {
    let config = state.settings.outbox.clone();
    if config.loops == 0 {
        return Vec::new();
    }
    let channels = match config.channels() {
        Ok(channels) => Arc::new(channels),
        Err(err) => {
            tracing::error!(error = %format!("{err:#}"), "outbox workers not started");
            return Vec::new();
        }
    };
    if channels.email.is_none() {
        tracing::warn!(
            "no TIDINGS_SMTP_URL: this process leaves email deliveries to workers that have one"
        );
    }
    // Woken on every notification, and after every reconnect (a notification
    // sent while disconnected is lost; the wake-up makes up for it).
    let (waker, wake_rx) = listen::spawn_waker(
        state.listen_pool.clone(),
        NotifyChannel::Outbox,
        shutdown.clone(),
    );
    let mut handles = vec![waker];
    for n in 0..config.loops {
        let worker = Worker {
            pool: state.pool.clone(),
            config: config.clone(),
            channels: channels.clone(),
            claimable: channels.claimable(),
            secrets: state.secrets.clone(),
        };
        let (wake, shutdown) = (wake_rx.clone(), shutdown.clone());
        handles.push(tokio::spawn(async move {
            worker.run(wake, shutdown).await;
            tracing::debug!(worker = n, "outbox worker stopped");
        }));
    }
    tracing::info!(
        loops = config.loops,
        batch = config.batch,
        concurrency = config.concurrency,
        lease_ms = config.lease.as_millis() as u64,
        max_attempts = config.retry.max_attempts,
        "outbox workers started"
    );
    handles
}

/// A webhook endpoint ready to send to, or why its secret cannot be opened here.
type OpenedEndpoint = Result<webhook::Endpoint, SecretError>;

struct Worker {
    pool: PrimaryPool,
    config: OutboxConfig,
    channels: Arc<Channels>,
    /// Opens endpoint secrets, which are stored sealed (`crate::secrets`).
    secrets: Arc<SecretKeys>,
    claimable: Vec<tidings_core::Channel>,
}

impl Worker {
    async fn run(&self, mut wake: watch::Receiver<u64>, mut shutdown: Shutdown) {
        let mut backoff = Backoff::default();
        let lease_ms = u64::try_from(self.config.lease.as_millis()).unwrap_or(u64::MAX);
        while !shutdown.is_requested() {
            // Notifications from now on wake the wait below, even those that
            // arrive while this claim runs.
            wake.borrow_and_update();
            let claimed_at = Instant::now();
            let batch = match store::claim_deliveries(
                &self.pool,
                self.config.batch,
                lease_ms,
                &self.claimable,
            )
            .await
            {
                Ok(batch) => batch,
                Err(err) => {
                    tracing::warn!(error = %err, "claiming deliveries failed; backing off");
                    if shutdown.sleep(backoff.next_pause()).await {
                        break;
                    }
                    continue;
                }
            };
            backoff.reset();
            if batch.is_empty() {
                tokio::select! {
                    _ = shutdown.wait() => break,
                    changed = wake.changed() => {
                        // The LISTEN task is gone (shutting down): poll instead.
                        if changed.is_err() {
                            tokio::time::sleep(self.config.poll).await;
                        }
                    }
                    _ = tokio::time::sleep(self.config.poll) => {}
                }
                continue;
            }
            self.deliver_and_record(batch, claimed_at, &shutdown).await;
        }
    }

    /// Sends a batch with bounded concurrency and records each result as it
    /// completes, together with whatever else has completed meanwhile (one
    /// statement per group, written while the other sends go on).
    ///
    /// A send holds one of `concurrency` permits from before it starts until
    /// its result is recorded, so sends on the network plus results not yet
    /// recorded are never more than `concurrency`: a worker killed at any
    /// moment leaves at most that many deliveries that were sent and will be
    /// sent again when their lease ends. (Recording the batch at its end, as
    /// before, repeated every send of the batch up to the kill.)
    async fn deliver_and_record(
        &self,
        batch: Vec<ClaimedDelivery>,
        claimed_at: Instant,
        shutdown: &Shutdown,
    ) {
        let permits = Arc::new(Semaphore::new(self.config.concurrency));
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        let endpoints = self.endpoints(&batch);
        let sends = async move {
            futures::stream::iter(batch.into_iter().zip(endpoints))
                .for_each_concurrent(self.config.concurrency, |(delivery, endpoint)| {
                    let (done_tx, permits) = (done_tx.clone(), permits.clone());
                    async move {
                        let Ok(permit) = permits.acquire_owned().await else {
                            return;
                        };
                        let done = self
                            .deliver_one(delivery, endpoint, claimed_at, shutdown)
                            .await;
                        // The receiver lives until every sender is gone.
                        let _ = done_tx.send((done, permit));
                    }
                })
                .await;
            // `done_tx` is dropped here: the recorder ends after the last group.
        };
        let recorder = async {
            while let Some(first) = done_rx.recv().await {
                let mut group = vec![first];
                while let Ok(more) = done_rx.try_recv() {
                    group.push(more);
                }
                let (results, permits): (Vec<CompletedDelivery>, Vec<_>) =
                    group.into_iter().unzip();
                self.record(results, claimed_at, shutdown).await;
                drop(permits);
            }
        };
        tokio::join!(sends, recorder);
    }

    /// Sends one delivery (or does not: shutdown, lease too short, out of
    /// attempts) and decides its completion.
    async fn deliver_one(
        &self,
        delivery: ClaimedDelivery,
        endpoint: Option<Arc<OpenedEndpoint>>,
        claimed_at: Instant,
        shutdown: &Shutdown,
    ) -> CompletedDelivery {
        let deadline = self.config.start_deadline(claimed_at);
        let completion = if shutdown.is_requested() || Instant::now() >= deadline {
            Completion::Release
        } else if delivery.attempts > self.config.retry.max_attempts as i32 {
            // Only leases that expired get here: attempts were claimed
            // and never recorded, so the worker died or hung each time.
            Completion::Dead {
                error: format!(
                    "gave up after {} attempts whose workers stopped before recording a result",
                    delivery.attempts - 1
                ),
            }
        } else {
            let outcome = match endpoint.as_deref() {
                None => self.channels.deliver(&delivery, None).await,
                Some(Ok(endpoint)) => self.channels.deliver(&delivery, Some(endpoint)).await,
                // The key may yet be supplied (TIDINGS_SECRET_KEY):
                // retried, not dead at once.
                Some(Err(err)) => {
                    tracing::error!(delivery = delivery.id, error = %err, "cannot open the endpoint's secret");
                    Outcome::transient("the endpoint's secret cannot be opened on this worker")
                }
            };
            self.completion_of(&delivery, outcome)
        };
        if let Completion::Dead { error } = &completion {
            tracing::warn!(delivery = delivery.id, tenant = %delivery.tenant_id, %error, "delivery is dead");
        }
        observe(delivery.channel, &completion);
        CompletedDelivery {
            tenant_id: delivery.tenant_id,
            id: delivery.id,
            attempts: delivery.attempts,
            completion,
        }
    }

    /// The webhook endpoint of each delivery of `batch`, in its order: its
    /// secrets opened and the endpoint prepared for sending
    /// ([`WebhookSender::endpoint`]) once per endpoint, not once per delivery
    /// (a batch's hundred deliveries usually go to a handful of endpoints).
    /// `None`: not a webhook, or its endpoint was deleted.
    fn endpoints(&self, batch: &[ClaimedDelivery]) -> Vec<Option<Arc<OpenedEndpoint>>> {
        let mut prepared: HashMap<(&str, &str, Option<&str>), Arc<OpenedEndpoint>> = HashMap::new();
        batch
            .iter()
            .map(|delivery| {
                let (Some(url), Some(secret)) = (&delivery.endpoint_url, &delivery.endpoint_secret)
                else {
                    return None;
                };
                if delivery.channel != tidings_core::Channel::Webhook {
                    return None;
                }
                let previous = delivery.endpoint_previous_secret.as_deref();
                let endpoint = prepared
                    .entry((url, secret, previous))
                    .or_insert_with(|| Arc::new(self.open_endpoint(url, secret, previous)));
                Some(endpoint.clone())
            })
            .collect()
    }

    /// An endpoint's secrets opened (they are stored sealed) and the endpoint
    /// made ready to sign with them.
    fn open_endpoint(&self, url: &str, secret: &str, previous: Option<&str>) -> OpenedEndpoint {
        let mut opened = Vec::with_capacity(2);
        for stored in std::iter::once(secret).chain(previous) {
            opened.push(self.secrets.open(Purpose::WebhookSecret, stored)?);
        }
        Ok(self
            .channels
            .webhook
            .endpoint(url, opened.iter().map(String::as_str)))
    }

    fn completion_of(&self, delivery: &ClaimedDelivery, outcome: Outcome) -> Completion {
        match outcome {
            Outcome::Sent => Completion::Sent,
            Outcome::Skipped { reason } => Completion::Skipped { reason },
            Outcome::Failed {
                error,
                permanent: true,
            } => Completion::Dead { error },
            Outcome::Failed {
                error,
                permanent: false,
            } => {
                let attempts = u32::try_from(delivery.attempts).unwrap_or(0);
                match self.config.retry.next(attempts, rand::random::<f64>()) {
                    NextAttempt::RetryAfterMs(after_ms) => Completion::Retry { after_ms, error },
                    NextAttempt::GiveUp => Completion::Dead {
                        error: format!("after {attempts} attempts: {error}"),
                    },
                }
            }
        }
    }

    /// Records a group of results, retrying while the database is unreachable.
    /// Gives up when the lease has run out (the deliveries will be claimed and
    /// sent again: at least once) or, on shutdown, after a few seconds.
    async fn record(
        &self,
        results: Vec<CompletedDelivery>,
        claimed_at: Instant,
        shutdown: &Shutdown,
    ) {
        let lease_end = claimed_at + self.config.lease;
        let mut backoff = Backoff::default();
        let mut shutdown_deadline: Option<Instant> = None;
        loop {
            match complete(&self.pool, &results).await {
                Ok(written) => {
                    if written < results.len() as u64 {
                        tracing::info!(
                            claimed = results.len(),
                            written,
                            "some deliveries were claimed again after their lease expired; their newer results win"
                        );
                    }
                    return;
                }
                Err(err) => {
                    let now = Instant::now();
                    if shutdown.is_requested() {
                        shutdown_deadline.get_or_insert(now + Duration::from_secs(5));
                    }
                    if now >= lease_end || shutdown_deadline.is_some_and(|d| now >= d) {
                        tracing::error!(
                            error = %err,
                            deliveries = results.len(),
                            "could not record delivery results; they will be delivered again after the lease"
                        );
                        return;
                    }
                    tracing::warn!(error = %err, "recording delivery results failed; retrying");
                    tokio::time::sleep(backoff.next_pause()).await;
                }
            }
        }
    }
}

/// Records results with the store's completion; a test build standing in
/// for the version before migration 0022 (`test_hooks::WITHOUT_LAST_MIGRATION`)
/// records them as that version did, in place.
async fn complete(pool: &PrimaryPool, results: &[CompletedDelivery]) -> sqlx::Result<u64> {
    #[cfg(feature = "test-hooks")]
    if crate::test_hooks::armed(crate::test_hooks::WITHOUT_LAST_MIGRATION) {
        return store::complete_deliveries_in_place(pool, results).await;
    }
    store::complete_deliveries(pool, results).await
}

/// Counts a decided completion: a final status, or a retry. (Counted when
/// decided, before it is recorded: a completion that loses to a newer claim
/// is counted by both workers, which is rare and only a count.)
fn observe(channel: tidings_core::Channel, completion: &Completion) {
    let channel = channel.as_str();
    match completion {
        Completion::Sent => instruments::delivery_finished(channel, DeliveryStatus::Sent.as_str()),
        Completion::Skipped { .. } => {
            instruments::delivery_finished(channel, DeliveryStatus::Skipped.as_str())
        }
        Completion::Dead { .. } => {
            instruments::delivery_finished(channel, DeliveryStatus::Dead.as_str())
        }
        Completion::Retry { .. } => instruments::delivery_retried(channel),
        Completion::Release => {}
    }
}

/// `tidings worker`: the outbox workers alone, until SIGTERM or SIGINT.
pub async fn run_worker(args: crate::config::WorkerCommandArgs) -> anyhow::Result<()> {
    use std::io::Write;

    use anyhow::Context;

    let signals = crate::shutdown::OsSignals::install().context("installing signal handlers")?;
    // The embedded PostgreSQL belongs to the `tidings serve` that started it;
    // a second postmaster on its data directory would stop the first.
    let url = args
        .database
        .database_url
        .as_deref()
        .context("`tidings worker` needs DATABASE_URL (or --database-url): it does not start a PostgreSQL of its own")?;
    let outbox = OutboxConfig::from_args(&args.worker)?;
    outbox.channels()?;
    anyhow::ensure!(
        outbox.loops >= 1,
        "TIDINGS_OUTBOX_WORKERS is 0: this worker would do nothing"
    );
    let pool = crate::db::connect_primary(url, &args.database, Duration::from_secs(30)).await?;
    crate::db::migrate(&pool).await?;
    let secrets = crate::tenants::open_secret_keys(&pool, &args.database).await?;
    let state = AppState::new(
        pool,
        crate::state::Settings {
            outbox,
            ..Default::default()
        },
        secrets,
    );
    let (trigger, shutdown) = crate::shutdown::channel();
    let handles = spawn(&state, &shutdown);
    // The one line on stdout, for scripts and tests.
    println!("tidings worker running");
    std::io::stdout().flush().ok();
    signals.recv().await;
    trigger.trigger();
    for handle in handles {
        if let Err(err) = handle.await {
            tracing::error!(error = %err, "worker panicked");
        }
    }
    state.pool.close().await;
    Ok(())
}
