//! The whole path through real parts: POST /v1/alerts → notifications and outbox
//! in one transaction → workers inside `tidings serve` → a webhook receiver that
//! verifies with the reference Standard Webhooks library, a real SMTP server, and
//! the recipient's feed.

use std::{collections::HashMap, time::Duration};

use serde_json::{json, Value};
use tidings_tests::{
    alert, eventually, user_with_email, worker_env, AppOptions, Receiver, WebhookFixture,
};

const RECIPIENTS: [&str; 3] = ["ann", "bob", "cat"];

struct World {
    hooks: WebhookFixture,
    smtp: Receiver,
    /// The alert the sender posts: invoice 42, to the three users on every
    /// channel.
    overdue: Value,
}

/// A server with its workers, a tenant with three users who have email
/// addresses, one webhook endpoint, both receivers running, and the alert.
async fn world() -> World {
    let smtp = Receiver::smtp(0).await;
    let mut env = worker_env(&[]);
    env.push(("TIDINGS_SMTP_URL".into(), smtp.smtp_url()));
    let hooks = WebhookFixture::start(
        None,
        AppOptions {
            env,
            ..Default::default()
        },
    )
    .await;
    for user in RECIPIENTS {
        user_with_email(&hooks.api(), user, Some(&format!("{user}@example.com"))).await;
    }
    hooks.endpoint("/hook").await;
    let overdue = alert()
        .recipients(&RECIPIENTS)
        .channels(&["email", "in_app", "webhook"])
        .subject("Invoice 42 is overdue")
        .payload(json!({"amount": "120.00", "currency": "EUR"}))
        .build();
    World {
        hooks,
        smtp,
        overdue,
    }
}

/// Waits until the receivers hold 3 webhooks and 3 emails, then lets the workers
/// run a little longer so that a duplicate, if the system made one, would arrive.
async fn wait_for_deliveries(w: &World) {
    let arrived = eventually(Duration::from_secs(30), || async {
        w.hooks.receiver.received().len() >= 3 && w.smtp.received().len() >= 3
    })
    .await;
    assert!(
        arrived,
        "webhooks {:?}, emails {:?}; server log:\n{}",
        w.hooks.receiver.received(),
        w.smtp.received(),
        w.hooks.app.process.log()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
}

fn count_by<'a>(values: impl Iterator<Item = &'a str>) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for v in values {
        *counts.entry(v.to_string()).or_insert(0) += 1;
    }
    counts
}

#[tokio::test]
async fn an_alert_reaches_every_channel_once_with_its_key_as_idempotency_id() {
    let w = world().await;
    let (app, tenant) = (&w.hooks.app, &w.hooks.tenant);
    let accepted = w.hooks.api().create_alert(&w.overdue).expect(202).await;
    wait_for_deliveries(&w).await;

    let keys_of = |channel: &str| -> Vec<String> {
        accepted["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["channel"] == channel)
            .map(|d| d["key"].as_str().unwrap().to_string())
            .collect()
    };

    // Webhooks: verified by the reference library, webhook-id = notification key.
    let hooks = w.hooks.receiver.received();
    assert_eq!(hooks.len(), 3, "{hooks:?}");
    assert!(hooks.iter().all(|h| h["verified"] == true), "{hooks:?}");
    let mut ids: Vec<String> = hooks
        .iter()
        .map(|h| h["webhook_id"].as_str().unwrap().to_string())
        .collect();
    let mut expected = keys_of("webhook");
    ids.sort();
    expected.sort();
    assert_eq!(ids, expected);

    // Email: one per recipient, Message-ID derived from the key.
    let mails = w.smtp.received();
    assert_eq!(mails.len(), 3, "{mails:?}");
    for key in keys_of("email") {
        assert!(
            mails.iter().any(|m| m.to_string().contains(&key)),
            "no email carries a Message-ID from key {key}: {mails:?}"
        );
    }

    // In-app: in each recipient's feed, as an alert.
    for user in RECIPIENTS {
        let token = app.user_token(tenant, user).await;
        let served = eventually(Duration::from_secs(10), || async {
            let feed = app.user(&token).feed("").expect(200).await;
            feed["items"].as_array().is_some_and(|items| {
                items.len() == 1
                    && items[0]["source"] == "alert"
                    && items[0]["type"] == "invoice.overdue"
            })
        })
        .await;
        assert!(served, "{user}'s feed lacks the alert");
    }

    // And the alert's own record says so.
    let id = accepted["alert_id"].as_str().unwrap();
    let record = w.hooks.api().get_alert(id).expect(200).await;
    let statuses = count_by(
        record["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["status"].as_str().unwrap()),
    );
    assert_eq!(
        statuses,
        HashMap::from([("sent".to_string(), 9)]),
        "{record}"
    );
}

/// The sender retries 100 times at once: every key is received exactly once.
async fn hundred_concurrent_posts_deliver_once_per_key(idempotency_key: Option<&str>) {
    let w = std::sync::Arc::new(world().await);
    let mut posts = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let w = w.clone();
        let key = idempotency_key.map(str::to_string);
        posts.spawn(async move {
            let mut call = w.hooks.api().create_alert(&w.overdue);
            if let Some(key) = &key {
                call = call.idempotency_key(key);
            }
            // Idempotency-Key conflicts answer 409 while the first request is in flight.
            call.reply_one_of(&[202, 409]).await.status
        });
    }
    let mut statuses = Vec::new();
    while let Some(status) = posts.join_next().await {
        statuses.push(status.unwrap());
    }
    assert!(statuses.contains(&202));
    wait_for_deliveries(&w).await;

    let hooks = w.hooks.receiver.received();
    let per_id = count_by(hooks.iter().map(|h| h["webhook_id"].as_str().unwrap()));
    assert_eq!(per_id.len(), 3, "{per_id:?}");
    assert!(
        per_id.values().all(|n| *n == 1),
        "a webhook arrived twice: {per_id:?}"
    );
    let mails = w.smtp.received();
    assert_eq!(mails.len(), 3, "{mails:?}");
    for user in RECIPIENTS {
        let token = w.hooks.app.user_token(&w.hooks.tenant, user).await;
        let feed = w.hooks.app.user(&token).feed("").expect(200).await;
        assert!(
            feed["items"].as_array().unwrap().len() <= 1,
            "{user} got the alert twice: {feed}"
        );
    }
}

#[tokio::test]
async fn hundred_concurrent_identical_alerts_are_received_once_per_key() {
    hundred_concurrent_posts_deliver_once_per_key(None).await;
}

#[tokio::test]
async fn hundred_concurrent_identical_alerts_with_one_idempotency_key_are_received_once_per_key() {
    hundred_concurrent_posts_deliver_once_per_key(Some("inv-42-overdue")).await;
}
