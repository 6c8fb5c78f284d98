//! Setups several test files share, made of API calls only, and the bodies
//! they send.

use serde_json::{json, Value};
use sqlx::PgPool;

use crate::{
    client::{position, TenantApi},
    sql::until_served,
    AppOptions, TestApp, TestDb, TestTenant,
};

/// Puts `user` with this email address (or none), named after its id.
pub async fn user_with_email(api: &TenantApi<'_>, user: &str, email: Option<&str>) {
    api.put_user(user, &json!({"email": email, "display_name": user}))
        .expect(200)
        .await;
}

/// A server on a fresh database with one tenant: how most tests begin.
pub struct TenantFixture {
    pub app: TestApp,
    pub db: TestDb,
    /// For [`crate::sql`].
    pub pool: PgPool,
    pub tenant: TestTenant,
}

impl TenantFixture {
    pub async fn spawn() -> TenantFixture {
        TenantFixture::spawn_with(AppOptions::default()).await
    }

    pub async fn spawn_with(opts: AppOptions) -> TenantFixture {
        let (app, db) = TestApp::spawn_with(opts).await.expect("spawn");
        let pool = db.pool().await.expect("pool");
        let tenant = app.create_tenant().await;
        TenantFixture {
            app,
            db,
            pool,
            tenant,
        }
    }

    /// The server-to-server API with the tenant's key.
    pub fn api(&self) -> TenantApi<'_> {
        self.app.tenant(&self.tenant)
    }

    /// A one-hour token for `user` of the tenant.
    pub async fn token(&self, user: &str) -> String {
        self.app.user_token(&self.tenant, user).await
    }
}

/// A tenant whose `user` is a member of `team`, and a token for that user.
pub async fn member_of(team: &str, user: &str) -> (TenantFixture, String) {
    member_of_with(AppOptions::default(), team, user).await
}

/// [`member_of`] on a server started with `opts`.
pub async fn member_of_with(opts: AppOptions, team: &str, user: &str) -> (TenantFixture, String) {
    let f = TenantFixture::spawn_with(opts).await;
    f.api().put_member(team, user).expect(201).await;
    let token = f.token(user).await;
    (f, token)
}

/// Posts an event of type `kind` to `team` and returns the server's answer.
/// It may not be in feeds yet: a transaction still open below it holds it
/// back (ARCHITECTURE.md, invariant 2).
pub async fn post_event(api: &TenantApi<'_>, team: &str, kind: &str) -> Value {
    api.create_event(&json!({"team_id": team, "type": kind, "payload": {"n": kind}}))
        .expect(201)
        .await
}

/// [`post_event`], then waits until feeds serve the event.
pub async fn post_served_event(api: &TenantApi<'_>, team: &str, kind: &str) -> Value {
    let event = post_event(api, team, kind).await;
    until_served(position(&event["cursor"]).tx).await;
    event
}

/// The body of `POST /v1/alerts` (and of a NATS inbox message, which is the
/// same body): by default an `invoice.overdue` alert about `inv-42` for `ann`,
/// in-app, with no subject and an empty payload; each setter replaces one
/// part. [`AlertBody::build`] gives the JSON, which a test may still bend
/// into something the API must refuse.
///
/// ```text
/// api.create_alert(&alert().recipients(&["ann", "bob"]).channels(&["email"]).build())
/// ```
#[derive(Debug, Clone)]
pub struct AlertBody {
    event_type: String,
    entity_id: String,
    audience: Audience,
    channels: Vec<String>,
    subject: Option<String>,
    payload: Value,
    category: Option<String>,
    delivery: Option<Value>,
}

/// Whom an alert addresses: named users, or every member of a team.
#[derive(Debug, Clone)]
enum Audience {
    Recipients(Vec<String>),
    Team(String),
}

/// An [`AlertBody`] with the defaults.
pub fn alert() -> AlertBody {
    AlertBody {
        event_type: "invoice.overdue".into(),
        entity_id: "inv-42".into(),
        audience: Audience::Recipients(vec!["ann".into()]),
        channels: vec!["in_app".into()],
        subject: None,
        payload: json!({}),
        category: None,
        delivery: None,
    }
}

impl AlertBody {
    pub fn event_type(mut self, event_type: &str) -> Self {
        self.event_type = event_type.into();
        self
    }

    pub fn entity(mut self, entity_id: &str) -> Self {
        self.entity_id = entity_id.into();
        self
    }

    /// About an entity no other alert names (`inv_<uuid>`), so that every
    /// notification key is new.
    pub fn fresh_entity(self) -> Self {
        let entity_id = format!("inv_{}", uuid::Uuid::new_v4().simple());
        self.entity(&entity_id)
    }

    /// Named recipients (in place of a team).
    pub fn recipients<S: AsRef<str>>(mut self, recipients: &[S]) -> Self {
        self.audience =
            Audience::Recipients(recipients.iter().map(|r| r.as_ref().to_owned()).collect());
        self
    }

    /// Every member of `team` (in place of named recipients).
    pub fn team(mut self, team: &str) -> Self {
        self.audience = Audience::Team(team.into());
        self
    }

    pub fn channels(mut self, channels: &[&str]) -> Self {
        self.channels = channels.iter().map(|c| (*c).to_owned()).collect();
        self
    }

    pub fn subject(mut self, subject: &str) -> Self {
        self.subject = Some(subject.into());
        self
    }

    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = payload;
        self
    }

    /// The category the alert names (`PUT /v1/categories/{key}`).
    pub fn category(mut self, category: &str) -> Self {
        self.category = Some(category.into());
        self
    }

    /// The alert's delivery rules (`{"email": {"delay": …, "unless": …}}`).
    pub fn delivery(mut self, delivery: Value) -> Self {
        self.delivery = Some(delivery);
        self
    }

    pub fn build(self) -> Value {
        let mut body = json!({
            "event_type": self.event_type,
            "entity_id": self.entity_id,
            "channels": self.channels,
            "payload": self.payload,
        });
        match self.audience {
            Audience::Recipients(recipients) => body["recipients"] = json!(recipients),
            Audience::Team(team) => body["team_id"] = json!(team),
        }
        if let Some(subject) = self.subject {
            body["subject"] = json!(subject);
        }
        if let Some(category) = self.category {
            body["category"] = json!(category);
        }
        if let Some(delivery) = self.delivery {
            body["delivery"] = delivery;
        }
        body
    }
}

/// `at` as a local time (`HH:MM:SS`) in Asia/Kolkata (UTC+05:30, no
/// daylight saving): for quiet hours, which are kept in the user's zone.
pub fn kolkata(at: chrono::DateTime<chrono::Utc>) -> String {
    (at + chrono::Duration::minutes(330))
        .format("%H:%M:%S")
        .to_string()
}
