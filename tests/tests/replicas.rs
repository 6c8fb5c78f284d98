//! Reads from hot standbys (ARCHITECTURE.md, "Reads from hot
//! standbys"): a standby's pages never skip what a later page (from the
//! primary or another standby) shows; a reader sees their own marks; a standby
//! that stops, lags or is promoted leaves rotation with no failed request and
//! comes back when healthy. On the real topology of `scripts/cluster`.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use serde_json::{json, Value};
use sqlx::{postgres::PgPoolOptions, PgPool};
use tidings_core::Position;
use tidings_tests::{
    alert,
    client::{position, UserApi},
    create_endpoint, eventually,
    sql::{self, until_served_on},
    sse::StreamCredential,
    worker_env, AppOptions, Cluster, Receiver, TestApp, TestDb, TidingsProcess,
};

const TOKEN_HEADER: &str = "Tidings-Consistency-Token";

/// One poll (a first page without a cursor), three items at most.
async fn poll(reader: &UserApi<'_>, cursor: Option<&str>) -> Value {
    let query = match cursor {
        Some(c) => format!("?limit=3&after={c}"),
        None => "?limit=3".to_string(),
    };
    reader.feed(&query).expect(200).await
}

/// A server on `db` reading from both standbys of `cluster`, checking them often.
async fn serve_with_standbys(cluster: &Cluster, db: &TestDb, extra: &[(&str, &str)]) -> TestApp {
    serve_on_with_standbys(&db.url, cluster, db, extra).await
}

/// The same with DATABASE_URL `url` (e.g. the cluster's pooler).
async fn serve_on_with_standbys(
    url: &str,
    cluster: &Cluster,
    db: &TestDb,
    extra: &[(&str, &str)],
) -> TestApp {
    let mut env = vec![
        (
            "TIDINGS_DATABASE_REPLICA_URLS".to_string(),
            cluster.replica_urls(&db.name),
        ),
        ("TIDINGS_REPLICA_CHECK_MS".to_string(), "50".to_string()),
    ];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let app = TestApp::spawn_on(url, AppOptions::env(env))
        .await
        .expect("serve");
    until_standbys(&app, &["up", "up"]).await;
    app
}

async fn readiness(app: &TestApp) -> Value {
    app.public().ready().expect(200).await
}

