//! The activity feed: events stored once, feeds computed at read time, exact
//! paging and polling, monotonic watermarks, sealed tenants, memberships, and
//! cache invalidation across instances (ARCHITECTURE.md, invariants 1-3, 9,
//! 10 and "Feed rules").

use std::time::Duration;

use rand::seq::SliceRandom;
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;
use tidings_core::Position;
use tidings_tests::{
    alert,
    client::{item_ids, position, TenantApi},
    eventually, member_of, post_event, post_served_event,
    sql::{self, until_all_served, until_served, Rows},
    AppOptions, TenantFixture, TestApp,
};

/// User "u" in "team" and in "quiet" (no events), with the memberships the
/// store reads for them: the reader of the tests that call the store's feed
/// statements directly to compare their counting paths.
async fn reader_of_team_and_quiet() -> (
    TenantFixture,
    String,
    Vec<tidings_server::store::teams::Membership>,
) {
    let (f, token) = member_of("team", "u").await;
    f.api().put_member("quiet", "u").expect(201).await;
    let teams =
        tidings_server::store::teams::list_memberships_of_user(&f.pool, f.tenant.uuid(), "u")
            .await
            .expect("teams");
    assert_eq!(teams.len(), 2);
    (f, token, teams)
}

/// Posts `n` events in one batch and waits until feeds serve them.
async fn post_batch(api: &TenantApi<'_>, team: &str, n: usize) -> Vec<Value> {
    let events: Vec<Value> = (0..n)
        .map(|i| json!({"team_id": team, "type": "batch", "payload": {"i": i}}))
        .collect();
    let body = api
        .create_events(&json!({"events": events}))
        .expect(201)
        .await;
    let events = body["events"].as_array().expect("events").clone();
    until_served(position(&events[0]["cursor"]).tx).await;
    events
}

/// The body of a mark-read or mark-seen call: up to `cursor`, or everything served.
fn up_to(cursor: Option<&str>) -> Value {
    match cursor {
        Some(c) => json!({"up_to": c}),
        None => json!({}),
    }
}

/// ARCHITECTURE.md, invariant 2. A's transaction takes its transaction id first and
/// commits last; B commits in between. A feed ordered by id or timestamp (the
/// seed article's watermark) would show B, let the reader mark "everything up to
/// B" read, and then A — with a smaller id and an earlier timestamp — would land
/// below that watermark: skipped by `after` polling and counted as read although
/// nobody saw it. Here positions follow commit visibility: B is held back until
/// A has committed (it is above the snapshot's xmin), so the reader never gets a
/// cursor past A, and once A commits the poll returns both, unread.
#[tokio::test]
async fn a_transaction_that_commits_late_is_never_skipped() {
    let (f, token) = member_of("team", "reader").await;
    let api = f.api();
    let reader = f.app.user(&token);
    let c = post_served_event(&api, "team", "c").await;

    // A: written by hand in a transaction that stays open.
    let pool = f.pool.clone();
    let (a_tx, a_id, a_txid) = sql::event_in_open_transaction(&pool, &f.tenant, "team", "a").await;

    // B: through the API, committed while A is still open.
    let b = post_event(&api, "team", "b").await;
    let b_pos = position(&b["cursor"]);
    assert!(
        b_pos > Position::new(a_txid, a_id),
        "B's position follows A's"
    );
    assert!(
        b["id"].as_i64().expect("id") > a_id,
        "B's id is larger than A's"
    );

    // The reader sees C only: B is committed but above the snapshot's xmin.
    let page = reader.feed("").expect(200).await;
    assert_eq!(
        item_ids(&page),
        vec![c["id"].as_i64().expect("id")],
        "{page}"
    );
    let head = page["head"].as_str().expect("head").to_string();
    let marked = reader.mark_read(&up_to(Some(&head))).expect(200).await;
    assert_eq!(marked["read"], head);
    // Mark-all without a cursor cannot pass what is served either.
    let marked = reader.mark_read(&up_to(None)).expect(200).await;
    assert_eq!(marked["read"], head);
    // Nor can the creation cursor of B, which the head clamps.
    let marked = reader
        .mark_read(&up_to(b["cursor"].as_str()))
        .expect(200)
        .await;
    assert_eq!(marked["read"], head);
    assert_eq!(marked["unread_count"], 0);

    a_tx.commit().await.expect("commit A");
    until_served(b_pos.tx).await;

    let poll = reader.feed(&format!("?after={head}")).expect(200).await;
    assert_eq!(
        item_ids(&poll),
        vec![b["id"].as_i64().expect("id"), a_id],
        "{poll}"
    );
    for item in poll["items"].as_array().expect("items") {
        assert_eq!(item["read"], false, "{item}");
        assert_eq!(item["seen"], false, "{item}");
    }
    assert_eq!(poll["unread_count"], 2);
    assert_eq!(position(&poll["head"]), b_pos);
}

#[tokio::test]
async fn paging_before_and_polling_after_visit_every_item_exactly_once() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    let limit = 5;
    api.put_member("red", "u").expect(201).await;
    api.put_member("blue", "u").expect(201).await;
    let token = f.token("u").await;
    let user = f.app.user(&token);
    let pool = f.pool.clone();

    let mut expected = Vec::new();
    for i in 0..4 {
        let team = if i % 2 == 0 { "red" } else { "blue" };
        expected.push(
            post_served_event(&api, team, "before").await["id"]
                .as_i64()
                .expect("id"),
        );
    }
    // 3 × limit events in one transaction: they share one tx, ordered by id.
    for e in post_batch(&api, "red", 3 * limit).await {
        expected.push(e["id"].as_i64().expect("id"));
    }
    // Two in-app alerts for the user, merged into the same order.
    for n in 0..2 {
        let accepted = api
            .create_alert(
                &alert()
                    .entity(&format!("inv-{n}"))
                    .recipients(&["u"])
                    .subject("Invoice overdue")
                    .build(),
            )
            .expect(202)
            .await;
        let key = accepted["deliveries"][0]["key"].as_str().expect("key");
        let (id, tx) = sql::inbox_item_position(&pool, &f.tenant, key).await;
        until_served(tx).await;
        expected.push(id);
    }
    for _ in 0..3 {
        expected.push(
            post_served_event(&api, "blue", "after").await["id"]
                .as_i64()
                .expect("id"),
        );
    }
    // Noise the user must not see: another team.
    post_batch(&api, "green", 7).await;

    // Walk back with `before`.
    let mut walked = Vec::new();
    let mut positions = Vec::new();
    let mut query = format!("?limit={limit}");
    loop {
        let page = user.feed(&query).expect(200).await;
        assert!(item_ids(&page).len() <= limit);
        for item in page["items"].as_array().expect("items") {
            walked.push(item["id"].as_i64().expect("id"));
            positions.push(position(&item["cursor"]));
            let source = item["source"].as_str().expect("source");
            assert_eq!(source == "alert", item["team_id"].is_null(), "{item}");
        }
        match page["next_before"].as_str() {
            Some(next) => query = format!("?limit={limit}&before={next}"),
            None => break,
        }
    }
    assert!(
        positions.windows(2).all(|w| w[0] > w[1]),
        "strictly newest first"
    );
    let mut sorted_expected = expected.clone();
    sorted_expected.sort_unstable();
    let mut sorted_walked = walked.clone();
    sorted_walked.sort_unstable();
    assert_eq!(sorted_walked, sorted_expected, "every item exactly once");

    // Poll forward with `after` from the origin, adding items on the way.
    let mut polled = Vec::new();
    let mut cursor = Position::ORIGIN.to_cursor();
    let mut added_midway = false;
    loop {
        let page = user
            .feed(&format!("?limit={limit}&after={cursor}"))
            .expect(200)
            .await;
        let got = item_ids(&page);
        let page_positions: Vec<Position> = page["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| position(&i["cursor"]))
            .collect();
        assert!(
            page_positions.windows(2).all(|w| w[0] > w[1]),
            "newest first"
        );
        if let Some(newest) = page_positions.first() {
            assert_eq!(
                position(&page["head"]),
                *newest,
                "head is the newest returned"
            );
        }
        assert!(page["next_before"].is_null());
        polled.extend(got.iter().copied());
        if !added_midway {
            added_midway = true;
            expected.push(
                post_served_event(&api, "red", "midway").await["id"]
                    .as_i64()
                    .expect("id"),
            );
        }
        if got.is_empty() {
            break;
        }
        cursor = page["head"].as_str().expect("head").to_string();
    }
    let mut sorted_polled = polled.clone();
    sorted_polled.sort_unstable();
    let mut sorted_expected = expected.clone();
    sorted_expected.sort_unstable();
    assert_eq!(sorted_polled, sorted_expected, "every item exactly once");
}

