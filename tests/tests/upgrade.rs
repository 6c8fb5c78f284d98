//! A rolling upgrade across two instances (ARCHITECTURE.md, "Rolling
//! upgrades"): instance A runs the previous schema under load, B starts with
//! the next migration set and applies it while A serves, traffic moves to B,
//! A stops. No request fails and no delivery is lost.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use serde_json::json;
use tidings_tests::{
    alert, eventually,
    sql::{self, Rows},
    worker_env, AppOptions, TestApp, WebhookFixture,
};
use tokio::sync::watch;

#[derive(Default)]
struct Tally {
    accepted: AtomicU64,
    failed: AtomicU64,
}

/// Posts webhook alerts one after another to whichever instance `target`
/// names (the load balancer), until `stop`.
async fn load(
    target: watch::Receiver<String>,
    api_key: String,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) -> Vec<String> {
    let http = reqwest::Client::new();
    let mut failures = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let base = target.borrow().clone();
        let body = alert()
            .event_type("deploy.finished")
            .entity(&format!("deploy-{n}"))
            .recipients(&["ops"])
            .channels(&["webhook"])
            .payload(json!({"n": n}))
            .build();
        let answer = http
            .post(format!("{base}/v1/alerts"))
            .bearer_auth(&api_key)
            .json(&body)
            .send()
            .await;
        match answer {
            Ok(reply) if reply.status().as_u16() == 202 => {
                tally.accepted.fetch_add(1, Ordering::SeqCst);
            }
            Ok(reply) => {
                tally.failed.fetch_add(1, Ordering::SeqCst);
                failures.push(format!(
                    "{base}: {} {}",
                    reply.status(),
                    reply.text().await.unwrap_or_default()
                ));
            }
            Err(err) => {
                tally.failed.fetch_add(1, Ordering::SeqCst);
                failures.push(format!("{base}: {err}"));
            }
        }
    }
    failures
}

#[tokio::test]
async fn a_rolling_upgrade_fails_no_request_and_loses_no_delivery() {
    let env = |extra: &[(&str, &str)]| AppOptions {
        env: worker_env(extra),
        ..Default::default()
    };
    // A: the previous version, as far as the schema goes.
    let f = WebhookFixture::start(None, env(&[("TIDINGS_TEST_WITHOUT_LAST_MIGRATION", "1")])).await;
    let before = sql::applied_migrations(&f.pool).await;
    f.endpoint("/hooks").await;

    let (route, target) = watch::channel(f.app.base_url().to_string());
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(load(
        target,
        f.tenant.api_key.clone(),
        tally.clone(),
        stop.clone(),
    ));
    let until_accepted = |n: u64| {
        let tally = tally.clone();
        async move {
            eventually(Duration::from_secs(30), || async {
                tally.accepted.load(Ordering::SeqCst) >= n
            })
            .await
        }
    };
    assert!(until_accepted(20).await, "A takes load");

    // B: the next version. It applies the new migration while A serves.
    let b = TestApp::spawn_on(&f.database_url, env(&[]))
        .await
        .expect("B starts");
    assert_eq!(sql::applied_migrations(&f.pool).await, before + 1);
    b.public().ready().expect(200).await;
    f.app.public().ready().expect(200).await;
    let on_a = tally.accepted.load(Ordering::SeqCst);
    assert!(
        until_accepted(on_a + 20).await,
        "A keeps serving on the expanded schema"
    );

    // The load balancer moves to B; A drains and stops.
    route.send(b.base_url().to_string()).unwrap();
    let mut a = f.app;
    let status = a.process.terminate().await.expect("A stops");
    assert!(
        status.success(),
        "A exits cleanly: {status:?}\n{}",
        a.process.log()
    );
    let on_b = tally.accepted.load(Ordering::SeqCst);
    assert!(until_accepted(on_b + 20).await, "B takes the load");
    stop.store(true, Ordering::SeqCst);
    let failures = load.await.unwrap();
    assert_eq!(failures, Vec::<String>::new(), "no request fails");

    // Every accepted alert's delivery arrives, once at least: what A claimed
    // and did not record, B sends after the lease.
    let accepted = tally.accepted.load(Ordering::SeqCst);
    let delivered = eventually(Duration::from_secs(60), || async {
        sql::status_counts(&f.pool, &f.tenant)
            .await
            .get("sent")
            .copied()
            .unwrap_or(0)
            == accepted as i64
    })
    .await;
    assert!(
        delivered,
        "accepted {accepted}, deliveries by status {:?}\nB's log:\n{}",
        sql::status_counts(&f.pool, &f.tenant).await,
        b.process.log()
    );
    assert_eq!(sql::count(&f.pool, Rows::Deliveries).await, accepted as i64);
    let received: std::collections::HashSet<String> = f
        .receiver
        .received()
        .iter()
        .filter_map(|hook| hook["webhook_id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        received.len() as u64,
        accepted,
        "every delivery reached the receiver"
    );
}
