//! Workload notify: time to notify. How long from `POST /v1/alerts` to the
//! tenant's webhook receiving the request, and to the in-app item arriving on
//! an open stream, when the service is busy but not saturated.
//!
//! A tenant of its own ([`TENANT`]) with one webhook endpoint at a timing
//! sink (a loopback receiver stamping each request's arrival) and
//! [`RECIPIENTS`] users, each holding a stream. Every alert goes to all of
//! them on `in_app` and `webhook`: ten webhook deliveries and ten stream
//! pushes per alert. One `tidings worker` with the default settings sends:
//! its poll interval is a second, so a p99 far below it shows the NOTIFY
//! wake-up at work.
//!
//! First the maximum: posters in a closed loop for a while; the maximum alert
//! rate is the alerts posted ÷ the time until the last of their webhooks
//! arrived (what the service sustains end to end, not what it accepts).
//! Then half that rate, open loop (one task per alert, so a slow answer
//! never delays the next): each delivery's time to notify is its arrival
//! minus when its alert's POST was sent. Checked: every webhook arrived once,
//! and every stream received each alert once.

use std::{
    collections::HashMap,
    path::Path,
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use serde_json::json;
use tokio::sync::{mpsc, watch, Semaphore};

use super::{create_sink_endpoint, serve_before, stream::hold_stream, user_token, Ctx};
use crate::{
    report::{Aim, Ratio, Table, WorkloadResult},
    seed::{api_key, ensure_tenant},
    server::{Launch, Sink, Tidings},
    stats::{Latency, Spread},
    tier::TierName,
};

/// The workload's tenant (the seed never creates it).
const TENANT: i64 = 901;
/// Recipients of every alert: ten deliveries per alert, as the aim is put.
const RECIPIENTS: usize = 10;
/// The aim: a notification reaches its receiver within 50 ms at p99.
const AIM_P99_MS: f64 = 50.0;
/// Sequence numbers of the measured phase start here, apart from the probe's.
const MEASURED_FROM: u32 = 1_000_000;
/// Legs per build when a before build is measured beside this one.
const BEFORE_REPS: usize = 3;

struct Sizes {
    /// The closed-loop probe for the maximum rate.
    probe: Duration,
    posters: usize,
    /// The open-loop phase at half the maximum.
    measure: Duration,
}

fn sizes(tier: TierName) -> Sizes {
    match tier {
        TierName::S => Sizes {
            probe: Duration::from_secs(2),
            posters: 8,
            measure: Duration::from_secs(3),
        },
        TierName::M => Sizes {
            probe: Duration::from_secs(8),
            posters: 16,
            measure: Duration::from_secs(20),
        },
    }
}

fn recipient(i: usize) -> String {
    format!("notify-{i}")
}

/// Posts one alert carrying `seq` to every recipient; whether it was accepted.
async fn post_alert(ctx: &Ctx, base_url: &str, tag: &str, seq: u32) -> bool {
    let body = json!({
        "event_type": "invoice.paid",
        "entity_id": format!("{tag}-{seq}"),
        "recipients": (0..RECIPIENTS).map(recipient).collect::<Vec<_>>(),
        "channels": ["in_app", "webhook"],
        "subject": "Invoice paid",
        "payload": {"bench_seq": seq},
    });
    ctx.http
        .post(format!("{base_url}/v1/alerts"))
        .bearer_auth(api_key(TENANT))
        .json(&body)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// Waits until the sink has `n` arrivals with a sequence number in `range`.
async fn wait_arrivals(
    sink: &Sink,
    range: std::ops::Range<u32>,
    n: usize,
) -> anyhow::Result<Vec<(u32, Instant)>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got: Vec<(u32, Instant)> = sink
            .arrivals
            .lock()
            .unwrap()
            .iter()
            .filter(|(seq, _)| range.contains(seq))
            .copied()
            .collect();
        if got.len() >= n {
            return Ok(got);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {n} webhooks arrived within 120 s",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One build under measure: the server its alerts are posted to and its
/// streams opened on, and the binary its worker runs.
struct Build<'a> {
    label: &'static str,
    bin: &'a Path,
    base_url: String,
}

/// What one leg measured on one build.
struct Leg {
    measured: Measured,
    /// In-app item on an open stream, ms after its alert's POST was sent.
    stream_ms: Vec<f64>,
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    let mut w = WorkloadResult::new("notify");
    let s = sizes(ctx.tier.name);
    ensure_tenant(&ctx.pool, TENANT, "bench-notify").await?;
    let this = Build {
        label: "this build",
        bin: &ctx.bin,
        base_url: ctx.server.base_url.clone(),
    };
    // With a before build, its own server (same database and environment)
    // and worker, legs alternating which build goes first.
    let before_server = match &ctx.before_bin {
        Some(bin) => Some((bin, serve_before(ctx, bin, "notify").await?)),
        None => None,
    };
    let before = before_server.as_ref().map(|(bin, server)| Build {
        label: "the before build",
        bin,
        base_url: server.base_url.clone(),
    });
    let outcome = measure_builds(ctx, &s, &this, before.as_ref()).await;
    if let Some((_, server)) = before_server {
        server.stop().await;
    }
    let (legs, before_legs) = outcome?;

    let mut t = Table::new(
        &format!(
            "Time to notify at half the maximum alert rate ({RECIPIENTS} recipients per alert, one worker, default poll 1 s)"
        ),
        &[
            "build",
            "path",
            "alerts /s (accepted, max → offered)",
            "notifications",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
        ],
    );
    let rates = |legs: &[Leg], rate: fn(&Measured) -> f64| -> Vec<f64> {
        legs.iter().map(|l| rate(&l.measured)).collect()
    };
    let accepted: fn(&Measured) -> f64 = |m| m.accepted_rate;
    let max: fn(&Measured) -> f64 = |m| m.max_rate;
    let offered: fn(&Measured) -> f64 = |m| m.offered_rate;
    let mut rows = |build: &Build, legs: &[Leg]| {
        let rate = |r: fn(&Measured) -> f64| Spread::of(&rates(legs, r)).median;
        let webhook_ms: Vec<f64> = legs
            .iter()
            .flat_map(|l| l.measured.webhook_ms.iter().copied())
            .collect();
        let stream_ms: Vec<f64> = legs
            .iter()
            .flat_map(|l| l.stream_ms.iter().copied())
            .collect();
        let mut latencies = vec![];
        for (path, samples) in [
            ("webhook received", webhook_ms),
            ("in-app item on an open stream", stream_ms),
        ] {
            let l = Latency::of(&samples);
            let ms = |v: Option<f64>| v.unwrap_or(f64::NAN);
            t.row(vec![
                build.label.to_string(),
                format!("POST /v1/alerts → {path}"),
                format!(
                    "{:.0}, {:.0} → {:.0}",
                    rate(accepted),
                    rate(max),
                    rate(offered)
                ),
                samples.len().to_string(),
                format!("{:.1}", ms(l.p50_ms)),
                format!("{:.1}", ms(l.p99_ms)),
                format!("{:.1}", ms(l.p999_ms)),
            ]);
            latencies.push((path, l, samples.len()));
        }
        latencies
    };
    let latencies = rows(&this, &legs);
    let before_latencies = before.as_ref().map(|b| rows(b, &before_legs));
    w.tables.push(t);

    w.figure(
        "max_alerts_per_second",
        json!(Spread::of(&rates(&legs, max)).median),
    );
    w.figure(
        "accepted_alerts_per_second",
        json!(Spread::of(&rates(&legs, accepted)).median),
    );
    w.figure(
        "offered_alerts_per_second",
        json!(Spread::of(&rates(&legs, offered)).median),
    );
    for ((path, l, n), figure) in latencies.iter().zip(["webhook_ms", "stream_ms"]) {
        w.figure(
            figure,
            json!({"p50": l.p50_ms, "p99": l.p99_ms, "p999": l.p999_ms, "n": n}),
        );
        w.aims.push(Aim::below(
            &format!("time to notify, POST /v1/alerts → {path}, p99 at half the maximum rate"),
            l.p99_ms.unwrap_or(f64::NAN),
            "ms",
            AIM_P99_MS,
        ));
    }
    if let (Some(bin), Some(before_latencies)) = (&ctx.before_bin, before_latencies) {
        w.figure("before_bin", bin.display().to_string());
        w.figure("max_alerts_per_second_by_leg", json!(rates(&legs, max)));
        w.figure(
            "max_alerts_per_second_before_by_leg",
            json!(rates(&before_legs, max)),
        );
        for ((path, l, n), figure) in before_latencies
            .iter()
            .zip(["webhook_ms_before", "stream_ms_before"])
        {
            w.figure(
                figure,
                json!({"p50": l.p50_ms, "p99": l.p99_ms, "p999": l.p999_ms, "n": n, "path": path}),
            );
        }
        for (name, what, rate) in [
            (
                "notify maximum alert rate: this build ÷ before (same run)",
                "alerts/s end to end, closed loop (the last webhook's arrival)",
                max,
            ),
            (
                "notify accepted alert rate: this build ÷ before (same run)",
                "alerts/s accepted by the API, closed loop",
                accepted,
            ),
        ] {
            w.ratios.push(Ratio::new(
                name,
                &format!("{what}, this build"),
                &format!("{what}, the before build"),
                None,
                &rates(&legs, rate),
                &rates(&before_legs, rate),
            ));
        }
    }
    w.notes.push(format!(
        "Maximum: {} posters in a closed loop for {} s, then the alerts ÷ the time until their last \
         webhook arrived (accepted: the alerts ÷ the time the posters took). Measured: {} s \
         open loop at half that. Time to notify = arrival at the receiver − when the alert's \
         POST was sent (accept, commit, NOTIFY, claim, send). Every webhook arrived once; every \
         stream received every alert once.{}",
        s.posters,
        s.probe.as_secs(),
        s.measure.as_secs(),
        if before.is_some() {
            format!(
                " With the before build: {BEFORE_REPS} legs each, alternating which build goes \
                 first, each build with its own server and worker; rates are medians over the \
                 legs, latencies over their pooled samples."
            )
        } else {
            String::new()
        }
    ));
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

/// This build's legs, and the before build's when there is one, alternating
/// which goes first: one leg without a before build, [`BEFORE_REPS`] each
/// with one.
async fn measure_builds(
    ctx: &Ctx,
    s: &Sizes,
    this: &Build<'_>,
    before: Option<&Build<'_>>,
) -> anyhow::Result<(Vec<Leg>, Vec<Leg>)> {
    let (mut legs, mut before_legs) = (vec![], vec![]);
    let Some(before) = before else {
        legs.push(leg(ctx, s, this, "this").await?);
        return Ok((legs, before_legs));
    };
    for rep in 0..BEFORE_REPS {
        eprintln!("  notify before/after rep {}/{BEFORE_REPS}", rep + 1);
        let tag = format!("before{rep}");
        if rep % 2 == 0 {
            before_legs.push(leg(ctx, s, before, &tag).await?);
            legs.push(leg(ctx, s, this, &format!("this{rep}")).await?);
        } else {
            legs.push(leg(ctx, s, this, &format!("this{rep}")).await?);
            before_legs.push(leg(ctx, s, before, &tag).await?);
        }
    }
    Ok((legs, before_legs))
}

/// One leg on `build`: a sink and endpoint of its own, the recipients'
/// streams on its server, its worker; the maximum, then half of it. Checked:
/// each stream received each measured alert once.
async fn leg(ctx: &Ctx, s: &Sizes, build: &Build<'_>, leg_tag: &str) -> anyhow::Result<Leg> {
    let sink = Sink::start_timing().await?;
    let endpoint =
        create_sink_endpoint(&ctx.http, &build.base_url, &api_key(TENANT), &sink.url).await?;
    let worker = Tidings::worker(Launch {
        bin: build.bin,
        database_url: &ctx.target.url,
        log_dir: &ctx.work_dir,
        name: &format!("notify-worker-{leg_tag}"),
        env: vec![("TIDINGS_WEBHOOK_ALLOW_PRIVATE".into(), "loopback".into())],
    })
    .await?;

    // The recipients' streams.
    let client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let (open_tx, mut open_rx) = mpsc::unbounded_channel::<Result<(), String>>();
    let gate = Arc::new(Semaphore::new(RECIPIENTS));
    let mut streams = Vec::new();
    for i in 0..RECIPIENTS {
        streams.push(tokio::spawn(hold_stream(
            client.clone(),
            format!("{}/v1/feed/stream", build.base_url),
            user_token(TENANT, &recipient(i))?,
            gate.clone(),
            open_tx.clone(),
            stop_rx.clone(),
        )));
    }
    drop(open_tx);
    for _ in 0..RECIPIENTS {
        match open_rx.recv().await {
            Some(Ok(())) => {}
            Some(Err(e)) => anyhow::bail!("a recipient's stream did not open: {e}"),
            None => anyhow::bail!("a recipient's stream task ended before opening"),
        }
    }

    let tag = format!("notify{}-{leg_tag}", std::process::id());
    let result = measure(ctx, s, &build.base_url, &tag, &sink).await;
    let _ = stop_tx.send(true);
    let mut received = Vec::new();
    for stream in streams {
        received.push(stream.await.context("a stream task")?);
    }
    worker.stop().await;
    let _ = ctx
        .http
        .delete(format!(
            "{}/v1/webhook-endpoints/{endpoint}",
            build.base_url
        ))
        .bearer_auth(api_key(TENANT))
        .send()
        .await;
    let measured = result?;

    // Each stream saw each measured alert once.
    let mut stream_ms = Vec::new();
    for (i, r) in received.iter().enumerate() {
        let mut seen: HashMap<u32, usize> = HashMap::new();
        for &(seq, at) in &r.pushes {
            let Some(sent) = measured.sent.get(&seq) else {
                continue;
            };
            *seen.entry(seq).or_default() += 1;
            stream_ms.push(at.saturating_duration_since(*sent).as_secs_f64() * 1e3);
        }
        anyhow::ensure!(
            seen.len() == measured.sent.len() && seen.values().all(|&n| n == 1),
            "{}: stream {i} received {} distinct measured alerts of {} ({} duplicates, {} resets)",
            build.label,
            seen.len(),
            measured.sent.len(),
            seen.values().filter(|&&n| n > 1).count(),
            r.resets
        );
    }
    Ok(Leg {
        measured,
        stream_ms,
    })
}

struct Measured {
    max_rate: f64,
    /// The probe's alerts ÷ the time its posters took: what the API accepts,
    /// beside what the service sustains end to end (`max_rate`).
    accepted_rate: f64,
    offered_rate: f64,
    /// Measured phase: when each alert's POST was sent, by sequence number.
    sent: HashMap<u32, Instant>,
    webhook_ms: Vec<f64>,
}

async fn measure(
    ctx: &Ctx,
    s: &Sizes,
    base_url: &str,
    tag: &str,
    sink: &Sink,
) -> anyhow::Result<Measured> {
    // The maximum, closed loop.
    eprintln!(
        "  notify: the maximum alert rate ({} posters, closed loop)",
        s.posters
    );
    let next = AtomicU32::new(0);
    let failed = AtomicBool::new(false);
    let start = Instant::now();
    let poster = || async {
        while start.elapsed() < s.probe {
            let seq = next.fetch_add(1, Ordering::Relaxed);
            if !post_alert(ctx, base_url, tag, seq).await {
                failed.store(true, Ordering::Relaxed);
                return;
            }
        }
    };
    futures::future::join_all((0..s.posters).map(|_| poster())).await;
    let posting = start.elapsed();
    anyhow::ensure!(!failed.load(Ordering::Relaxed), "an alert post failed");
    let probed = next.load(Ordering::Relaxed);
    let accepted_rate = probed as f64 / posting.as_secs_f64();
    let arrivals = wait_arrivals(sink, 0..probed, probed as usize * RECIPIENTS).await?;
    let last = arrivals.iter().map(|a| a.1).max().context("no arrivals")?;
    let max_rate = probed as f64 / (last - start).as_secs_f64();

    // Half of it, open loop.
    let per_sec = (max_rate / 2.0).max(1.0);
    let n = ((per_sec * s.measure.as_secs_f64()) as u32).max(1);
    eprintln!("  notify: {n} alerts at {per_sec:.0}/s, open loop");
    let interval = Duration::from_secs_f64(1.0 / per_sec);
    let start = Instant::now();
    let one = |k: u32| async move {
        tokio::time::sleep_until((start + interval * k).into()).await;
        let seq = MEASURED_FROM + k;
        let sent = Instant::now();
        post_alert(ctx, base_url, tag, seq)
            .await
            .then_some((seq, sent))
    };
    let posted: Vec<Option<(u32, Instant)>> = futures::future::join_all((0..n).map(one)).await;
    let offered_rate = n as f64 / start.elapsed().as_secs_f64();
    let sent: HashMap<u32, Instant> = posted.iter().flatten().copied().collect();
    anyhow::ensure!(
        sent.len() == n as usize,
        "{} of {n} alert posts failed",
        n as usize - sent.len()
    );
    let range = MEASURED_FROM..MEASURED_FROM + n;
    let arrivals = wait_arrivals(sink, range.clone(), n as usize * RECIPIENTS).await?;
    // A moment for a duplicate to show itself, then count each alert's.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut per_alert: HashMap<u32, usize> = HashMap::new();
    for (seq, _) in sink.arrivals.lock().unwrap().iter() {
        if range.contains(seq) {
            *per_alert.entry(*seq).or_default() += 1;
        }
    }
    anyhow::ensure!(
        per_alert.values().all(|&c| c == RECIPIENTS),
        "{} alerts did not reach the receiver exactly {RECIPIENTS} times",
        per_alert.values().filter(|&&c| c != RECIPIENTS).count()
    );
    let webhook_ms = arrivals
        .iter()
        .map(|(seq, at)| at.saturating_duration_since(sent[seq]).as_secs_f64() * 1e3)
        .collect();
    Ok(Measured {
        max_rate,
        accepted_rate,
        offered_rate,
        sent,
        webhook_ms,
    })
}
