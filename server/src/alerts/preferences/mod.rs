//! Preferences: a tenant's categories, users' and the tenant's sparse
//! settings rows, one-click unsubscribe, and the settings a fan-out applies
//! (docs/design/preferences.md). Which setting applies is decided by one
//! pure function, `tidings_core::preferences::resolve`, the same one the
//! inbox page runs as WebAssembly; this module reads and writes the rows
//! around it.

pub mod token;

use std::collections::HashMap;

use sqlx::PgConnection;
use tidings_core::{Category, Channel, EventType, Rule, Scope, Setting, Target, UserId};
use uuid::Uuid;

use super::plan::Settings;
use crate::{
    db::PrimaryPool,
    store::preferences::{self as store, CategoryRow, SettingColumns, SettingRow},
};

/// Who a settings row belongs to.
#[derive(Debug, Clone, Copy)]
pub enum Owner<'a> {
    User(&'a UserId),
    /// The tenant's defaults.
    Tenant,
}

impl Owner<'_> {
    fn user_id(&self) -> Option<&str> {
        match self {
            Owner::User(u) => Some(u.as_str()),
            Owner::Tenant => None,
        }
    }
}

/// Who wrote a row (column `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// An API-key call on the user's behalf.
    Api,
    /// The user, with their own token.
    User,
    /// The unsubscribe link of an email.
    OneClick,
    /// The tenant's defaults.
    Admin,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Api => "api",
            Source::User => "user",
            Source::OneClick => "one_click",
            Source::Admin => "admin",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PreferencesError {
    #[error("no category {0:?}; create it with PUT /v1/categories/{{key}}")]
    UnknownCategory(String),
    #[error("event type {event_type:?} belongs to category {category:?}; an event type is in one category")]
    EventTypeTaken {
        event_type: String,
        category: String,
    },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Whether the schema has the preference tables. False only in a test build
/// standing in for the version before them (`test_hooks::
/// WITHOUT_LAST_MIGRATION`, the rolling upgrade test): that version had no
/// preferences, so it reads none.
pub fn in_schema() -> bool {
    !crate::db::stands_in_for_previous_version()
}

/// A category to store (`PUT /v1/categories/{key}`).
#[derive(Debug, Clone)]
pub struct CategorySpec {
    pub label: String,
    pub critical: bool,
    pub defaults: Vec<(Channel, Setting)>,
    pub event_types: Vec<EventType>,
}

/// Creates or replaces category `key` and makes `event_types` exactly its
/// event types, in one transaction. Answers whether it was created.
pub async fn put_category(
    pool: &PrimaryPool,
    tenant: Uuid,
    key: &str,
    spec: &CategorySpec,
) -> Result<(bool, CategoryRow), PreferencesError> {
    let defaults: serde_json::Map<String, serde_json::Value> = spec
        .defaults
        .iter()
        .map(|(c, s)| (c.as_str().to_owned(), s.as_str().into()))
        .collect();
    let event_types: Vec<String> = spec.event_types.iter().map(|e| e.to_string()).collect();
    let mut tx = pool.begin().await?;
    let created = store::upsert_category(
        &mut *tx,
        tenant,
        key,
        &spec.label,
        spec.critical,
        &defaults.into(),
    )
    .await?;
    let taken = store::replace_category_event_types(&mut tx, tenant, key, &event_types).await?;
    if let Some((event_type, category)) = taken.into_iter().next() {
        return Err(PreferencesError::EventTypeTaken {
            event_type,
            category,
        });
    }
    let row = store::get_category(&mut *tx, tenant, key)
        .await?
        .ok_or_else(|| PreferencesError::UnknownCategory(key.to_owned()))?;
    tx.commit().await?;
    Ok((created, row))
}

/// The core's view of a stored category.
pub fn category_of(row: &CategoryRow) -> Category {
    let mut category = Category {
        key: row.key.clone(),
        critical: row.critical,
        ..Category::default()
    };
    for channel in Channel::ALL {
        let setting = row
            .defaults
            .get(channel.as_str())
            .and_then(|v| v.as_str())
            .and_then(|s| s.parse().ok());
        category.set_default(channel, setting);
    }
    category
}

/// The core's view of a stored row; `None` for a row the schema's checks
/// should have kept out.
pub fn rule_of(row: &SettingRow) -> Option<Rule> {
    let scope: Scope = row.scope.parse().ok()?;
    let channel = match row.channel.as_str() {
        "*" => None,
        c => Some(c.parse().ok()?),
    };
    let setting: Setting = row.setting.parse().ok()?;
    Rule::new(scope, Some(&row.scope_key), channel, setting, row.locked).ok()
}

/// One change of a settings row: `setting: None` removes the row.
#[derive(Debug, Clone)]
pub struct SettingChange {
    pub rule: Rule,
    pub remove: bool,
}

fn columns<'a>(rules: impl Iterator<Item = &'a Rule>) -> SettingColumns {
    let mut c = SettingColumns::default();
    for r in rules {
        c.scopes.push(r.scope.as_str());
        c.keys.push(r.key.clone());
        c.channels.push(r.channel.map_or("*", Channel::as_str));
        c.settings.push(r.setting.as_str());
        c.locked.push(r.locked);
    }
    c
}