/// Waits (up to 30 s) until `/readyz` shows the standbys in these states.
async fn until_standbys(app: &TestApp, states: &[&str]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ready = readiness(app).await;
        let now: Vec<&str> = ready["standbys"]
            .as_array()
            .map(|s| {
                s.iter()
                    .map(|s| s["state"].as_str().unwrap_or(""))
                    .collect()
            })
            .unwrap_or_default();
        if now == states {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "standbys never reached {states:?}: {ready}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads served by a standby so far.
async fn standby_reads(app: &TestApp) -> u64 {
    readiness(app).await["reads"]["standby"]
        .as_u64()
        .expect("reads.standby")
}

/// What a process needs to reach `db` through the cluster's PgBouncer in
/// transaction pooling mode: DATABASE_URL, and the direct URL for sessions.
fn behind_pooler(cluster: &Cluster, db: &TestDb) -> (String, [(&'static str, String); 2]) {
    (
        cluster.pooler(&db.name),
        [
            ("TIDINGS_DATABASE_POOLER", "transaction".to_string()),
            ("TIDINGS_DATABASE_LISTEN_URL", db.url.clone()),
        ],
    )
}

async fn pool_of(db: &TestDb) -> PgPool {
    PgPoolOptions::new()
        .max_connections(2)
        .connect(&db.url)
        .await
        .expect("pool")
}

/// ARCHITECTURE.md, invariant 2, on a hot standby. A (held open on the primary)
/// took its xid before B, which commits first; the standby has replayed B's
/// commit, but its own snapshot still counts A as running, so it holds B back
/// exactly as the primary does. Polls that alternate between a server reading
/// from the standbys and one reading from the primary see every item once, in
/// position order.
#[tokio::test]
async fn a_standby_holds_back_what_the_primary_holds_back_and_alternating_polls_skip_nothing() {
    let cluster = Cluster::shared().await;
    let db = cluster.database().await;
    let on_standbys = serve_with_standbys(&cluster, &db, &[]).await;
    let on_primary = TestApp::spawn_on(&db.url, AppOptions::default())
        .await
        .expect("serve");
    let pool = pool_of(&db).await;
    let tenant = on_primary.create_tenant().await;
    let api = on_primary.tenant(&tenant);
    api.put_member("team", "reader").expect(201).await;
    let token = on_primary.user_token(&tenant, "reader").await;
    let (standby_reader, primary_reader) = (on_standbys.user(&token), on_primary.user(&token));

    let readers = [&standby_reader, &primary_reader];
    let mut turn = 0usize;
    let mut expected = Vec::new();
    let mut seen: Vec<Position> = Vec::new();
    let mut cursor: Option<String> = None;

    let before = standby_reads(&on_standbys).await;
    for round in 0..4 {
        // A: holds its xid open on the primary; B: committed through the API.
        let (a_tx, a_id, a_txid) =
            sql::event_in_open_transaction(&pool, &tenant, "team", &format!("a{round}")).await;
        let b = api
            .create_event(&json!({"team_id": "team", "type": format!("b{round}"), "payload": {}}))
            .expect(201)
            .await;
        let b_pos = position(&b["cursor"]);
        cluster.until_replayed().await;
        // While A is open neither server serves B (nor A).
        for _ in 0..2 {
            let page = poll(readers[turn % 2], cursor.as_deref()).await;
            turn += 1;
            // Oldest first, as the client visits them.
            for item in page["items"].as_array().expect("items").iter().rev() {
                let p = position(&item["cursor"]);
                assert!(
                    p < Position::new(a_txid, a_id),
                    "served {p:?} past open A: {page}"
                );
                seen.push(p);
            }
            if let Some(head) = page["head"].as_str() {
                cursor = Some(head.to_string());
            }
        }
        a_tx.commit().await.expect("commit A");
        until_served_on(&cluster.primary_admin(), b_pos.tx).await;
        cluster.until_replayed().await;
        expected.push(a_id);
        expected.push(b["id"].as_i64().expect("id"));
    }
    // Drain, alternating.
    let mut empty_polls = 0;
    while empty_polls < 2 {
        let page = poll(readers[turn % 2], cursor.as_deref()).await;
        turn += 1;
        let items = page["items"].as_array().expect("items");
        if items.is_empty() {
            empty_polls += 1;
        }
        // Oldest first, as the client visits them.
        for item in items.iter().rev() {
            seen.push(position(&item["cursor"]));
        }
        cursor = page["head"].as_str().map(str::to_string).or(cursor);
    }
    let mut seen_ids: Vec<i64> = seen.iter().map(|p| p.id).collect();
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "positions only grow, none twice: {seen:?}"
    );
    seen_ids.sort_unstable();
    expected.sort_unstable();
    assert_eq!(seen_ids, expected, "every item, once");
    assert!(
        standby_reads(&on_standbys).await > before,
        "the standby server's reads were served by standbys"
    );
}

/// ARCHITECTURE.md, invariant 11, on hot standbys: another tenant's open
/// feed write and a foreign session holding an xid (`BEGIN; SELECT
/// pg_current_xact_id()` in another database of the cluster) hold back no
/// one else's feed read from a standby. B's event is on B's reader's next
/// page read with the post's consistency token, and eventually without it —
/// from the standbys, not by falling back to the primary. `/readyz` shows each
/// standby's replay lag and the age of the horizon it serves with.
#[tokio::test]
async fn another_tenants_open_write_or_a_foreign_xid_holds_back_no_feed_on_a_standby() {
    let cluster = Cluster::shared().await;
    let db = cluster.database().await;
    let app = serve_with_standbys(&cluster, &db, &[]).await;
    let pool = pool_of(&db).await;
    let (tenant_a, tenant_b) = (app.create_tenant().await, app.create_tenant().await);
    let api_b = app.tenant(&tenant_b);
    api_b.put_member("team", "reader").expect(201).await;
    let token = app.user_token(&tenant_b, "reader").await;
    let reader = app.user(&token);

    // A's write, held open, and a foreign session's xid, both older than B's
    // event; the standbys have replayed them (so count them as running).
    let (a_open, _, _) = sql::event_in_open_transaction(&pool, &tenant_a, "team", "held").await;
    let (foreign, _) = sql::xid_held_on(&cluster.primary_admin()).await;
    cluster.until_replayed().await;
    let before = standby_reads(&app).await;

    let posted = api_b
        .create_event(&json!({"team_id": "team", "type": "b", "payload": {}}))
        .reply(201)
        .await;
    let b_id = posted.json()["id"].clone();
    let consistency = posted
        .header(TOKEN_HEADER)
        .expect("a post answers with a consistency token")
        .to_string();
    let page = reader
        .feed("")
        .header(TOKEN_HEADER, consistency.clone())
        .expect(200)
        .await;
    assert_eq!(
        page["items"][0]["id"], b_id,
        "the token's read holds B's event: {page}"
    );
    let counts = reader
        .counts()
        .header(TOKEN_HEADER, consistency)
        .expect(200)
        .await;
    assert_eq!(counts["unread"], 1, "the token's counts hold it: {counts}");

    let on_standbys_before = standby_reads(&app).await;
    let shown = eventually(Duration::from_secs(10), || async {
        let page = reader.feed("").expect(200).await;
        let counts = reader.counts().expect(200).await;
        page["items"][0]["id"] == b_id && counts["unread"] == 1
    })
    .await;
    assert!(
        shown,
        "B's event reached B's reader while A and a foreign xid were open"
    );
    let ready = readiness(&app).await;
    assert!(
        standby_reads(&app).await > on_standbys_before.max(before),
        "read from the standbys: {ready}"
    );
    for standby in ready["standbys"].as_array().expect("standbys") {
        assert_eq!(standby["state"], "up", "{ready}");
        assert!(standby["lag_ms"].is_u64(), "replay lag reported: {ready}");
        assert!(
            standby["horizon_age_ms"].is_u64(),
            "horizon age reported: {ready}"
        );
    }
    drop(foreign);
    a_open.rollback().await.expect("rollback A");
}

/// A standby whose newest horizon it can serve with is older than
/// `TIDINGS_REPLICA_MAX_HORIZON_AGE_MS` leaves rotation, however small its
/// replay lag: `/readyz` says `lagging` with both ages, and reads go to the
/// primary (here a bound of 1 ms). A standby can meet that bound for a moment
/// right after a check and be picked; the read then finds its horizon too old
/// and still goes to the primary, counted apart.
#[tokio::test]
async fn a_standby_whose_horizon_is_too_old_leaves_rotation_and_reads_go_to_the_primary() {
    let cluster = Cluster::shared().await;
    let db = cluster.database().await;
    let env = vec![
        (
            "TIDINGS_DATABASE_REPLICA_URLS".to_string(),
            cluster.replica_urls(&db.name),
        ),
        ("TIDINGS_REPLICA_CHECK_MS".to_string(), "50".to_string()),
        (
            "TIDINGS_REPLICA_MAX_LAG_MS".to_string(),
            "60000".to_string(),
        ),
        (
            "TIDINGS_REPLICA_MAX_HORIZON_AGE_MS".to_string(),
            "1".to_string(),
        ),
    ];
    let app = TestApp::spawn_on(&db.url, AppOptions::env(env))
        .await
        .expect("serve");
    until_standbys(&app, &["lagging", "lagging"]).await;
    let ready = readiness(&app).await;
    for standby in ready["standbys"].as_array().expect("standbys") {
        let lag = standby["lag_ms"].as_u64().expect("lag_ms");
        assert!(lag < 60_000, "not out for its replay lag: {ready}");
        if let Some(age) = standby["horizon_age_ms"].as_u64() {
            assert!(age >= 1, "out for its horizon's age: {ready}");
        }
    }

    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_member("team", "reader").expect(201).await;
    let token = app.user_token(&tenant, "reader").await;
    let posted = api
        .create_event(&json!({"team_id": "team", "type": "e", "payload": {}}))
        .expect(201)
        .await;
    let page = app.user(&token).feed("").expect(200).await;
    assert_eq!(page["items"][0]["id"], posted["id"], "{page}");
    let ready = readiness(&app).await;
    assert_eq!(ready["reads"]["standby"], 0, "{ready}");
    let counter = |name: &str| ready["reads"][name].as_u64().expect("counter");
    assert!(
        counter("primary_no_standby") + counter("primary_standby_horizon_old") > 0,
        "{ready}"
    );
}

/// Read-your-writes: after a mark, the reader's next reads reflect it — with
/// the token from the answer, and without it on the same instance — even when
/// every standby is paused behind the mark. Then the failures: a standby that
/// stops, lags beyond the bound or is promoted leaves rotation with no failed
/// request, and returns once `scripts/cluster up` has repaired it.
#[tokio::test]
async fn own_marks_are_read_back_and_a_failing_standby_costs_no_request() {
    let cluster = Cluster::for_failures().await;
    let db = cluster.database().await;
    let app = serve_with_standbys(&cluster, &db, &[("TIDINGS_REPLICA_MAX_LAG_MS", "1000")]).await;
    let tenant = app.create_tenant().await;
    let api = app.tenant(&tenant);
    api.put_member("team", "reader").expect(201).await;
    api.put_member("team", "other").expect(201).await;
    let token = app.user_token(&tenant, "reader").await;
    let other = app.user_token(&tenant, "other").await;
    for n in 0..3 {
        api.create_event(&json!({"team_id": "team", "type": format!("e{n}"), "payload": {}}))
            .expect(201)
            .await;
    }
    sql::until_all_served_on(&cluster.primary_admin()).await;
    cluster.until_replayed().await;
    assert_eq!(app.user(&token).counts().expect(200).await["unread"], 3);

    // Readers that must never fail, all along.
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let base = app.base_url().to_string();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, reads, base, token) =
                (stop.clone(), reads.clone(), base.clone(), token.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    for path in ["/v1/feed?limit=5", "/v1/feed/counts"] {
                        match http
                            .get(format!("{base}{path}"))
                            .bearer_auth(&token)
                            .send()
                            .await
                        {
                            Ok(r) if r.status() == 200 => {}
                            Ok(r) => failures.push(format!("{path}: {}", r.status())),
                            Err(e) => failures.push(format!("{path}: {e}")),
                        }
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                failures
            })
        })
        .collect();

    // Read-your-writes with both standbys paused behind the mark.
    for i in 0..2 {
        sql::pause_replay(&cluster.standby(i, "postgres")).await;
    }
    let marked = app.user(&token).mark_read(&json!({})).reply(200).await;
    let consistency = marked
        .header(TOKEN_HEADER)
        .expect("a mark answers with a consistency token")
        .to_string();
    assert_eq!(marked.json()["unread_count"], 0);
    let with_token = app
        .user(&token)
        .counts()
        .header(TOKEN_HEADER, consistency.clone())
        .expect(200)
        .await;
    assert_eq!(
        with_token["unread"], 0,
        "the token's read reflects the mark"
    );
    let remembered = app.user(&token).counts().expect(200).await;
    assert_eq!(
        remembered["unread"], 0,
        "the instance remembers the user's mark"
    );
    let page = app.user(&token).feed("").expect(200).await;
    assert!(
        page["items"]
            .as_array()
            .expect("items")
            .iter()
            .all(|i| i["read"] == true),
        "{page}"
    );
    // A post's token: another member's read sent with it holds the event,
    // although no standby has replayed it.
    let posted = api
        .create_event(&json!({"team_id": "team", "type": "posted", "payload": {}}))
        .reply(201)
        .await;
    let post_token = posted
        .header(TOKEN_HEADER)
        .expect("a post answers with a consistency token")
        .to_string();
    let page = app
        .user(&other)
        .feed("")
        .header(TOKEN_HEADER, post_token)
        .expect(200)
        .await;
    assert_eq!(
        page["items"][0]["id"],
        posted.json()["id"],
        "the token's read holds the post"
    );
    // Membership changes answer with one too.
    let joined = api.put_member("team2", "other").reply(201).await;
    assert!(joined.header(TOKEN_HEADER).is_some(), "a join's token");
    let left = app
        .tenant(&tenant)
        .delete_member("team2", "other")
        .reply(204)
        .await;
    assert!(left.header(TOKEN_HEADER).is_some(), "a leave's token");

    // Paused standbys fall behind the bound and leave rotation.
    for n in 0..3 {
        api.create_event(&json!({"team_id": "team", "type": format!("lag{n}"), "payload": {}}))
            .expect(201)
            .await;
    }
    until_standbys(&app, &["lagging", "lagging"]).await;
    for i in 0..2 {
        sql::resume_replay(&cluster.standby(i, "postgres")).await;
    }
    until_standbys(&app, &["up", "up"]).await;
    let ready = readiness(&app).await;
    let fell_back = ready["reads"]["primary_standby_behind"]
        .as_u64()
        .expect("counter")
        + ready["reads"]["primary_no_standby"]
            .as_u64()
            .expect("counter");
    assert!(
        fell_back > 0,
        "reads behind the token went to the primary: {ready}"
    );

    // A bad token is refused, not ignored.
    let problem = app
        .user(&token)
        .counts()
        .header(TOKEN_HEADER, "yesterday")
        .problem(400)
        .await;
    assert_eq!(problem["code"], "invalid_consistency_token");

    // A standby that stops.
    cluster
        .run(&["stop-standby", "1"])
        .await
        .expect("stop standby 1");
    until_standbys(&app, &["down", "up"]).await;
    cluster
        .run(&["up", "--instances", "0", "--workers", "0"])
        .await
        .expect("restart");
    until_standbys(&app, &["up", "up"]).await;

    // A standby that is promoted no longer follows the primary.
    sql::promote(&cluster.standby(1, "postgres")).await;
    until_standbys(&app, &["up", "promoted"]).await;
    cluster
        .run(&["up", "--instances", "0", "--workers", "0"])
        .await
        .expect("rebuild");
    until_standbys(&app, &["up", "up"]).await;

    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for reader in readers {
        failures.extend(reader.await.expect("reader"));
    }
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert_eq!(failures, Vec::<String>::new(), "no read failed");
}