/// A reader of more sources than a page holds: the page statement scans only
/// the sources whose newest item can still make the page (ARCHITECTURE.md,
/// "The feed statement"). Paging back and polling forward still return every
/// item of every team exactly once, in order, with quiet teams and teams whose
/// newest items are older than the rest.
#[tokio::test]
async fn a_reader_of_more_teams_than_a_page_visits_every_item_once_in_order() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    let limit = 2;
    let teams: Vec<String> = (0..9).map(|t| format!("t{t}")).collect();
    for team in &teams {
        api.put_member(team, "u").expect(201).await;
    }
    api.put_member("quiet", "u").expect(201).await;
    let token = f.token("u").await;
    let user = f.app.user(&token);

    // Uneven teams, interleaved in time: t0 busy and old, t8 one newest item.
    let mut expected = Vec::new();
    for (n, team) in teams.iter().enumerate() {
        for e in post_batch(&api, team, 9 - n).await {
            expected.push(e["id"].as_i64().expect("id"));
        }
        if n % 3 == 0 {
            expected.push(
                post_served_event(&api, "t0", "again").await["id"]
                    .as_i64()
                    .expect("id"),
            );
        }
    }
    expected.sort_unstable();

    let mut walked = Vec::new();
    let mut positions = Vec::new();
    let mut query = format!("?limit={limit}");
    loop {
        let page = user.feed(&query).expect(200).await;
        for item in page["items"].as_array().expect("items") {
            walked.push(item["id"].as_i64().expect("id"));
            positions.push(position(&item["cursor"]));
        }
        match page["next_before"].as_str() {
            Some(next) => query = format!("?limit={limit}&before={next}"),
            None => break,
        }
    }
    assert!(
        positions.windows(2).all(|w| w[0] > w[1]),
        "strictly newest first"
    );
    let mut sorted_walked = walked.clone();
    sorted_walked.sort_unstable();
    assert_eq!(sorted_walked, expected, "every item exactly once");

    let mut polled = Vec::new();
    let mut cursor = Position::ORIGIN.to_cursor();
    loop {
        let page = user
            .feed(&format!("?limit={limit}&after={cursor}"))
            .expect(200)
            .await;
        let got = item_ids(&page);
        if got.is_empty() {
            break;
        }
        // Each page is newest first; pages come oldest first.
        polled.extend(got.iter().rev().copied());
        cursor = page["head"].as_str().expect("head").to_string();
    }
    let mut in_order = walked.clone();
    in_order.reverse();
    assert_eq!(
        polled, in_order,
        "polling visits the same items, oldest first"
    );
}

/// The first page scans each source once when the reader's sources (teams
/// and the alerts) are no more than the page's k = limit + 1, and probes
/// their tops to prune them otherwise (ARCHITECTURE.md, "The feed
/// statement"). On both sides of that edge, and at it, the first page is the
/// newest `limit` items, with the same head and counts; a team joined after
/// most of its events shows only those after the join, though its scan takes
/// its newest k entries before filtering by the join.
#[tokio::test]
async fn a_first_page_is_the_same_whether_its_sources_fit_the_page_or_not() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    // Events of "late" before the user joins it: never in the user's feed.
    post_batch(&api, "late", 6).await;
    let teams = ["a", "b", "late"];
    for team in teams {
        api.put_member(team, "u").expect(201).await;
    }
    let token = f.token("u").await;
    let user = f.app.user(&token);
    let mut expected = Vec::new();
    for (n, team) in teams.iter().enumerate() {
        for e in post_batch(&api, team, 2 + n).await {
            expected.push(e["id"].as_i64().expect("id"));
        }
    }
    expected.push(
        post_served_event(&api, "a", "newest").await["id"]
            .as_i64()
            .expect("id"),
    );
    expected.sort_unstable_by(|a, b| b.cmp(a));
    let head = user.feed("?limit=100").expect(200).await["head"].clone();
    let counts = user.counts().expect(200).await;

    // 3 teams + the alerts = 4 sources: limit 2 (k = 3) prunes, limit 3
    // (k = 4) sits at the edge, limit 4 and 100 scan every source once.
    for limit in [1, 2, 3, 4, 100] {
        let page = user.feed(&format!("?limit={limit}")).expect(200).await;
        let want: Vec<i64> = expected.iter().take(limit).copied().collect();
        assert_eq!(item_ids(&page), want, "limit {limit}: the newest items");
        assert_eq!(page["head"], head, "limit {limit}: the head");
        assert_eq!(
            page["next_before"].is_null(),
            limit >= expected.len(),
            "limit {limit}: more beyond the page"
        );
        for badge in ["unread", "unseen"] {
            assert_eq!(
                page[format!("{badge}_count")],
                counts[badge],
                "limit {limit}: {badge}"
            );
        }
    }
}

/// A first page of a reader with more sources than the page's k scans the
/// tenant's newest events once and probes each source only when that scan
/// cannot tell (ARCHITECTURE.md, "The feed statement"). Its page must be the
/// per-source one — every source scanned (`PageKind::FirstFew`), the tenant
/// scanned with every source scanned when it cannot tell
/// (`PageKind::FirstFewScanned`) and every source probed (`PageKind::Before`
/// with no cursor) — item for item, with
/// the same head, `more`, watermarks and counts, in each case the scan meets:
/// it holds (the reader's teams wrote the tenant's newest events), one of its
/// k entries predates the reader's join of its team (the page falls back to
/// the probes), and the reader's teams wrote none of the tenant's last 4 ×
/// teams entries (the scan's budget runs out: the probes again); with quiet
/// teams, a page boundary at every limit, and the counts carried over.
#[tokio::test]
async fn a_first_page_that_scans_the_tenant_is_the_page_of_the_per_source_statements() {
    use tidings_server::store::{feed as store, horizon, teams};
    let f = TenantFixture::spawn().await;
    let api = f.api();
    let tenant = f.tenant.uuid();
    // Events of "late" and of "other" before the reader joins anything.
    post_batch(&api, "late", 3).await;
    post_batch(&api, "other", 2).await;
    let busy = ["a", "b", "c"];
    for team in busy {
        api.put_member(team, "u").expect(201).await;
    }
    for n in 0..6 {
        api.put_member(format!("quiet-{n}"), "u").expect(201).await;
    }
    for (n, team) in busy.iter().enumerate() {
        post_batch(&api, team, 2 + n).await;
    }
    post_served_event(&api, "a", "newest").await;
    let pool = &f.pool;

    let compare = |case: &'static str| async move {
        let members = teams::list_memberships_of_user(pool, tenant, "u")
            .await
            .expect("teams");
        let horizon = horizon::read_feed_horizons(pool)
            .await
            .expect("horizon")
            .of(tenant);
        let first = store::PageFrom::Before(None);
        for limit in [1, 2, 3, 5, 8] {
            // 9 or 10 teams: more sources than k = limit + 1 at every limit.
            assert_eq!(
                store::first_page_kind(members.len(), limit),
                store::PageKind::First,
                "{case}, limit {limit}"
            );
            let page = |kind| {
                let members = &members;
                async move {
                    store::read_feed_as(
                        pool, kind, tenant, "u", members, first, limit, horizon, None,
                    )
                    .await
                    .expect("page")
                }
            };
            let scanned = page(store::PageKind::First).await;
            let carried = store::read_first_page_carried(
                pool,
                tenant,
                "u",
                &members,
                limit,
                horizon,
                &scanned.walk.next,
            )
            .await
            .expect("carried page")
            .expect("nothing new since the base: counted from the page");
            let ours = |p: &store::FeedPage| {
                (
                    p.items.iter().map(|i| i.position).collect::<Vec<_>>(),
                    p.head,
                    p.more,
                    p.marks,
                    p.badges,
                )
            };
            for kind in [
                store::PageKind::FirstFew,
                store::PageKind::FirstFewScanned,
                store::PageKind::Before,
            ] {
                let other = page(kind).await;
                assert_eq!(
                    ours(&scanned),
                    ours(&other),
                    "{case}, limit {limit}, {kind:?}"
                );
                assert_eq!(
                    ours(&carried),
                    ours(&other),
                    "{case}, limit {limit}, carried"
                );
            }
            assert_eq!(
                scanned.items.len(),
                limit.min(scanned.badges.unread) as usize
            );
        }
    };

    // The reader's teams wrote the tenant's newest events: the scan holds.
    compare("scan holds").await;
    // "late" is joined after its newest events, which are newer than every
    // other team's: the scan's k entries hold some before the join.
    post_batch(&api, "late", 8).await;
    api.put_member("late", "u").expect(201).await;
    compare("entries before a join").await;
    // After the join: "late"'s newest count again.
    post_batch(&api, "late", 2).await;
    compare("after the join").await;
    // 4 × 10 teams = 40 entries of a team the reader is not in, newest: the
    // scan's budget runs out before it finds any of the reader's.
    post_batch(&api, "other", 41).await;
    compare("budget spent on other teams").await;
    // One of the reader's above them again: fewer than k found, probes.
    post_served_event(&api, "b", "one more").await;
    compare("one of k above the others").await;
}