/// PATCH: writes the rows that have a setting, removes those that have none,
/// in one transaction.
pub async fn patch_settings(
    pool: &PrimaryPool,
    tenant: Uuid,
    owner: Owner<'_>,
    changes: &[SettingChange],
    source: Source,
) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    let removed = columns(changes.iter().filter(|c| c.remove).map(|c| &c.rule));
    let written = columns(changes.iter().filter(|c| !c.remove).map(|c| &c.rule));
    store::delete_settings(&mut *tx, tenant, owner.user_id(), &removed).await?;
    store::upsert_settings(&mut *tx, tenant, owner.user_id(), &written, source.as_str()).await?;
    tx.commit().await
}

/// PUT: the owner's rows become exactly `rules`.
pub async fn replace_settings(
    pool: &PrimaryPool,
    tenant: Uuid,
    owner: Owner<'_>,
    rules: &[Rule],
    source: Source,
) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    store::delete_all_settings(&mut *tx, tenant, owner.user_id()).await?;
    store::upsert_settings(
        &mut *tx,
        tenant,
        owner.user_id(),
        &columns(rules.iter()),
        source.as_str(),
    )
    .await?;
    tx.commit().await
}

/// The tenant's default rules.
pub async fn tenant_defaults(pool: &PrimaryPool, tenant: Uuid) -> sqlx::Result<Vec<Rule>> {
    Ok(store::list_settings(pool, tenant, &[])
        .await?
        .iter()
        .filter_map(rule_of)
        .collect())
}

/// One category of a user's grid: the resolved setting of each channel.
#[derive(Debug, Clone)]
pub struct GridRow {
    pub category: CategoryRow,
    pub cells: Vec<(Channel, tidings_core::Resolution)>,
}

/// Everything a preference panel shows and needs to resolve as the user
/// toggles: the grid (categories × channels, resolved, with the deciding
/// level), the user's own rows and the tenant's defaults.
#[derive(Debug, Clone)]
pub struct Grid {
    pub rows: Vec<GridRow>,
    pub user_rules: Vec<Rule>,
    pub tenant_rules: Vec<Rule>,
}

pub async fn grid(pool: &PrimaryPool, tenant: Uuid, user: &UserId) -> sqlx::Result<Grid> {
    let categories = store::list_categories(pool, tenant).await?;
    let rows = store::list_settings(pool, tenant, &[user.as_str()]).await?;
    let (tenant_rows, user_rows): (Vec<&SettingRow>, Vec<&SettingRow>) =
        rows.iter().partition(|r| r.user_id.is_none());
    let user_rules: Vec<Rule> = user_rows.into_iter().filter_map(rule_of).collect();
    let tenant_rules: Vec<Rule> = tenant_rows.into_iter().filter_map(rule_of).collect();
    let rows = categories
        .into_iter()
        .map(|row| {
            let category = category_of(&row);
            let cells = Channel::ALL
                .into_iter()
                .map(|channel| {
                    let target = Target {
                        event_type: None,
                        category: Some(&category),
                        channel,
                    };
                    let resolved = tidings_core::resolve(&target, &user_rules, &tenant_rules);
                    (channel, resolved)
                })
                .collect();
            GridRow {
                category: row,
                cells,
            }
        })
        .collect();
    Ok(Grid {
        rows,
        user_rules,
        tenant_rules,
    })
}

