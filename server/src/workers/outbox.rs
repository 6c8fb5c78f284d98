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
//! [`OutboxConfig`](crate::app::config::OutboxConfig).

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
use uuid::Uuid;

use crate::alerts::preferences::token::TokenKeys;
use crate::alerts::templates::{
    self, locale::Locale, RenderedEmail, TemplateVersion, VersionCache,
};
use crate::store::outbox::{self as store, ClaimedDelivery, CompletedDelivery, Completion};
use crate::store::templates as template_store;
use crate::tenants::secrets::{Binding, SecretError, SecretKeys};
use crate::{
    app::config::OutboxConfig,
    app::instruments,
    app::shutdown::Shutdown,
    app::state::AppState,
    db::listen,
    db::PrimaryPool,
    deliveries::{fallback, status::DeliveryStatus},
    store::notify::NotifyChannel,
    workers::backoff::Backoff,
    workers::channels::{
        email::{EmailSender, ListUnsubscribe},
        webhook::{self, WebhookSender},
        Channels, Outcome,
    },
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

    /// What an attempt's outcome makes of a delivery (or a digest) claimed
    /// for its `attempts`th time: a transient failure is retried on the
    /// schedule until it gives up.
    pub(crate) fn completion_of(&self, attempts: i32, outcome: Outcome) -> Completion {
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
                let attempts = u32::try_from(attempts).unwrap_or(0);
                match self.retry.next(attempts, rand::random::<f64>()) {
                    NextAttempt::RetryAfterMs(after_ms) => Completion::Retry { after_ms, error },
                    NextAttempt::GiveUp => Completion::Dead {
                        error: format!("after {attempts} attempts: {error}"),
                    },
                }
            }
        }
    }

    /// A delivery of a batch claimed at `claimed_at` is started only before
    /// this instant, so that it finishes (timeout) and is recorded (a fifth of
    /// the lease as margin) before the lease ends and another worker may take it.
    pub(crate) fn start_deadline(&self, claimed_at: Instant) -> Instant {
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
    let mut channels = match config.channels() {
        Ok(channels) => channels,
        Err(err) => {
            tracing::error!(error = %format!("{err:#}"), "outbox workers not started");
            return Vec::new();
        }
    };
    if let Some(email) = &mut channels.email {
        match &config.public_url {
            Some(public_url) => {
                email.unsubscribe = Some(ListUnsubscribe {
                    public_url: public_url.clone(),
                    keys: TokenKeys::new(&state.secrets),
                });
            }
            None => tracing::warn!(
                "no TIDINGS_PUBLIC_URL: emails carry no one-click unsubscribe link (List-Unsubscribe)"
            ),
        }
    }
    let channels = Arc::new(channels);
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
    handles.extend(crate::workers::digests::spawn(
        state.pool.clone(),
        config.clone(),
        channels.clone(),
        shutdown.clone(),
    ));
    let templates = Arc::new(VersionCache::default());
    for n in 0..config.loops {
        let worker = Worker {
            pool: state.pool.clone(),
            config: config.clone(),
            channels: channels.clone(),
            claimable: channels.claimable(),
            secrets: state.secrets.clone(),
            templates: templates.clone(),
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
    /// Opens endpoint secrets, which are stored sealed (`crate::tenants::secrets`).
    secrets: Arc<SecretKeys>,
    claimable: Vec<tidings_core::Channel>,
    /// Template versions, shared by the loops (versions never change).
    templates: Arc<VersionCache>,
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
            let batch = match self.claim(lease_ms).await {
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
            let batch = self.with_list_categories(batch).await;
            self.deliver_and_record(batch, claimed_at, &shutdown).await;
        }
    }

    /// Claims a batch and decides its delayed
    /// deliveries (`deliveries::fallback`): what comes back is what to send.
    async fn claim(&self, lease_ms: u64) -> sqlx::Result<Vec<ClaimedDelivery>> {
        #[cfg(feature = "test-hooks")]
        if crate::db::stands_in_for_previous_version() {
            return store::claim_deliveries_before_delayed_channels(
                &self.pool,
                self.config.batch,
                lease_ms,
                &self.claimable,
            )
            .await;
        }
        fallback::claim_and_decide(&self.pool, self.config.batch, lease_ms, &self.claimable).await
    }

    /// Fills in the category of each email whose alert has a non-critical
    /// one, for its unsubscribe headers: one statement per batch with email,
    /// only when unsubscribe links are on. When it fails the emails go out
    /// without the headers rather than not at all.
    async fn with_list_categories(&self, mut batch: Vec<ClaimedDelivery>) -> Vec<ClaimedDelivery> {
        let links_on = self
            .channels
            .email
            .as_ref()
            .is_some_and(|e| e.unsubscribe.is_some());
        if !links_on || !crate::alerts::preferences::in_schema() {
            return batch;
        }
        let (tenants, alerts): (Vec<Uuid>, Vec<Uuid>) = batch
            .iter()
            .filter(|d| d.channel == tidings_core::Channel::Email)
            .map(|d| (d.tenant_id, d.alert_id))
            .unzip();
        if alerts.is_empty() {
            return batch;
        }
        match crate::store::preferences::list_alert_categories(&self.pool, &tenants, &alerts).await
        {
            Ok(found) => {
                let listed: HashMap<(Uuid, Uuid), String> = found
                    .into_iter()
                    .filter(|(_, _, _, critical)| !critical)
                    .map(|(tenant, alert, key, _)| ((tenant, alert), key))
                    .collect();
                for d in batch
                    .iter_mut()
                    .filter(|d| d.channel == tidings_core::Channel::Email)
                {
                    d.list_category = listed.get(&(d.tenant_id, d.alert_id)).cloned();
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "reading alert categories failed; emails go without unsubscribe headers");
            }
        }
        batch
    }

    /// The delivery's one-click unsubscribe link, for its template: only
    /// for an email of a non-critical category with links on.
    fn unsubscribe_url(&self, delivery: &ClaimedDelivery) -> Option<String> {
        let list = self.channels.email.as_ref()?.unsubscribe.as_ref()?;
        let category = delivery.list_category.as_deref()?;
        let recipient = tidings_core::UserId::parse(delivery.recipient_id.as_str()).ok()?;
        Some(list.url(delivery.tenant_id, &recipient, category))
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
        let mut rendered = self.render_templates(&batch).await;
        let sends = async move {
            futures::stream::iter(batch.into_iter().zip(endpoints))
                .for_each_concurrent(self.config.concurrency, |(delivery, endpoint)| {
                    let (done_tx, permits) = (done_tx.clone(), permits.clone());
                    let email = rendered.remove(&(delivery.tenant_id, delivery.id));
                    async move {
                        let Ok(permit) = permits.acquire_owned().await else {
                            return;
                        };
                        let done = self
                            .deliver_one(delivery, endpoint, email, claimed_at, shutdown)
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
        email: Option<Result<RenderedEmail, Outcome>>,
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
            let outcome = match (endpoint.as_deref(), email) {
                // The template could not be rendered for this delivery (dead)
                // or read (retried); the others of the batch go on.
                (_, Some(Err(outcome))) => outcome,
                (_, Some(Ok(email))) => self.channels.deliver(&delivery, None, Some(&email)).await,
                (None, None) => self.channels.deliver(&delivery, None, None).await,
                (Some(Ok(endpoint)), None) => {
                    self.channels.deliver(&delivery, Some(endpoint), None).await
                }
                // The key may yet be supplied (TIDINGS_SECRET_KEY):
                // retried, not dead at once.
                (Some(Err(err)), None) => {
                    tracing::error!(delivery = delivery.id, error = %err, "cannot open the endpoint's secret");
                    Outcome::transient("the endpoint's secret cannot be opened on this worker")
                }
            };
            self.config.completion_of(delivery.attempts, outcome)
        };
        if let Completion::Dead { error } = &completion {
            tracing::warn!(delivery = delivery.id, tenant = %delivery.tenant_id, %error, "delivery is dead");
        }
        observe(delivery.channel, &completion);
        CompletedDelivery {
            tenant_id: delivery.tenant_id,
            id: delivery.id,
            attempts: delivery.attempts,
            version: delivery.version,
            completion,
        }
    }

    /// The emails of `batch` that recorded a template, rendered with it
    /// (docs/design/templates.md, "At send"): the recipient's profile and the
    /// tenant's default locale in one statement for the batch (none when the
    /// batch has no email), each version read once per process, every
    /// render in one blocking task under the sandbox's limits. A render that
    /// fails is that delivery's permanent failure (it ends `dead` with the
    /// reason); a read that fails retries those deliveries.
    async fn render_templates(
        &self,
        batch: &[ClaimedDelivery],
    ) -> HashMap<(uuid::Uuid, i64), Result<RenderedEmail, Outcome>> {
        let emails: Vec<&ClaimedDelivery> = batch
            .iter()
            .filter(|d| d.channel == tidings_core::Channel::Email)
            .collect();
        let mut out = HashMap::new();
        if emails.is_empty() {
            return out;
        }
        let tenants: Vec<uuid::Uuid> = emails.iter().map(|d| d.tenant_id).collect();
        let ids: Vec<i64> = emails.iter().map(|d| d.id).collect();
        let rows = match template_store::list_delivery_templates(&self.pool, &tenants, &ids).await {
            Ok(rows) => rows,
            Err(err) => {
                for d in &emails {
                    out.insert(
                        (d.tenant_id, d.id),
                        Err(Outcome::transient(format!("reading the template: {err}"))),
                    );
                }
                return out;
            }
        };
        let mut jobs = Vec::with_capacity(rows.len());
        for row in rows {
            let key = (row.tenant_id, row.id);
            let Some(delivery) = emails.iter().find(|d| (d.tenant_id, d.id) == key) else {
                continue;
            };
            let version = match self
                .templates
                .get(&self.pool, row.tenant_id, row.template_version_id)
                .await
            {
                Ok(Some(version)) => version,
                Ok(None) => {
                    out.insert(
                        key,
                        Err(Outcome::permanent(format!(
                            "template version {} is gone",
                            row.template_version_id
                        ))),
                    );
                    continue;
                }
                Err(err) => {
                    out.insert(
                        key,
                        Err(Outcome::transient(format!("reading the template: {err}"))),
                    );
                    continue;
                }
            };
            // An alert deleted since: the sender skips it, nothing to render.
            let (Some(event_type), Some(payload)) = (&delivery.event_type, &delivery.payload)
            else {
                continue;
            };
            let variables = templates::Variables {
                payload: serde_json::from_str(payload.get()).unwrap_or_default(),
                recipient: templates::Recipient {
                    id: delivery.recipient_id.clone(),
                    display_name: row.display_name,
                    locale: row.locale,
                    timezone: row.timezone,
                },
                event_type: event_type.clone(),
                entity_id: delivery.entity_id.clone().unwrap_or_default(),
                subject: delivery.subject.clone(),
                category: delivery.list_category.clone(),
                unsubscribe_url: self.unsubscribe_url(delivery),
            };
            jobs.push((key, version, variables, row.default_locale));
        }
        let rendered = tokio::task::spawn_blocking(move || {
            jobs.into_iter()
                .map(|(key, version, variables, tenant_default)| {
                    (
                        key,
                        render_email(&version, &variables, tenant_default.as_deref()),
                    )
                })
                .collect::<Vec<_>>()
        })
        .await;
        match rendered {
            Ok(rendered) => out.extend(rendered),
            Err(err) => tracing::error!(error = %err, "rendering templates panicked"),
        }
        out
    }

    /// The webhook endpoint of each delivery of `batch`, in its order: its
    /// secrets opened and the endpoint prepared for sending
    /// ([`WebhookSender::endpoint`]) once per endpoint, not once per delivery
    /// (a batch's hundred deliveries usually go to a handful of endpoints).
    /// `None`: not a webhook, or its endpoint was deleted.
    fn endpoints(&self, batch: &[ClaimedDelivery]) -> Vec<Option<Arc<OpenedEndpoint>>> {
        let mut prepared: HashMap<(Uuid, &str, &str, Option<&str>), Arc<OpenedEndpoint>> =
            HashMap::new();
        batch
            .iter()
            .map(|delivery| {
                let (Some(id), Some(url), Some(secret)) = (
                    delivery.endpoint_id,
                    &delivery.endpoint_url,
                    &delivery.endpoint_secret,
                ) else {
                    return None;
                };
                if delivery.channel != tidings_core::Channel::Webhook {
                    return None;
                }
                let previous = delivery.endpoint_previous_secret.as_deref();
                let binding = Binding::webhook_secret(delivery.tenant_id, id);
                let endpoint = prepared
                    .entry((id, url, secret, previous))
                    .or_insert_with(|| {
                        Arc::new(self.open_endpoint(&binding, url, secret, previous))
                    });
                Some(endpoint.clone())
            })
            .collect()
    }

    /// An endpoint's secrets opened (they are stored sealed) and the endpoint
    /// made ready to sign with them.
    fn open_endpoint(
        &self,
        binding: &Binding,
        url: &str,
        secret: &str,
        previous: Option<&str>,
    ) -> OpenedEndpoint {
        let mut opened = Vec::with_capacity(2);
        for stored in std::iter::once(secret).chain(previous) {
            opened.push(self.secrets.open(binding, stored)?);
        }
        Ok(self
            .channels
            .webhook
            .endpoint(url, opened.iter().map(String::as_str)))
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

/// An email delivery's template rendered for its recipient: the variant
/// of the recipient's locale (with fallback), every failure permanent.
fn render_email(
    version: &TemplateVersion,
    variables: &templates::Variables,
    tenant_default: Option<&str>,
) -> Result<RenderedEmail, Outcome> {
    let user = variables
        .recipient
        .locale
        .as_deref()
        .and_then(|l| Locale::parse(l).ok());
    let tenant_default = tenant_default.and_then(|l| Locale::parse(l).ok());
    let Some((locale, templates::Content::Email(content))) =
        version.variant(user.as_ref(), tenant_default.as_ref())
    else {
        return Err(Outcome::permanent(format!(
            "template version {} has no email variant",
            version.id
        )));
    };
    templates::render_email(content, locale, variables)
        .map_err(|err| Outcome::permanent(format!("template version {}: {err}", version.id)))
}

/// Records results with the store's completion; a test build standing in
/// for the version before migration 0022 (`test_hooks::WITHOUT_LAST_MIGRATION`)
/// records them as that version did, in place.
async fn complete(pool: &PrimaryPool, results: &[CompletedDelivery]) -> sqlx::Result<u64> {
    #[cfg(feature = "test-hooks")]
    if crate::db::stands_in_for_previous_version() {
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
pub async fn run_worker(args: crate::app::config::WorkerCommandArgs) -> anyhow::Result<()> {
    use std::io::Write;

    use anyhow::Context;

    let signals =
        crate::app::shutdown::OsSignals::install().context("installing signal handlers")?;
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
        crate::app::state::Settings {
            outbox,
            ..Default::default()
        },
        secrets,
    );
    let (trigger, shutdown) = crate::app::shutdown::channel();
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