/// Badge counts subtract the items read one by one instead of probing each
/// counted item; at the cap, an item read one by one must not make a capped
/// count look exact or an exact one look capped.
#[tokio::test]
async fn counts_stay_exact_just_below_the_cap_with_items_read_one_by_one() {
    let (f, token) = member_of("team", "u").await;
    let api = f.api();
    let user = f.app.user(&token);
    // Batches hold at most 1,000 events.
    let mut batch = post_batch(&api, "team", 1000).await;
    batch.extend(post_batch(&api, "team", 2).await);
    let c = user.counts().expect(200).await;
    assert_eq!(c["capped"], true);
    for e in [&batch[0], &batch[700]] {
        user.mark_item_read(e["id"].as_i64().expect("id"))
            .expect(200)
            .await;
    }
    let c = user.counts().expect(200).await;
    assert_eq!(c, json!({"unread": 1000, "unseen": 1000, "capped": false}));
    user.mark_seen(&up_to(batch[1]["cursor"].as_str()))
        .expect(200)
        .await;
    let c = user.counts().expect(200).await;
    assert_eq!(c, json!({"unread": 1000, "unseen": 999, "capped": false}));
    post_served_event(&api, "team", "one more").await;
    let c = user.counts().expect(200).await;
    assert_eq!(c, json!({"unread": 1000, "unseen": 1000, "capped": true}));
}

#[tokio::test]
async fn watermarks_only_move_forward() {
    let (f, token) = member_of("team", "u").await;
    let api = f.api();
    let user = f.app.user(&token);
    let mut cursors: Vec<String> = post_batch(&api, "team", 10)
        .await
        .iter()
        .map(|e| e["cursor"].as_str().expect("cursor").to_string())
        .collect();
    for _ in 0..10 {
        let e = post_served_event(&api, "team", "single").await;
        cursors.push(e["cursor"].as_str().expect("cursor").to_string());
    }
    let newest = user.feed("").expect(200).await["head"]
        .as_str()
        .expect("head")
        .to_string();
    let max_sent = cursors[..15]
        .iter()
        .max_by_key(|c| Position::from_cursor(c).expect("cursor"))
        .expect("some")
        .clone();

    // 50 concurrent calls with shuffled cursors, none beyond the 15th event.
    let mut calls: Vec<String> = (0..50).map(|i| cursors[i % 15].clone()).collect();
    calls.shuffle(&mut rand::thread_rng());
    let results = futures::future::join_all(
        calls
            .iter()
            .map(|c| user.mark_read(&up_to(Some(c))).expect(200)),
    )
    .await;
    assert_eq!(results.len(), 50);
    let after = user.counts().expect(200).await;
    assert_eq!(after["unread"], 5, "{after}");
    let state = user.mark_read(&up_to(Some(&cursors[0]))).expect(200).await;
    assert_eq!(
        state["read"],
        max_sent.as_str(),
        "an old cursor replayed changes nothing"
    );
    assert_eq!(state["unread_count"], 5);

    // Seen, concurrently too, then a replay.
    let seen = futures::future::join_all(
        calls
            .iter()
            .map(|c| user.mark_seen(&up_to(Some(c))).expect(200)),
    )
    .await;
    assert_eq!(seen.len(), 50);
    let state = user.mark_seen(&up_to(Some(&cursors[3]))).expect(200).await;
    assert_eq!(state["seen"], max_sent.as_str());

    // A cursor beyond the head is clamped to the head.
    let beyond = Position::new(i64::MAX / 2, 1).to_cursor();
    let state = user.mark_read(&up_to(Some(&beyond))).expect(200).await;
    assert_eq!(state["read"], newest.as_str());
    assert_eq!(state["unread_count"], 0);
    // An event written after that is unread: the watermark did not run ahead.
    let later = post_served_event(&api, "team", "later").await;
    let c = user.counts().expect(200).await;
    assert_eq!(c["unread"], 1, "{c}");
    let page = user.feed("?limit=1").expect(200).await;
    assert_eq!(page["items"][0]["id"], later["id"]);
    assert_eq!(page["items"][0]["read"], false);
}

#[tokio::test]
async fn reading_one_item_marks_that_item_only_and_counts_are_capped() {
    let (f, token) = member_of("team", "u").await;
    let api = f.api();
    let user = f.app.user(&token);
    let batch = post_batch(&api, "team", 1000).await;
    let c = user.counts().expect(200).await;
    assert_eq!(c, json!({"unread": 1000, "unseen": 1000, "capped": false}));
    post_served_event(&api, "team", "one more").await;
    let c = user.counts().expect(200).await;
    assert_eq!(c, json!({"unread": 1000, "unseen": 1000, "capped": true}));

    // Mark all but the newest 3 read, then one of those 3 individually.
    let up_to_997 = batch[997]["cursor"].as_str().expect("cursor");
    let state = user.mark_read(&up_to(Some(up_to_997))).expect(200).await;
    assert_eq!(state["unread_count"], 3);
    let target = batch[998]["id"].as_i64().expect("id");
    let state = user.mark_item_read(target).expect(200).await;
    assert_eq!(state["unread_count"], 2);
    assert_eq!(state["unseen_count"], 2, "reading implies seeing");
    let page = user.feed("?limit=3").expect(200).await;
    let flags: Vec<(i64, bool)> = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["id"].as_i64().expect("id"),
                i["read"].as_bool().expect("read"),
            )
        })
        .collect();
    // Newest first: the single event, batch[999], batch[998].
    assert_eq!(flags[2], (target, true));
    assert!(!flags[0].1 && !flags[1].1, "{flags:?}");
    // Marking it again is harmless; an item outside the feed is 404.
    assert_eq!(
        user.mark_item_read(target).expect(200).await["unread_count"],
        2
    );
    user.mark_item_read(999999999).problem(404).await;

    // The watermark passing the item prunes it.
    user.mark_read(&up_to(None)).expect(200).await;
    assert_eq!(sql::count(&f.pool, Rows::ItemReads).await, 0);
}