/// The production shape of "Reads from hot standbys" and "PgBouncer"
/// (ARCHITECTURE.md): three `tidings serve` instances reading
/// from both standbys and two `tidings worker` processes, on one primary
/// behind PgBouncer in transaction pooling mode. Events are posted concurrently through all three instances while a poller
/// reads pages `after` its cursor round robin across them, and a stream on one
/// instance receives the same items; alerts posted through them are delivered
/// by the workers to a real receiver; marks on one instance are read back, with
/// the token, on the others. Nothing is skipped, duplicated or lost anywhere.
#[tokio::test]
async fn three_instances_and_two_workers_on_standbys_skip_duplicate_and_lose_nothing() {
    const ROUNDS: usize = 12;
    const PER_POST: usize = 4;
    const RECIPIENTS: usize = 3;
    // Per round: one batch of PER_POST events through each instance.
    const TOTAL: usize = ROUNDS * 3 * PER_POST;

    let cluster = Cluster::shared().await;
    let db = cluster.database().await;
    pooler_splits_statements_outside_transactions(&cluster, &db).await;
    let receiver = Receiver::webhooks(&[]).await;
    // Every process reaches the primary through PgBouncer in transaction
    // pooling mode (LISTEN and migrations directly); the instances leave the
    // outbox to the workers.
    let (pooled_url, pooled_env) = behind_pooler(&cluster, &db);
    let mut serve_env: Vec<(&str, &str)> = vec![("TIDINGS_OUTBOX_WORKERS", "0")];
    serve_env.extend(pooled_env.iter().map(|(k, v)| (*k, v.as_str())));
    let instances = [
        serve_on_with_standbys(&pooled_url, &cluster, &db, &serve_env).await,
        serve_on_with_standbys(&pooled_url, &cluster, &db, &serve_env).await,
        serve_on_with_standbys(&pooled_url, &cluster, &db, &serve_env).await,
    ];
    let mut workers = Vec::new();
    for _ in 0..2 {
        let mut env = worker_env(&[]);
        env.push((
            "TIDINGS_DATABASE_REPLICA_URLS".to_string(),
            cluster.replica_urls(&db.name),
        ));
        env.extend(pooled_env.iter().map(|(k, v)| (k.to_string(), v.clone())));
        workers.push(
            TidingsProcess::worker(&pooled_url, &env)
                .await
                .expect("tidings worker"),
        );
    }
    let tenant = instances[0].create_tenant().await;
    let apis: Vec<_> = instances.iter().map(|app| app.tenant(&tenant)).collect();
    apis[1].put_member("team", "reader").expect(201).await;
    let endpoint = create_endpoint(&apis[2], &receiver.url("/hook"), None).await;
    receiver.trust(&endpoint.secret).await;
    let token = instances[0].user_token(&tenant, "reader").await;
    let readers: Vec<_> = instances.iter().map(|app| app.user(&token)).collect();

    // The stream, on the third instance, from the origin (opened live it would
    // rightly miss what committed before it registered); resumed from its last
    // id if it is reset as a slow consumer. Read while the rounds run.
    let read_stream = async {
        let mut received: Vec<Value> = Vec::new();
        let mut marks: Vec<Value> = Vec::new();
        let mut last_id = Position::ORIGIN.to_cursor();
        while received.len() < TOTAL {
            let mut stream = instances[2]
                .open_stream(StreamCredential::Token(&token), "", Some(&last_id))
                .await;
            assert_eq!(stream.status, 200);
            loop {
                let Some(event) = stream.next_within(Duration::from_secs(60)).await else {
                    panic!("stream stalled after {} items", received.len());
                };
                match event.event.as_str() {
                    "item" => {
                        last_id = event.id.clone().expect("an item's id");
                        received.push(event.json());
                        if received.len() == TOTAL {
                            break;
                        }
                    }
                    "reset" => {
                        assert_eq!(event.json()["reason"], "slow_consumer", "{event:?}");
                        break;
                    }
                    "marks" => marks.push(event.json()),
                    _ => {}
                }
            }
        }
        (received, marks)
    };

    let mut polled: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = Some(Position::ORIGIN.to_cursor());
    let mut turn = 0usize;
    let mut keys: Vec<String> = Vec::new();
    let rounds = async {
        for round in 0..ROUNDS {
            let posts = (0..3).map(|i| {
                let events: Vec<Value> = (0..PER_POST)
                    .map(|k| {
                        json!({"team_id": "team", "type": "tick",
                           "payload": {"n": (round * 3 + i) * PER_POST + k}})
                    })
                    .collect();
                apis[i]
                    .create_events(&json!({ "events": events }))
                    .expect(201)
            });
            let recipients: Vec<String> = (0..RECIPIENTS).map(|r| format!("user-{r}")).collect();
            let post_alert = apis[round % 3].create_alert(
                &alert()
                    .event_type("invoice.paid")
                    .entity(&format!("inv_{round}"))
                    .recipients(&recipients)
                    .channels(&["webhook"])
                    .payload(json!({"round": round}))
                    .build(),
            );
            let page = poll(&readers[turn % 3], cursor.as_deref());
            turn += 1;
            let (_, accepted, page) = tokio::join!(
                futures::future::join_all(posts),
                post_alert.expect(202),
                page
            );
            for d in accepted["deliveries"].as_array().expect("deliveries") {
                assert_eq!(d["status"], "created", "{d}");
                keys.push(d["key"].as_str().expect("key").to_string());
            }
            take(&page, &mut polled, &mut cursor);

            // Every fourth round: mark on one instance, read counts on the others
            // with the mark's token.
            if round % 4 == 3 {
                sql::until_all_served_on(&cluster.primary_admin()).await;
                let at = round % 3;
                let body = match &cursor {
                    Some(c) => json!({ "up_to": c }),
                    None => json!({}),
                };
                let marked = readers[at].mark_read(&body).reply(200).await;
                let mark_token = marked
                    .header(TOKEN_HEADER)
                    .expect("a mark's token")
                    .to_string();
                let unread = marked.json()["unread_count"]
                    .as_u64()
                    .expect("unread_count");
                for other in (0..3).filter(|&o| o != at) {
                    let counts = readers[other]
                        .counts()
                        .header(TOKEN_HEADER, mark_token.clone())
                        .expect(200)
                        .await;
                    assert!(
                        counts["unread"].as_u64().expect("unread") <= unread,
                        "instance {other}'s badge went back after the mark on {at} \
                     ({unread} unread): {counts}"
                    );
                }
            }
        }
    };
    let ((), (streamed, marks)) = tokio::join!(rounds, read_stream);

    // The stream's marks carry the change's token, which any instance takes.
    assert!(!marks.is_empty(), "the stream sent the reader's marks");
    for m in &marks {
        let token = m["consistency_token"]
            .as_str()
            .unwrap_or_else(|| panic!("a marks event with standbys has a token: {m}"));
        readers[0]
            .counts()
            .header(TOKEN_HEADER, token.to_string())
            .expect(200)
            .await;
    }

    // Drain: once everything is served and replayed, the poller gets the rest.
    sql::until_all_served_on(&cluster.primary_admin()).await;
    cluster.until_replayed().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while polled.len() < TOTAL {
        assert!(
            std::time::Instant::now() < deadline,
            "the poller got {} of {TOTAL}",
            polled.len()
        );
        let page = poll(&readers[turn % 3], cursor.as_deref()).await;
        turn += 1;
        take(&page, &mut polled, &mut cursor);
    }
    for _ in 0..3 {
        let page = poll(&readers[turn % 3], cursor.as_deref()).await;
        turn += 1;
        assert_eq!(page["items"], json!([]), "nothing past the last item");
    }

    let positions = |items: &[Value]| -> Vec<Position> {
        items.iter().map(|i| position(&i["cursor"])).collect()
    };
    let numbers = |items: &[Value]| -> Vec<usize> {
        let mut n: Vec<usize> = items
            .iter()
            .map(|i| i["payload"]["n"].as_u64().expect("n") as usize)
            .collect();
        n.sort_unstable();
        n
    };
    let polled_at = positions(&polled);
    assert!(
        polled_at.windows(2).all(|w| w[0] < w[1]),
        "the poller's positions only grow, none twice"
    );
    assert_eq!(
        numbers(&polled),
        (0..TOTAL).collect::<Vec<_>>(),
        "the poller: every event once"
    );

    assert_eq!(
        positions(&streamed),
        polled_at,
        "the stream: every event once, in the poller's (position) order"
    );

    // Webhooks: each notification key delivered exactly once, verified.
    let arrived = eventually(Duration::from_secs(60), || async {
        let received = receiver.received();
        keys.iter()
            .all(|k| received.iter().any(|r| r["webhook_id"] == *k))
    })
    .await;
    assert!(arrived, "not every webhook arrived: {}", workers[0].log());
    let pool = pool_of(&db).await;
    assert!(
        eventually(Duration::from_secs(30), || async {
            let counts = sql::status_counts(&pool, &tenant).await;
            counts.get("sent").copied() == Some(keys.len() as i64) && counts.len() == 1
        })
        .await,
        "every delivery sent: {:?}",
        sql::status_counts(&pool, &tenant).await
    );
    let received = receiver.received();
    assert_eq!(keys.len(), ROUNDS * RECIPIENTS);
    for key in &keys {
        let records: Vec<&Value> = received
            .iter()
            .filter(|r| r["webhook_id"] == *key)
            .collect();
        assert_eq!(
            records.len(),
            1,
            "{key} delivered exactly once: {records:#?}"
        );
        assert_eq!(records[0]["verified"], true, "{:?}", records[0]);
    }
    assert_eq!(received.len(), keys.len(), "no webhook beyond the keys");

    for (i, app) in instances.iter().enumerate() {
        assert!(
            standby_reads(app).await > 0,
            "instance {i} read from the standbys"
        );
    }
}