/// The one-click unsubscribe: `what.category` × `what.channel` off for the
/// user, recorded as one-click. Writing the same row again changes nothing,
/// so a second click (or a mail client's retry) is harmless. False when the
/// category no longer exists: nothing is written.
pub async fn unsubscribe(pool: &PrimaryPool, what: &token::Unsubscribe) -> sqlx::Result<bool> {
    if store::get_category(pool, what.tenant, &what.category)
        .await?
        .is_none()
    {
        return Ok(false);
    }
    let rule = Rule {
        scope: Scope::Category,
        key: what.category.clone(),
        channel: Some(what.channel),
        setting: Setting::Off,
        locked: false,
    };
    store::upsert_settings(
        pool,
        what.tenant,
        Some(what.user.as_str()),
        &columns(std::iter::once(&rule)),
        Source::OneClick.as_str(),
    )
    .await?;
    Ok(true)
}

/// The category an alert is sent under: the one it names (which must
/// exist), else its event type's, else none.
pub async fn category_for_alert(
    conn: &mut PgConnection,
    tenant: Uuid,
    named: Option<&str>,
    event_type: &EventType,
) -> Result<Option<Category>, PreferencesError> {
    if !in_schema() {
        return Ok(None);
    }
    match store::find_alert_category(&mut *conn, tenant, named, event_type).await? {
        Some(row) => Ok(Some(category_of(&row))),
        None => match named {
            Some(key) => Err(PreferencesError::UnknownCategory(key.to_owned())),
            None => Ok(None),
        },
    }
}

/// The category a background expansion batch of `alert_id` applies: the one
/// stored with the alert when it was accepted.
pub async fn category_of_stored_alert(
    conn: &mut PgConnection,
    tenant: Uuid,
    alert_id: Uuid,
) -> sqlx::Result<Option<Category>> {
    if !in_schema() {
        return Ok(None);
    }
    Ok(
        store::find_stored_alert_category(&mut *conn, tenant, alert_id)
            .await?
            .as_ref()
            .map(category_of),
    )
}

/// The categories of stored alerts, by `(tenant, alert)`, in one statement
/// (alerts without one, or gone, are absent).
pub async fn categories_of_stored_alerts(
    conn: &mut PgConnection,
    alerts: &[(Uuid, Uuid)],
) -> sqlx::Result<HashMap<(Uuid, Uuid), Category>> {
    if !in_schema() || alerts.is_empty() {
        return Ok(HashMap::new());
    }
    let (tenants, ids): (Vec<Uuid>, Vec<Uuid>) = alerts.iter().copied().unzip();
    Ok(
        store::find_stored_alert_categories(&mut *conn, &tenants, &ids)
            .await?
            .into_iter()
            .map(|row| ((row.tenant_id, row.alert_id), category_of(&row.category)))
            .collect(),
    )
}

/// The settings a fan-out applies: for each of `recipients` × `channels`
/// whose resolved setting is not `on`, that resolution. Empty, without a
/// statement, for a critical category (it bypasses every setting).
pub async fn settings_for_fanout(
    conn: &mut PgConnection,
    tenant: Uuid,
    event_type: &EventType,
    category: Option<&Category>,
    recipients: &[UserId],
    channels: &[Channel],
) -> sqlx::Result<Settings> {
    let mut settings = Settings::new();
    if !in_schema() || category.is_some_and(|c| c.critical) || recipients.is_empty() {
        return Ok(settings);
    }
    let ids: Vec<&str> = recipients.iter().map(UserId::as_str).collect();
    let rows = store::list_settings(&mut *conn, tenant, &ids).await?;
    let has_defaults = category.is_some_and(|c| c.defaults.iter().any(Option::is_some));
    if rows.is_empty() && !has_defaults {
        return Ok(settings);
    }
    let mut tenant_rules = Vec::new();
    let mut user_rules: HashMap<&str, Vec<Rule>> = HashMap::new();
    for row in &rows {
        let Some(rule) = rule_of(row) else { continue };
        match &row.user_id {
            None => tenant_rules.push(rule),
            Some(user) => user_rules.entry(user.as_str()).or_default().push(rule),
        }
    }
    for recipient in recipients {
        let own = user_rules
            .get(recipient.as_str())
            .map_or(&[][..], Vec::as_slice);
        for &channel in channels {
            let target = Target {
                event_type: Some(event_type.as_str()),
                category,
                channel,
            };
            let resolved = tidings_core::resolve(&target, own, &tenant_rules);
            if resolved.setting != Setting::On {
                settings.insert((recipient.clone(), channel), resolved);
            }
        }
    }
    Ok(settings)
}