#[tokio::test]
async fn tenants_are_sealed_and_users_read_only_their_own_feed() {
    let f = TenantFixture::spawn().await;
    let a_api = f.api();
    a_api.put_member("team", "u1").expect(201).await;
    let a_event = a_api
        .create_event(
            &json!({"team_id": "team", "type": "t", "payload": {}, "idempotency_key": "k"}),
        )
        .expect(201)
        .await;
    until_served(position(&a_event["cursor"]).tx).await;
    let a_token = f.token("u1").await;
    let a_user = f.app.user(&a_token);
    let a_before = a_user.feed("").expect(200).await;
    assert_eq!(item_ids(&a_before).len(), 1);

    // Tenant B: same team name, same user id, same idempotency key.
    let b = f.app.create_tenant().await;
    let b_api = f.app.tenant(&b);
    let b_token = f.app.user_token(&b, "u1").await;
    let b_user = f.app.user(&b_token);
    let b_feed = b_user.feed("").expect(200).await;
    assert_eq!(item_ids(&b_feed), Vec::<i64>::new());
    assert!(b_feed["head"].is_null());
    assert_eq!(
        b_user.counts().expect(200).await,
        json!({"unread": 0, "unseen": 0, "capped": false})
    );
    let listed = b_api.list_members("team", "").expect(200).await;
    assert_eq!(listed["data"], json!([]));
    b_api.delete_member("team", "u1").problem(404).await;
    let a_id = a_event["id"].as_i64().expect("id");
    b_user.mark_item_read(a_id).problem(404).await;
    let state = b_user
        .mark_read(&up_to(a_event["cursor"].as_str()))
        .expect(200)
        .await;
    assert!(
        state["read"].is_null(),
        "clamped to B's empty feed: {state}"
    );
    b_user.mark_seen(&up_to(None)).expect(200).await;
    let b_event = b_api
        .create_event(&json!({"team_id": "team", "type": "other", "payload": {"x": 1}, "idempotency_key": "k"}))
        .expect(201)
        .await;
    assert_ne!(b_event["id"], a_event["id"]);

    // A's user in B's team does not see B's event; A's state is untouched.
    let a_after = a_user.feed("").expect(200).await;
    assert_eq!(item_ids(&a_after), item_ids(&a_before));
    assert_eq!(a_after["unread_count"], 1);
    assert_eq!(a_after["items"][0]["seen"], false);

    // Another user of tenant A reads their own (empty) feed, and their marks
    // do not touch u1's.
    let u2_token = f.token("u2").await;
    let u2 = f.app.user(&u2_token);
    assert_eq!(item_ids(&u2.feed("").expect(200).await), Vec::<i64>::new());
    u2.mark_item_read(a_id).problem(404).await;
    u2.mark_read(&up_to(a_event["cursor"].as_str()))
        .expect(200)
        .await;
    assert_eq!(a_user.counts().expect(200).await["unread"], 1);

    // Credentials of the wrong kind are refused.
    f.app
        .bearer(&f.tenant.api_key)
        .user()
        .feed("")
        .problem(403)
        .await;
    f.app
        .bearer(&a_token)
        .tenant()
        .put_member("team", "u9")
        .problem(403)
        .await;
    f.app
        .bearer(&a_token)
        .tenant()
        .create_event(&json!({"team_id": "team", "type": "t", "payload": {}}))
        .problem(403)
        .await;
    f.app.user("not-a-credential").counts().problem(401).await;
}

#[tokio::test]
async fn membership_decides_what_a_user_sees() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    let token = f.token("u").await;
    let user = f.app.user(&token);
    post_served_event(&api, "team", "before join").await;
    post_served_event(&api, "team", "before join").await;

    let first = api.put_member("team", "u").expect(201).await;
    let again = api.put_member("team", "u").expect(200).await;
    assert_eq!(
        first["joined_cursor"], again["joined_cursor"],
        "re-adding keeps the join position"
    );
    let page = user.feed("").expect(200).await;
    assert_eq!(
        item_ids(&page),
        Vec::<i64>::new(),
        "events before the join stay hidden"
    );

    let e = post_served_event(&api, "team", "after join").await;
    assert_eq!(
        item_ids(&user.feed("").expect(200).await),
        vec![e["id"].as_i64().expect("id")]
    );
    assert_eq!(user.counts().expect(200).await["unread"], 1);

    api.delete_member("team", "u").expect(204).await;
    let page = user.feed("").expect(200).await;
    assert_eq!(
        item_ids(&page),
        Vec::<i64>::new(),
        "leaving hides the team's events"
    );
    assert!(page["head"].is_null());
    assert_eq!(
        user.counts().expect(200).await,
        json!({"unread": 0, "unseen": 0, "capped": false})
    );
    api.delete_member("team", "u").problem(404).await;

    // Re-joining starts a new join position.
    api.put_member("team", "u").expect(201).await;
    assert_eq!(
        item_ids(&user.feed("").expect(200).await),
        Vec::<i64>::new()
    );

    // Listing pages through members in user order.
    for member in ["m3", "m1", "m5", "m2", "m4"] {
        api.put_member("big", member).expect(201).await;
    }
    let mut seen = Vec::new();
    let mut query = "?limit=2".to_string();
    loop {
        let page = api.list_members("big", &query).expect(200).await;
        for m in page["data"].as_array().expect("data") {
            seen.push(m["user_id"].as_str().expect("user").to_string());
        }
        match page["next_cursor"].as_str() {
            Some(c) => query = format!("?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen, vec!["m1", "m2", "m3", "m4", "m5"]);
}

/// ARCHITECTURE.md, invariant 1.
#[tokio::test]
async fn an_event_is_stored_once_whatever_the_team_size() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    let members: Vec<String> = (0..40).map(|i| format!("member-{i}")).collect();
    for m in &members {
        api.put_member("everyone", m).expect(201).await;
    }
    let pool = f.pool.clone();
    let before = sql::count(&pool, Rows::Events).await;
    let e = post_served_event(&api, "everyone", "announcement").await;
    assert_eq!(sql::count(&pool, Rows::Events).await, before + 1);
    for m in [&members[0], &members[17], &members[39]] {
        let token = f.token(m).await;
        assert_eq!(
            item_ids(&f.app.user(&token).feed("").expect(200).await),
            vec![e["id"].as_i64().expect("id")]
        );
    }
}

#[tokio::test]
async fn event_creation_is_idempotent() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    let pool = f.pool.clone();
    let body = json!({"team_id": "t", "type": "x", "actor_id": "a", "payload": {"a": 1, "b": [1, 2]}, "idempotency_key": "key-1"});
    let first = api.create_event(&body).expect(201).await;
    // The same event serialized differently (key order) is a retry.
    let raw = r#"{"payload": {"b": [1, 2], "a": 1}, "idempotency_key": "key-1", "type": "x", "team_id": "t", "actor_id": "a"}"#;
    let retry = f
        .app
        .raw(Method::POST, "/v1/events")
        .bearer(&f.tenant.api_key)
        .body(Some("application/json"), raw)
        .expect(200)
        .await;
    assert_eq!(retry, first);
    // Same key, another body: refused.
    let other = json!({"team_id": "t", "type": "x", "actor_id": "a", "payload": {"a": 2, "b": [1, 2]}, "idempotency_key": "key-1"});
    let problem = api.create_event(&other).problem(422).await;
    assert_eq!(problem["code"], "idempotency_key_reused");
    assert_eq!(sql::count(&pool, Rows::Events).await, 1);

    // In a batch: a retried key answers the original, a new key is stored.
    let batch = json!({"events": [
        {"team_id": "t", "type": "x", "actor_id": "a", "payload": {"a": 1, "b": [1, 2]}, "idempotency_key": "key-1"},
        {"team_id": "t", "type": "y", "payload": {}, "idempotency_key": "key-2"},
    ]});
    let out = api.create_events(&batch).expect(201).await;
    assert_eq!(out["events"][0], first);
    let again = api.create_events(&batch).expect(200).await;
    assert_eq!(again, out);
    assert_eq!(sql::count(&pool, Rows::Events).await, 2);
}

/// The standard `Idempotency-Key` header guards an event as its body's
/// `idempotency_key` does: a sender retrying with the header (as it does for
/// alerts) gets the original back, not a second event. A batch refuses it
/// rather than ignoring it.
#[tokio::test]
async fn the_idempotency_key_header_guards_an_event() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    let pool = f.pool.clone();
    let body = json!({"team_id": "t", "type": "x", "payload": {"n": 1}});
    let first = api
        .create_event(&body)
        .idempotency_key("h-1")
        .expect(201)
        .await;
    let retry = api
        .create_event(&body)
        .idempotency_key("h-1")
        .expect(200)
        .await;
    assert_eq!(retry, first);
    // The header and the body's field name the same key.
    let mut with_field = body.clone();
    with_field["idempotency_key"] = json!("h-1");
    let same = api.create_event(&with_field).expect(200).await;
    assert_eq!(same, first);
    let both = api
        .create_event(&with_field)
        .idempotency_key("h-1")
        .expect(200)
        .await;
    assert_eq!(both, first);
    // Two different keys for one event: refused, nothing stored.
    let problem = api
        .create_event(&with_field)
        .idempotency_key("h-2")
        .problem(422)
        .await;
    assert_eq!(problem["code"], "conflicting_idempotency_keys");
    // The same header key with another body: refused.
    let other = json!({"team_id": "t", "type": "x", "payload": {"n": 2}});
    let problem = api
        .create_event(&other)
        .idempotency_key("h-1")
        .problem(422)
        .await;
    assert_eq!(problem["code"], "idempotency_key_reused");
    let problem = api
        .create_events(&json!({"events": [body]}))
        .idempotency_key("h-3")
        .problem(422)
        .await;
    assert_eq!(problem["code"], "idempotency_key_on_batch");
    assert_eq!(sql::count(&pool, Rows::Events).await, 1);
}