/// The cluster's PgBouncer really pools by transaction (what the test above
/// relies on): a statement with parameters outside a transaction, as sqlx
/// sends it (Parse/Describe/Sync, then Bind/Execute/Sync), loses its prepared
/// statement between the two (the reset query drops it when the server
/// connection goes back), while the same statement inside a transaction runs.
async fn pooler_splits_statements_outside_transactions(cluster: &Cluster, db: &TestDb) {
    use sqlx::{Connection, PgConnection};
    let mut conn = PgConnection::connect(&cluster.pooler(&db.name))
        .await
        .expect("a session through the pooler");
    let outside: Result<i32, _> = sqlx::query_scalar("SELECT $1::int")
        .bind(7)
        .fetch_one(&mut conn)
        .await;
    let err = outside.expect_err("a statement split across server connections fails");
    assert!(
        err.to_string().contains("prepared statement"),
        "the split lost the prepared statement: {err}"
    );
    let mut conn = PgConnection::connect(&cluster.pooler(&db.name))
        .await
        .expect("a session through the pooler");
    let mut tx = conn.begin().await.expect("BEGIN");
    let inside: i32 = sqlx::query_scalar("SELECT $1::int")
        .bind(7)
        .fetch_one(&mut *tx)
        .await
        .expect("inside a transaction the statement runs");
    assert_eq!(inside, 7);
    tx.commit().await.expect("COMMIT");
}

/// Appends a page's items (newest first in the page) oldest first, and moves
/// the cursor to its head.
fn take(page: &Value, polled: &mut Vec<Value>, cursor: &mut Option<String>) {
    for item in page["items"].as_array().expect("items").iter().rev() {
        polled.push(item.clone());
    }
    if let Some(head) = page["head"].as_str() {
        *cursor = Some(head.to_string());
    }
}
