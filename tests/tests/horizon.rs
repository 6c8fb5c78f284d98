//! One tenant cannot hold another back (ARCHITECTURE.md, invariant 11): a
//! tenant's feed lags only its own feed writes still in flight, never another
//! tenant's open transaction or a session of another database.

use tidings_tests::{
    client::{item_ids, position},
    member_of, post_event, sql, TenantFixture, TestTenant,
};

/// A second tenant on the fixture's server, with `user` in `team` and a token.
async fn other_tenant(f: &TenantFixture, team: &str, user: &str) -> (TestTenant, String) {
    let b = f.app.create_tenant().await;
    f.app.tenant(&b).put_member(team, user).expect(201).await;
    let token = f.app.user_token(&b, user).await;
    (b, token)
}

#[tokio::test]
async fn another_tenants_open_feed_write_does_not_delay_a_tenants_feed() {
    let (f, a_token) = member_of("team", "a-reader").await;
    let (b, b_token) = other_tenant(&f, "team", "b-reader").await;

    // Tenant A: a feed write that stays open (it took A's feed lock and its
    // transaction id before B writes anything).
    let (a_open, a_id, _) = sql::event_in_open_transaction(&f.pool, &f.tenant, "team", "a").await;
    // A's next event commits, but sits above A's open write: held back.
    let a_later = post_event(&f.api(), "team", "a-later").await;

    // Tenant B's event is in B's feed at once, and counted.
    let b_event = post_event(&f.app.tenant(&b), "team", "b").await;
    let b_reader = f.app.user(&b_token);
    let page = b_reader.feed("").expect(200).await;
    assert_eq!(
        item_ids(&page),
        vec![b_event["id"].as_i64().expect("id")],
        "{page}"
    );
    assert_eq!(b_reader.counts().expect(200).await["unread"], 1);

    // A's own feed still waits for A's open write: nothing is skipped.
    let a_reader = f.app.user(&a_token);
    assert_eq!(
        item_ids(&a_reader.feed("").expect(200).await),
        Vec::<i64>::new()
    );

    a_open.commit().await.expect("commit A");
    let page = a_reader.feed("").expect(200).await;
    assert_eq!(
        item_ids(&page),
        vec![a_later["id"].as_i64().expect("id"), a_id],
        "{page}"
    );
}

#[tokio::test]
async fn a_transaction_in_another_database_does_not_delay_the_feed() {
    let (f, token) = member_of("team", "reader").await;

    // A session of another database of the cluster holds a transaction id.
    let (elsewhere, held) = sql::xid_held_in_another_database().await;

    let event = post_event(&f.api(), "team", "fresh").await;
    assert!(
        position(&event["cursor"]).tx > held,
        "the event's transaction is the newer one"
    );
    let page = f.app.user(&token).feed("").expect(200).await;
    assert_eq!(
        item_ids(&page),
        vec![event["id"].as_i64().expect("id")],
        "{page}"
    );

    drop(elsewhere);
}