/// ARCHITECTURE.md, invariant 10: every bad request is a 4xx problem and nothing
/// stored changes.
#[tokio::test]
async fn bad_input_gets_a_problem_and_changes_nothing() {
    let (f, token) = member_of("team", "u").await;
    let api = f.api();
    let user = f.app.user(&token);
    post_served_event(&api, "team", "x").await;
    let head = user.feed("").expect(200).await["head"]
        .as_str()
        .expect("head")
        .to_string();
    user.mark_seen(&up_to(Some(&head))).expect(200).await;
    let pool = f.pool.clone();

    async fn snapshot(pool: &PgPool) -> (i64, i64, Vec<(i64, i64, i64, i64)>) {
        (
            sql::count(pool, Rows::Events).await,
            sql::count(pool, Rows::Memberships).await,
            sql::feed_marks(pool).await,
        )
    }
    let before = snapshot(&pool).await;

    let mut tampered = head.clone().into_bytes();
    tampered[10] = if tampered[10] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    for query in [
        "?before=garbage".to_string(),
        format!("?after={tampered}"),
        format!("?before={}", &head[..20]),
    ] {
        let p = user.feed(&query).problem(400).await;
        assert_eq!(p["code"], "invalid_cursor", "{query}");
    }
    for query in ["?limit=0", "?limit=101", "?limit=-1", "?limit=ten"] {
        user.feed(query).problem(400).await;
    }
    let both = format!("?before={head}&after={head}");
    user.feed(&both).problem(400).await;
    for which in ["read", "seen"] {
        let mark = |body: &Value| match which {
            "read" => user.mark_read(body),
            _ => user.mark_seen(body),
        };
        let p = mark(&json!({"up_to": tampered})).problem(400).await;
        assert_eq!(p["code"], "invalid_cursor");
        mark(&json!({"up_to": head, "extra": 1})).problem(400).await;
    }

    let too_big = "x".repeat(16 * 1024);
    let bad_events = [
        (
            json!({"team_id": "team", "type": "t", "payload": [1, 2]}),
            422,
        ),
        (
            json!({"team_id": "team", "type": "t", "payload": "text"}),
            422,
        ),
        (
            json!({"team_id": "team", "type": "t", "payload": {"big": too_big}}),
            422,
        ),
        (
            json!({"team_id": "team", "type": "t", "payload": {}, "unknown": 1}),
            400,
        ),
        (
            json!({"team_id": "te\u{1}am", "type": "t", "payload": {}}),
            400,
        ),
        (json!({"team_id": "team", "type": "", "payload": {}}), 400),
        (
            json!({"team_id": "team", "type": "t", "actor_id": "x".repeat(256), "payload": {}}),
            400,
        ),
        (
            json!({"team_id": "team", "type": "t", "payload": {}, "idempotency_key": "a\nb"}),
            400,
        ),
        (json!({"type": "t", "payload": {}}), 400),
    ];
    for (body, status) in bad_events {
        api.create_event(&body).problem(status).await;
    }
    for raw in [
        r#"{"team_id": "team", "type": "t", "payload": {}"#,
        "not json",
        "",
    ] {
        f.app
            .raw(Method::POST, "/v1/events")
            .bearer(&f.tenant.api_key)
            .body(Some("application/json"), raw)
            .problem(400)
            .await;
    }
    // Batches: too many, one bad event, one reused key — all or nothing.
    let many: Vec<Value> = (0..1001)
        .map(|_| json!({"team_id": "team", "type": "t", "payload": {}}))
        .collect();
    let reply = api
        .create_events(&json!({"events": many}))
        .reply_one_of(&(400..500).collect::<Vec<u16>>())
        .await;
    reply.problem();
    api.create_events(&json!({"events": []})).problem(422).await;
    let one_bad = json!({"events": [
        {"team_id": "team", "type": "t", "payload": {}},
        {"team_id": "team", "type": "t", "payload": 5},
    ]});
    let p = api.create_events(&one_bad).problem(422).await;
    assert!(
        p["detail"].as_str().expect("detail").contains("events[1]"),
        "{p}"
    );
    api.create_event(
        &json!({"team_id": "team", "type": "t", "payload": {}, "idempotency_key": "kk"}),
    )
    .expect(201)
    .await;
    let before = (before.0 + 1, before.1, before.2);
    let reused = json!({"events": [
        {"team_id": "team", "type": "t", "payload": {}},
        {"team_id": "team", "type": "t", "payload": {"changed": true}, "idempotency_key": "kk"},
    ]});
    api.create_events(&reused).problem(422).await;

    // Ids in paths: control characters, and limits on member lists.
    api.put_member("te%01am", "u").problem(400).await;
    api.delete_member("team", "u%7F").problem(400).await;
    api.list_members("team", "?limit=0").problem(400).await;
    api.list_members("team", "?cursor=%%%").problem(400).await;
    user.mark_item_read("abc").problem(400).await;

    assert_eq!(snapshot(&pool).await, before, "nothing stored changed");
    assert!(
        !f.app.process.log().contains("internal error"),
        "{}",
        f.app.process.log()
    );
}

/// Two instances on one database: a membership change through one reaches the
/// other's cache through LISTEN/NOTIFY.
#[tokio::test]
async fn a_removal_reaches_every_instance_within_a_second() {
    let (one, db) = TestApp::spawn().await.expect("spawn");
    let two = TestApp::spawn_on(&db.url, AppOptions::default())
        .await
        .expect("second instance");
    let tenant = one.create_tenant().await;
    let api = one.tenant(&tenant);
    api.put_member("team", "u").expect(201).await;
    let e = post_served_event(&api, "team", "x").await;
    let token = one.user_token(&tenant, "u").await;
    let user_on_two = two.user(&token);
    // Instance two caches u's teams (only while its listener is up).
    assert!(
        two.process.log().contains("cache invalidation listener up"),
        "{}",
        two.process.log()
    );
    for _ in 0..3 {
        assert_eq!(
            item_ids(&user_on_two.feed("").expect(200).await),
            vec![e["id"].as_i64().expect("id")]
        );
    }

    api.delete_member("team", "u").expect(204).await;
    let removed_at = std::time::Instant::now();
    let hidden = loop {
        let page = user_on_two.feed("").expect(200).await;
        let c = user_on_two.counts().expect(200).await;
        if item_ids(&page).is_empty() && c["unread"] == 0 {
            break true;
        }
        if removed_at.elapsed() > Duration::from_secs(1) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(hidden, "instance two still shows the team after 1 s");

    // Joining another team through instance one shows up on two as well.
    api.put_member("other", "u").expect(201).await;
    let e2 = post_served_event(&api, "other", "y").await;
    let joined_at = std::time::Instant::now();
    let shown = loop {
        if item_ids(&user_on_two.feed("").expect(200).await) == vec![e2["id"].as_i64().expect("id")]
        {
            break true;
        }
        if joined_at.elapsed() > Duration::from_secs(1) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(shown, "instance two does not show the new team after 1 s");
}

/// In-app alerts (the alerts engineer's `inbox_items`) are feed items too: same
/// positions, same watermarks, source `alert`.
#[tokio::test]
async fn in_app_alerts_are_served_in_the_feed() {
    let f = TenantFixture::spawn().await;
    let api = f.api();
    api.put_member("team", "ann").expect(201).await;
    let event = post_served_event(&api, "team", "comment").await;
    let invoice = alert()
        .subject("Invoice 42 is overdue")
        .payload(json!({"amount_cents": 1200}))
        .build();
    api.create_alert(&invoice).expect(202).await;
    until_all_served().await;

    let token = f.token("ann").await;
    let ann = f.app.user(&token);
    let page = ann.feed("").expect(200).await;
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{page}");
    let newest = &items[0];
    assert_eq!(newest["source"], "alert", "{page}");
    assert_eq!(newest["type"], "invoice.overdue");
    assert_eq!(newest["object_id"], "inv-42");
    assert_eq!(newest["subject"], "Invoice 42 is overdue");
    assert!(newest["team_id"].is_null());
    assert_eq!(items[1]["id"], event["id"]);
    assert_eq!(items[1]["source"], "event");
    assert_eq!(page["unread_count"], 2);

    let state = ann
        .mark_read(&up_to(page["head"].as_str()))
        .expect(200)
        .await;
    assert_eq!(state["unread_count"], 0);
    // Another user of the tenant does not get ann's alert.
    let bob = f.token("bob").await;
    assert_eq!(
        item_ids(&f.app.user(&bob).feed("").expect(200).await),
        Vec::<i64>::new()
    );
}

/// The `counts` cache lookups of an instance that carried a user's badge walk
/// over (`hit`), from its metrics.
async fn counts_carried_over(app: &TestApp) -> u64 {
    let text = app.scrape().await;
    text.lines()
        .filter(|l| l.starts_with("tidings_cache_lookups_total") && l.contains("cache=\"counts\""))
        .filter(|l| l.contains("result=\"hit\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Badge counts are carried over from a user's last read on an instance and
/// only what is newer is walked (ARCHITECTURE.md, "The feed statement",
/// Badges). Every change that alters a count without adding an item — a mark
/// or an item read made through another instance, which this one never hears
/// of, a join, a leave — must still show at once and exactly: the statement
/// checks what it carries over in its own snapshot.
#[tokio::test]
async fn counts_carried_over_between_reads_stay_exact_after_changes_through_another_instance() {
    let (one, db) = TestApp::spawn().await.expect("spawn");
    let two = TestApp::spawn_on(&db.url, AppOptions::default())
        .await
        .expect("second instance");
    let tenant = one.create_tenant().await;
    let api = one.tenant(&tenant);
    api.put_member("team", "u").expect(201).await;
    let token = one.user_token(&tenant, "u").await;
    let (on_one, on_two) = (one.user(&token), two.user(&token));
    // (unread, unseen) from instance two's counts, and from its first page
    // when that agrees (else the page's, which then fails the comparison).
    let counts = || async {
        let c = on_two.counts().expect(200).await;
        let page = on_two.feed("?limit=1").expect(200).await;
        let counted = (c["unread"].as_i64(), c["unseen"].as_i64());
        let paged = (page["unread_count"].as_i64(), page["unseen_count"].as_i64());
        let (unread, unseen) = if counted == paged {
            counted
        } else {
            (None, None)
        };
        (unread.unwrap_or(-1), unseen.unwrap_or(-1))
    };

    let first = post_batch(&api, "team", 5).await;
    assert_eq!(counts().await, (5, 5));
    let hits = counts_carried_over(&two).await;
    let later = post_batch(&api, "team", 3).await;
    assert_eq!(
        counts().await,
        (8, 8),
        "new items add to what was carried over"
    );
    assert!(
        counts_carried_over(&two).await > hits,
        "instance two carries its counts over between reads"
    );

    // Marks and item reads through instance one: two hears nothing of them.
    on_one
        .mark_read(&up_to(first[4]["cursor"].as_str()))
        .expect(200)
        .await;
    assert_eq!(counts().await, (3, 3));
    on_one
        .mark_item_read(later[2]["id"].as_i64().expect("id"))
        .expect(200)
        .await;
    assert_eq!(counts().await, (2, 2));
    on_one.mark_seen(&up_to(None)).expect(200).await;
    assert_eq!(counts().await, (2, 0));
    post_batch(&api, "team", 2).await;
    assert_eq!(counts().await, (4, 2));
    on_one
        .mark_item_read(later[0]["id"].as_i64().expect("id"))
        .expect(200)
        .await;
    assert_eq!(counts().await, (3, 2));

    // A join, then a leave: two learns of them through its membership cache,
    // and the counts follow the teams it reads with.
    api.put_member("other", "u").expect(201).await;
    post_batch(&api, "other", 4).await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            counts().await == (7, 6)
        })
        .await,
        "a join counts the new team's items: {:?}",
        counts().await
    );
    api.delete_member("team", "u").expect(204).await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            counts().await == (4, 4)
        })
        .await,
        "a leave drops the team's items: {:?}",
        counts().await
    );
    on_one.mark_read(&up_to(None)).expect(200).await;
    assert_eq!(counts().await, (0, 0));
}

/// Retention deletes feed items that a carried-over count may include; the
/// purge bumps the tenant's counter in the same statement, so the next read
/// walks again instead of counting what is gone.
#[tokio::test]
async fn counts_carried_over_drop_the_items_retention_purged() {
    let f = TenantFixture::spawn_with(AppOptions::env([
        ("TIDINGS_RETENTION_INTERVAL_SECS", "1"),
        ("TIDINGS_RETENTION_PAUSE_MS", "0"),
    ]))
    .await;
    let api = f.api();
    api.put_member("team", "u").expect(201).await;
    let token = f.token("u").await;
    let user = f.app.user(&token);
    post_batch(&api, "team", 5).await;
    for _ in 0..2 {
        let c = user.counts().expect(200).await;
        assert_eq!(c, json!({"unread": 5, "unseen": 5, "capped": false}));
    }
    f.app
        .admin()
        .set_feed_retention(&f.tenant.id, &json!({"feed_retention_secs": 1}))
        .expect(200)
        .await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            sql::count(&f.pool, Rows::Events).await == 0
        })
        .await,
        "the events past retention go"
    );
    let c = user.counts().expect(200).await;
    assert_eq!(c, json!({"unread": 0, "unseen": 0, "capped": false}));
    assert_eq!(
        item_ids(&user.feed("").expect(200).await),
        Vec::<i64>::new()
    );
}

/// A first page handed a counts base counts from its own positions instead
/// of walking (`store::feed::read_first_page_carried`): its answer must be
/// the walk's, item for item and count for count, whenever it gives one, and
/// it must give none when its page cannot tell — as many new items as the
/// page holds, or a base that no longer holds (a mark, an item read).
#[tokio::test]
async fn a_first_page_counts_from_its_page_only_what_the_walk_would_count() {
    use tidings_server::store::{feed as store, horizon};
    let (f, token, teams) = reader_of_team_and_quiet().await;
    let api = f.api();
    let user = f.app.user(&token);
    let tenant = f.tenant.uuid();
    // limit 2: k = 3, and 2 teams + the alerts fit it (PageKind::FirstFewScanned:
    // 4 entries per team of tenant scan can find k).
    const LIMIT: u32 = 2;
    let pool = &f.pool;
    let teams = &teams;
    let walked = |base: Option<store::CountsBase>| async move {
        let horizon = horizon::read_feed_horizons(pool)
            .await
            .expect("horizon")
            .of(tenant);
        let page = store::read_feed(
            pool,
            tenant,
            "u",
            teams,
            store::PageFrom::Before(None),
            LIMIT,
            horizon,
            base.as_ref(),
        )
        .await
        .expect("walked page");
        (page, horizon)
    };
    let carried = |base: store::CountsBase, horizon: i64| async move {
        store::read_first_page_carried(pool, tenant, "u", teams, LIMIT, horizon, &base)
            .await
            .expect("carried page")
    };
    let same = |a: &store::FeedPage, b: &store::FeedPage| {
        let positions =
            |p: &store::FeedPage| p.items.iter().map(|i| i.position).collect::<Vec<_>>();
        assert_eq!(positions(a), positions(b), "items");
        assert_eq!((a.head, a.more, a.marks), (b.head, b.more, b.marks));
        assert_eq!(a.badges, b.badges, "badges");
        assert_eq!(
            a.walk.next, b.walk.next,
            "what the next statement carries over"
        );
        assert!(a.walk.carried_over);
    };

    post_batch(&api, "team", 5).await;
    let (first, _) = walked(None).await;
    assert_eq!((first.badges.unread, first.badges.unseen), (5, 5));
    let mut base = first.walk.next;
    // Nothing new, then fewer new items than the page holds: counted from the page.
    for (new, expected) in [(0, 5), (1, 6), (2, 8)] {
        if new > 0 {
            post_batch(&api, "team", new).await;
        }
        let (walk, horizon) = walked(None).await;
        let page = carried(base, horizon)
            .await
            .unwrap_or_else(|| panic!("{new} new items fit the page"));
        assert_eq!(page.badges.unread, expected);
        same(&page, &walk);
        base = page.walk.next;
    }
    // As many new items as the page holds (k = 3): the page cannot tell
    // whether more came, so it leaves the counts to the walk.
    post_batch(&api, "team", 3).await;
    let (walk, horizon) = walked(Some(base)).await;
    assert!(carried(base, horizon).await.is_none(), "k new items: walk");
    assert_eq!((walk.badges.unread, walk.badges.unseen), (11, 11));
    base = walk.walk.next;

    // Marks move the floors: the base no longer holds.
    let page = user.feed("?limit=3").expect(200).await;
    let third = page["items"][2]["cursor"]
        .as_str()
        .expect("cursor")
        .to_string();
    user.mark_seen(&up_to(Some(&third))).expect(200).await;
    let (walk, horizon) = walked(None).await;
    assert!(carried(base, horizon).await.is_none(), "a mark: walk");
    assert_eq!((walk.badges.unread, walk.badges.unseen), (11, 2));
    base = walk.walk.next;
    // Above the new floors, counted from the page again: the two floors differ.
    post_batch(&api, "team", 1).await;
    let (walk, horizon) = walked(None).await;
    let page = carried(base, horizon)
        .await
        .expect("1 new item fits the page");
    assert_eq!((page.badges.unread, page.badges.unseen), (12, 3));
    same(&page, &walk);
    base = page.walk.next;

    // An item read one by one changes the budget: the base no longer holds.
    let newest = user.feed("?limit=1").expect(200).await["items"][0]["id"]
        .as_i64()
        .expect("id");
    user.mark_item_read(newest).expect(200).await;
    let (walk, horizon) = walked(None).await;
    assert!(carried(base, horizon).await.is_none(), "an item read: walk");
    assert_eq!((walk.badges.unread, walk.badges.unseen), (11, 2));
    base = walk.walk.next;
    post_batch(&api, "team", 2).await;
    let (walk, horizon) = walked(None).await;
    let page = carried(base, horizon)
        .await
        .expect("2 new items fit the page");
    assert_eq!((page.badges.unread, page.badges.unseen), (13, 4));
    same(&page, &walk);
}

/// A first page after as many new items as it holds cannot count them from
/// its own positions; the service then answers with the statement that walks
/// (the same snapshot rules, one statement), so the counts stay exact whether
/// the page or the walk counted.
#[tokio::test]
async fn first_page_counts_stay_exact_when_more_came_than_the_page_holds() {
    let (f, token) = member_of("team", "u").await;
    let api = f.api();
    let user = f.app.user(&token);
    let counts = || async {
        let page = user.feed("?limit=1").expect(200).await;
        (
            page["unread_count"].as_i64().expect("unread"),
            page["unseen_count"].as_i64().expect("unseen"),
        )
    };
    post_batch(&api, "team", 2).await;
    assert_eq!(counts().await, (2, 2), "first read: walked");
    assert_eq!(counts().await, (2, 2), "nothing new: from the page");
    post_batch(&api, "team", 1).await;
    assert_eq!(counts().await, (3, 3), "one new item: from the page");
    // limit 1: k = 2.
    post_batch(&api, "team", 2).await;
    assert_eq!(counts().await, (5, 5), "k new items: walked from the base");
    post_batch(&api, "team", 5).await;
    assert_eq!(
        counts().await,
        (10, 10),
        "more than k: walked from the base"
    );
    assert_eq!(counts().await, (10, 10));
}

/// The counts handed a base count from the entries since it instead of
/// walking (`store::feed::read_status_carried`, k = the budget): whenever it
/// answers, its answer must be the walk's, count for count and in what the
/// next statement carries over; and it must answer nothing when it cannot
/// tell — a budget's worth of new items or more since an uncapped base, or a
/// base that no longer holds (a mark, an item read).
#[tokio::test]
async fn the_counts_count_from_the_entries_since_the_base_only_what_the_walk_would_count() {
    use tidings_server::store::{feed as store, horizon};
    let (f, token, teams) = reader_of_team_and_quiet().await;
    let api = f.api();
    let user = f.app.user(&token);
    let tenant = f.tenant.uuid();
    let pool = &f.pool;
    let teams = &teams;
    // The walk from the floors, with no base: what the counts must be.
    let walked = || async move {
        let horizon = horizon::read_feed_horizons(pool)
            .await
            .expect("horizon")
            .of(tenant);
        let (status, walk) = store::read_status(pool, tenant, "u", teams, horizon, None)
            .await
            .expect("walked counts");
        (status, walk, horizon)
    };
    let carried = |base: store::CountsBase, horizon: i64| async move {
        store::read_status_carried(pool, tenant, "u", teams, horizon, &base)
            .await
            .expect("carried counts")
    };
    // Counted from the entries since `base`: the walk's answer, and its base.
    let counted = |base: store::CountsBase, why: &'static str| async move {
        let (status, walk, horizon) = walked().await;
        let (c_status, c_walk) = carried(base, horizon)
            .await
            .unwrap_or_else(|| panic!("{why}: the entries since the base tell"));
        assert_eq!(c_status.marks, status.marks, "{why}: marks");
        assert_eq!(c_status.badges, status.badges, "{why}: badges");
        assert_eq!(c_walk.next, walk.next, "{why}: what the next one carries");
        assert!(c_walk.carried_over);
        (c_status.badges, c_walk.next)
    };
    // Not counted from the base: the walk's badges and base.
    let not_counted = |base: store::CountsBase, why: &'static str| async move {
        let (status, walk, horizon) = walked().await;
        assert!(carried(base, horizon).await.is_none(), "{why}: walk");
        (status.badges, walk.next)
    };
    let counts = |b: store::Badges| (b.unread, b.unseen, b.capped);
    let invoice = |n: usize| {
        alert()
            .entity(&format!("inv-{n}"))
            .recipients(&["u"])
            .subject("Invoice overdue")
            .build()
    };

    let first = post_batch(&api, "team", 5).await;
    let (status, walk, _) = walked().await;
    assert_eq!(counts(status.badges), (5, 5, false));
    let mut base = walk.next;

    let (badges, next) = counted(base, "nothing new").await;
    assert_eq!(counts(badges), (5, 5, false));
    base = next;
    post_batch(&api, "team", 2).await;
    api.create_alert(&invoice(1)).expect(202).await;
    until_all_served().await;
    let (badges, next) = counted(base, "some new, an alert among them").await;
    assert_eq!(counts(badges), (8, 8, false));
    base = next;

    // Marks move the floors: the base no longer holds.
    user.mark_seen(&up_to(first[2]["cursor"].as_str()))
        .expect(200)
        .await;
    let (badges, next) = not_counted(base, "a mark").await;
    assert_eq!(counts(badges), (8, 5, false));
    base = next;
    post_batch(&api, "team", 1).await;
    let (badges, next) = counted(base, "new above floors that differ").await;
    assert_eq!(counts(badges), (9, 6, false));
    base = next;

    // An item read one by one changes the budget: the base no longer holds.
    user.mark_item_read(first[4]["id"].as_i64().expect("id"))
        .expect(200)
        .await;
    let (badges, next) = not_counted(base, "an item read").await;
    assert_eq!(counts(badges), (8, 5, false));
    base = next;
    post_batch(&api, "team", 1).await;
    api.create_alert(&invoice(2)).expect(202).await;
    until_all_served().await;
    let (badges, next) = counted(base, "new after an item read").await;
    assert_eq!(counts(badges), (10, 7, false));
    base = next;

    // k = the budget: cap + 1 + the one item read one by one = 1,002. One
    // fewer new items than k: counted, and capped.
    let budget = base.budget;
    assert_eq!(budget, i64::from(tidings_core::BADGE_CAP) + 2);
    post_batch(&api, "team", 1000).await;
    post_batch(&api, "team", 1).await;
    let (badges, next) = counted(base, "k - 1 new").await;
    assert_eq!(counts(badges), (1000, 1000, true));
    base = next;
    // A capped base counts nothing more, and needs no count.
    post_batch(&api, "team", 3).await;
    let (badges, next) = counted(base, "new above a capped base").await;
    assert_eq!(counts(badges), (1000, 1000, true));
    base = next;

    // Exactly k, then more than k, new items since an uncapped base: the
    // entries since it cannot tell the unseen from the unread count apart.
    for (new, why) in [(1001, "exactly k new"), (1003, "more than k new")] {
        user.mark_read(&up_to(None)).expect(200).await;
        let (badges, next) = not_counted(base, "a mark").await;
        assert_eq!(counts(badges), (0, 0, false));
        base = next;
        assert_eq!(base.budget, i64::from(tidings_core::BADGE_CAP) + 1);
        post_batch(&api, "team", 1000).await;
        post_batch(&api, "team", new - 1000).await;
        let (badges, next) = not_counted(base, why).await;
        assert_eq!(counts(badges), (1000, 1000, true));
        base = next;
    }
}

/// The counts after a budget's worth of new items or more since the base
/// cannot come from the entries since it; the service then answers with the
/// statement that walks (one statement, one snapshot), so the counts stay
/// exact whichever counted.
#[tokio::test]
async fn counts_stay_exact_when_more_came_since_the_base_than_its_budget() {
    let (f, token) = member_of("team", "u").await;
    let api = f.api();
    let user = f.app.user(&token);
    let counts = || async { user.counts().expect(200).await };
    let first = post_batch(&api, "team", 4).await;
    assert_eq!(
        counts().await,
        json!({"unread": 4, "unseen": 4, "capped": false}),
        "first read: walked"
    );
    user.mark_seen(&up_to(first[1]["cursor"].as_str()))
        .expect(200)
        .await;
    assert_eq!(
        counts().await,
        json!({"unread": 4, "unseen": 2, "capped": false}),
        "after a mark: counted since the base the mark's answer walked"
    );
    post_batch(&api, "team", 3).await;
    assert_eq!(
        counts().await,
        json!({"unread": 7, "unseen": 5, "capped": false}),
        "three new: counted since the base"
    );
    // k = the budget (cap + 1): the counts cannot tell, the walk answers.
    post_batch(&api, "team", 1000).await;
    post_batch(&api, "team", 1).await;
    assert_eq!(
        counts().await,
        json!({"unread": 1000, "unseen": 1000, "capped": true}),
        "k new: walked from the base"
    );
    user.mark_read(&up_to(first[3]["cursor"].as_str()))
        .expect(200)
        .await;
    assert_eq!(
        counts().await,
        json!({"unread": 1000, "unseen": 1000, "capped": true}),
        "still a thousand and more above the new read mark"
    );
    user.mark_read(&up_to(None)).expect(200).await;
    assert_eq!(
        counts().await,
        json!({"unread": 0, "unseen": 0, "capped": false})
    );
    post_batch(&api, "team", 2).await;
    assert_eq!(
        counts().await,
        json!({"unread": 2, "unseen": 2, "capped": false}),
        "counted since the base"
    );
}

/// The user's stored counts base (`feed_state.counts_base`), as the array
/// `CountsBase::param` writes, if any.
async fn stored_counts_base(pool: &PgPool, tenant: uuid::Uuid, user: &str) -> Option<Vec<i64>> {
    sqlx::query_scalar("SELECT counts_base FROM feed_state WHERE tenant_id = $1 AND user_id = $2")
        .bind(tenant)
        .bind(user)
        .fetch_optional(pool)
        .await
        .expect("stored base")
        .flatten()
}

/// Whether the user's stored counts base, if any, was counted under the
/// user's current watermarks (a base stored after a mark may be; one from
/// before it may not).
async fn stored_base_is_current(pool: &PgPool, tenant: uuid::Uuid, user: &str) -> bool {
    sqlx::query_scalar(
        "SELECT counts_base IS NULL
                OR counts_base[2:5] = ARRAY[seen_tx, seen_id, read_tx, read_id]
         FROM feed_state WHERE tenant_id = $1 AND user_id = $2",
    )
    .bind(tenant)
    .bind(user)
    .fetch_one(pool)
    .await
    .expect("stored base")
}

/// A user's first read on an instance starts from the counts base another
/// instance stored in the database after a long walk
/// (`store::feed::stored_base`), and is exact whatever changed since: an item
/// read (the stored base no longer holds and is replaced), a mark (which drops
/// it), a join (other teams: it is not handed over). Each check reads through
/// a new instance, whose caches are empty, so the stored base is all it has.
#[tokio::test]
async fn a_first_read_on_a_new_instance_starts_from_the_stored_counts_base() {
    let f = TenantFixture::spawn().await;
    let (tenant, pool) = (f.tenant.uuid(), f.pool.clone());
    let api = f.api();
    api.put_member("team", "u").expect(201).await;
    let token = f.token("u").await;
    let events = post_batch(&api, "team", 300).await;
    // (unread, unseen) from a new instance's first page and then its counts,
    // with how many of the two carried a base over.
    let first_read = || async {
        let app = TestApp::spawn_on(&f.db.url, AppOptions::default())
            .await
            .expect("instance");
        let user = app.user(&token);
        let page = user.feed("").expect(200).await;
        let c = user.counts().expect(200).await;
        assert_eq!(
            (&page["unread_count"], &page["unseen_count"]),
            (&c["unread"], &c["unseen"]),
            "the first page and the counts agree"
        );
        let counts = (
            c["unread"].as_i64().expect("unread"),
            c["unseen"].as_i64().expect("unseen"),
        );
        (counts, counts_carried_over(&app).await)
    };

    // The first read ever walks 300 entries from the floors and stores its base.
    assert_eq!(stored_counts_base(&pool, tenant, "u").await, None);
    assert_eq!(first_read().await, ((300, 300), 1));
    assert!(
        eventually(Duration::from_secs(5), || async {
            stored_counts_base(&pool, tenant, "u").await.is_some()
        })
        .await,
        "a read that walked 300 entries stores its base"
    );
    let stored = stored_counts_base(&pool, tenant, "u").await.expect("base");
    // A new instance's first page and counts both carry it over.
    assert_eq!(first_read().await, ((300, 300), 2));
    post_batch(&api, "team", 2).await;
    assert_eq!(
        first_read().await,
        ((302, 302), 2),
        "and add what came since"
    );

    // An item read changes the budget: the stored base no longer holds, the
    // first read walks, and replaces it with one that does.
    f.app
        .user(&token)
        .mark_item_read(events[10]["id"].as_i64().expect("id"))
        .expect(200)
        .await;
    let (counts, _) = first_read().await;
    assert_eq!(counts, (301, 301));
    assert!(
        eventually(Duration::from_secs(5), || async {
            stored_counts_base(&pool, tenant, "u")
                .await
                .is_some_and(|b| b != stored)
        })
        .await,
        "the stale base is replaced"
    );
    assert_eq!(first_read().await, ((301, 301), 2));

    // A join: the base was counted with other teams and is not handed over.
    api.put_member("other", "u").expect(201).await;
    post_batch(&api, "other", 4).await;
    assert_eq!(first_read().await.0, (305, 305));

    // A mark drops the stored base in its own statement (the status it
    // answers may store a new one, counted under the new watermarks).
    let before_mark = stored_counts_base(&pool, tenant, "u").await;
    f.app
        .user(&token)
        .mark_seen(&up_to(events[99]["cursor"].as_str()))
        .expect(200)
        .await;
    let after_mark = stored_counts_base(&pool, tenant, "u").await;
    assert_ne!(after_mark, before_mark);
    assert!(stored_base_is_current(&pool, tenant, "u").await);
    assert_eq!(first_read().await.0, (305, 206));
    assert!(stored_base_is_current(&pool, tenant, "u").await);
    f.app.user(&token).mark_read(&up_to(None)).expect(200).await;
    assert!(stored_base_is_current(&pool, tenant, "u").await);
    assert_eq!(first_read().await.0, (0, 0));
}
