//! Templates: what an email or an in-app item says for an event type
//! (docs/design/templates.md).
//!
//! A template is per tenant × event type × channel, with a variant per
//! locale. Saving one locale writes a new immutable version holding every
//! variant and publishes it; a delivery records the version published when
//! it was enqueued, so an edit never changes what is already in the outbox.
//! Every part is checked at save (it parses, names only vetted filters, and
//! renders within the sandbox's limits on the sample data), rendered at send
//! by the outbox worker (email) or at fan-out (in-app).

pub mod digest;
pub mod email;
pub mod engine;
pub mod locale;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use tidings_core::Channel;
use uuid::Uuid;

use crate::{
    db::PrimaryPool,
    store::{
        paging::{Page, PageRequest, TemplateKey},
        templates::{self as store, TemplateVersionRow},
    },
};
use email::BodyFormat;
use engine::{Part, RenderError};
use locale::Locale;

/// Bytes of one part's source.
pub const MAX_SOURCE_BYTES: usize = 64 * 1024;
/// Locale variants of one template.
pub const MAX_VARIANTS: usize = 50;

/// One locale's email template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmailContent {
    pub subject: String,
    /// HTML or MJML (`format`), autoescaped.
    pub html: String,
    /// Derived from the HTML when absent.
    pub text: Option<String>,
    pub format: BodyFormat,
}

/// One locale's in-app template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InAppContent {
    pub title: String,
    pub body: String,
    pub action_url: Option<String>,
}

/// One locale's variant of a template, of its channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Email(EmailContent),
    InApp(InAppContent),
}

impl Content {
    pub fn channel(&self) -> Channel {
        match self {
            Content::Email(_) => Channel::Email,
            Content::InApp(_) => Channel::InApp,
        }
    }

    /// The parts with their sources, in display order.
    fn parts(&self) -> Vec<(Part, &str)> {
        match self {
            Content::Email(e) => {
                let mut parts = vec![(Part::Subject, e.subject.as_str()), (Part::Html, &e.html)];
                if let Some(text) = &e.text {
                    parts.push((Part::Text, text));
                }
                parts
            }
            Content::InApp(i) => {
                let mut parts = vec![(Part::Title, i.title.as_str()), (Part::Body, &i.body)];
                if let Some(url) = &i.action_url {
                    parts.push((Part::ActionUrl, url));
                }
                parts
            }
        }
    }
}

/// A published, immutable version of a template.
#[derive(Debug, Clone)]
pub struct TemplateVersion {
    pub id: i64,
    pub event_type: String,
    pub channel: Channel,
    pub version: i32,
    pub variants: BTreeMap<String, Content>,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

impl TryFrom<TemplateVersionRow> for TemplateVersion {
    type Error = sqlx::Error;

    fn try_from(row: TemplateVersionRow) -> Result<Self, sqlx::Error> {
        let corrupt = |why: String| sqlx::Error::Decode(why.into());
        let channel: Channel = row
            .channel
            .parse()
            .map_err(|e: tidings_core::KeyError| corrupt(e.to_string()))?;
        let variants: BTreeMap<String, Content> =
            serde_json::from_value(row.variants.0).map_err(|e| corrupt(e.to_string()))?;
        Ok(TemplateVersion {
            id: row.id,
            event_type: row.event_type,
            channel,
            version: row.version,
            variants,
            created_at: row.created_at,
        })
    }
}

impl TemplateVersion {
    /// The variant for a recipient: the first locale of the fallback chain
    /// (user's, its language, the tenant's default, `en`) this version has,
    /// else its first variant (a template written only in `de` still sends).
    pub fn variant(
        &self,
        user: Option<&Locale>,
        tenant_default: Option<&Locale>,
    ) -> Option<(&str, &Content)> {
        locale::fallback_chain(user, tenant_default)
            .iter()
            .find_map(|tag| self.variants.get_key_value(tag.as_str()))
            .or_else(|| self.variants.iter().next())
            .map(|(tag, content)| (tag.as_str(), content))
    }
}

/// The recipient as templates see it (`recipient`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Recipient {
    pub id: String,
    pub display_name: Option<String>,
    pub locale: Option<String>,
    pub timezone: Option<String>,
}

/// Every variable a template may read.
#[derive(Debug, Clone, Serialize)]
pub struct Variables {
    pub payload: serde_json::Value,
    pub recipient: Recipient,
    pub event_type: String,
    pub entity_id: String,
    /// The alert's own subject.
    pub subject: Option<String>,
    /// The alert's category when it is not critical and unsubscribe links
    /// are on (`TIDINGS_PUBLIC_URL`); a critical one has no unsubscribe.
    pub category: Option<String>,
    /// Email only: the one-click unsubscribe link, when there is one.
    pub unsubscribe_url: Option<String>,
}

impl Variables {
    fn context(&self, locale: &str) -> minijinja::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.insert("locale".into(), locale.into());
        }
        minijinja::Value::from(minijinja::value::Serde(value))
    }
}

/// A rendered email: every email is sent as text and HTML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedEmail {
    pub subject: String,
    pub html: String,
    pub text: String,
    pub locale: String,
    pub fuel: u64,
}

/// A rendered in-app item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderedInApp {
    pub title: String,
    pub body: String,
    pub action_url: Option<String>,
    pub locale: String,
    pub template_version: i64,
}

/// Renders `content` (of locale `locale`) with `vars`: each part under the
/// sandbox; an email's HTML through MJML and the CSS inliner, its text
/// derived from the HTML when the template has none.
pub fn render_email(
    content: &EmailContent,
    locale: &str,
    vars: &Variables,
) -> Result<RenderedEmail, RenderError> {
    render_email_in(content, locale, &vars.context(locale))
}

/// [`render_email`] over any context: a notification's [`Variables`], or a
/// digest's (`digest::DigestVariables`).
pub fn render_email_in(
    content: &EmailContent,
    locale: &str,
    context: &minijinja::Value,
) -> Result<RenderedEmail, RenderError> {
    let subject = engine::render(Part::Subject, &content.subject, context)?;
    let html = engine::render(Part::Html, &content.html, context)?;
    let finished = email::finish_html(content.format, &html.output)
        .map_err(|message| RenderError::new(Part::Html, None, message))?;
    let (text, text_fuel) = match &content.text {
        Some(source) => {
            let text = engine::render(Part::Text, source, context)?;
            (text.output, text.fuel)
        }
        None => (email::text_from_html(&finished), 0),
    };
    Ok(RenderedEmail {
        // A subject is one line (other spaces, such as the narrow no-break
        // space of a French number, are kept).
        subject: subject
            .output
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
        html: finished,
        text,
        locale: locale.to_owned(),
        fuel: subject.fuel + html.fuel + text_fuel,
    })
}

pub fn render_in_app(
    content: &InAppContent,
    locale: &str,
    version: i64,
    vars: &Variables,
) -> Result<(RenderedInApp, u64), RenderError> {
    let context = vars.context(locale);
    let title = engine::render(Part::Title, &content.title, &context)?;
    let body = engine::render(Part::Body, &content.body, &context)?;
    let action_url = content
        .action_url
        .as_deref()
        .map(|source| engine::render(Part::ActionUrl, source, &context))
        .transpose()?;
    let fuel = title.fuel + body.fuel + action_url.as_ref().map_or(0, |u| u.fuel);
    Ok((
        RenderedInApp {
            title: title.output.trim().to_owned(),
            body: body.output,
            action_url: action_url.map(|u| u.output.trim().to_owned()),
            locale: locale.to_owned(),
            template_version: version,
        },
        fuel,
    ))
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// A part that does not parse, names an unknown filter, or fails on the
    /// sample data: the line is in the error.
    #[error("{0}")]
    Invalid(RenderError),
    #[error("{0}")]
    BadInput(String),
    #[error("no template for this event type and channel")]
    NotFound,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Sample variables for checks and previews: `payload` as given, a
/// recipient in `locale`.
pub fn sample_variables(
    event_type: &str,
    payload: serde_json::Value,
    recipient: Option<Recipient>,
) -> Variables {
    Variables {
        payload,
        recipient: recipient.unwrap_or_else(|| Recipient {
            id: "sample-user".into(),
            display_name: Some("Sample User".into()),
            locale: None,
            timezone: Some("UTC".into()),
        }),
        event_type: event_type.to_owned(),
        entity_id: "sample-entity".into(),
        subject: Some("Sample subject".into()),
        category: None,
        unsubscribe_url: None,
    }
}

/// Checks every part of `content`: parse and vetted names on every branch,
/// then a full render on `sample` within the limits.
pub fn check_content(
    content: &Content,
    locale: &str,
    sample: &Variables,
) -> Result<u64, TemplateError> {
    check_parts(content)?;
    let fuel = match content {
        Content::Email(e) => {
            render_email(e, locale, sample)
                .map_err(TemplateError::Invalid)?
                .fuel
        }
        Content::InApp(i) => {
            render_in_app(i, locale, 0, sample)
                .map_err(TemplateError::Invalid)?
                .1
        }
    };
    Ok(fuel)
}

/// Checks each part's length, syntax and names (vetted filters and tests,
/// on every branch), before any render.
pub fn check_parts(content: &Content) -> Result<(), TemplateError> {
    for (part, source) in content.parts() {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(TemplateError::BadInput(format!(
                "{} is longer than {MAX_SOURCE_BYTES} bytes",
                part.name()
            )));
        }
        engine::check(part, source).map_err(TemplateError::Invalid)?;
    }
    Ok(())
}

/// Saves `content` as the `locale` variant of a template: a new version
/// with the other locales of the published one, published at once.
pub async fn save(
    pool: &PrimaryPool,
    tenant: Uuid,
    event_type: &str,
    locale: &Locale,
    content: Content,
    sample: &Variables,
) -> Result<TemplateVersion, TemplateError> {
    check_content(&content, locale.as_str(), sample)?;
    let channel = content.channel().as_str();
    let mut tx = pool.begin().await?;
    let mut variants = published_variants(&mut tx, tenant, event_type, channel).await?;
    variants.insert(locale.to_string(), content);
    if variants.len() > MAX_VARIANTS {
        return Err(TemplateError::BadInput(format!(
            "a template has at most {MAX_VARIANTS} locales"
        )));
    }
    let row = store::insert_published_version(
        &mut tx,
        tenant,
        event_type,
        channel,
        &serde_json::to_value(&variants).unwrap_or_default(),
    )
    .await?;
    tx.commit().await?;
    Ok(row.try_into()?)
}

async fn published_variants(
    conn: &mut PgConnection,
    tenant: Uuid,
    event_type: &str,
    channel: &str,
) -> Result<BTreeMap<String, Content>, TemplateError> {
    match store::lock_published_version(conn, tenant, event_type, channel).await? {
        Some(row) => Ok(TemplateVersion::try_from(row)?.variants),
        None => Ok(BTreeMap::new()),
    }
}

/// Deletes one locale (a new version without it) or, with `None` or the last
/// locale, the whole template: new alerts use the plain rendering again.
/// Versions stay for the deliveries that recorded them.
pub async fn delete(
    pool: &PrimaryPool,
    tenant: Uuid,
    event_type: &str,
    channel: Channel,
    locale: Option<&Locale>,
) -> Result<(), TemplateError> {
    let channel = channel.as_str();
    let mut tx = pool.begin().await?;
    let mut variants = published_variants(&mut tx, tenant, event_type, channel).await?;
    if variants.is_empty() {
        return Err(TemplateError::NotFound);
    }
    if let Some(locale) = locale {
        if variants.remove(locale.as_str()).is_none() {
            return Err(TemplateError::NotFound);
        }
    } else {
        variants.clear();
    }
    if variants.is_empty() {
        store::set_published_version(&mut *tx, tenant, event_type, channel, None).await?;
    } else {
        store::insert_published_version(
            &mut tx,
            tenant,
            event_type,
            channel,
            &serde_json::to_value(&variants).unwrap_or_default(),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

pub async fn get(
    pool: &PrimaryPool,
    tenant: Uuid,
    event_type: &str,
    channel: Channel,
) -> Result<TemplateVersion, TemplateError> {
    store::get_published_version(pool, tenant, event_type, channel.as_str())
        .await?
        .ok_or(TemplateError::NotFound)?
        .try_into()
        .map_err(TemplateError::Database)
}

pub async fn list(
    pool: &PrimaryPool,
    tenant: Uuid,
    page: &PageRequest<TemplateKey>,
) -> Result<Page<TemplateVersion>, TemplateError> {
    let rows =
        store::list_published_versions(pool, tenant, page.after.as_ref(), page.fetch_limit())
            .await?;
    let versions = rows
        .into_iter()
        .map(TemplateVersion::try_from)
        .collect::<Result<Vec<_>, _>>()?;
    let keys: Vec<TemplateKey> = versions
        .iter()
        .map(|v| TemplateKey {
            event_type: v.event_type.clone(),
            channel: v.channel.as_str().to_owned(),
        })
        .collect();
    let page = page.page(versions.into_iter().zip(keys).collect(), |(_, k)| k);
    Ok(page.map(|(v, _)| v))
}

pub async fn default_locale(pool: &PrimaryPool, tenant: Uuid) -> sqlx::Result<Option<Locale>> {
    Ok(store::get_default_locale(pool, tenant)
        .await?
        .and_then(|l| Locale::parse(&l).ok()))
}

pub async fn set_default_locale(
    pool: &PrimaryPool,
    tenant: Uuid,
    locale: Option<&Locale>,
) -> sqlx::Result<()> {
    store::set_default_locale(pool, tenant, locale.map(Locale::as_str)).await
}

/// What a preview renders: the saved template, or `content` not yet saved.
pub struct PreviewRequest {
    pub event_type: String,
    pub channel: Channel,
    pub locale: Option<Locale>,
    pub content: Option<Content>,
    pub variables: Variables,
}

pub struct Preview {
    pub locale: String,
    pub template_version: Option<i64>,
    pub email: Option<RenderedEmail>,
    pub in_app: Option<RenderedInApp>,
    pub variables: Vec<String>,
    pub fuel: u64,
}

/// Renders a template on sample data. Reads only: nothing is written.
pub async fn preview(
    pool: &PrimaryPool,
    tenant: Uuid,
    request: PreviewRequest,
) -> Result<Preview, TemplateError> {
    let (content, locale, version) = match request.content {
        Some(content) => {
            if content.channel() != request.channel {
                return Err(TemplateError::BadInput(format!(
                    "the template's fields are not those of channel {}",
                    request.channel.as_str()
                )));
            }
            for (part, source) in content.parts() {
                engine::check(part, source).map_err(TemplateError::Invalid)?;
            }
            let locale = request
                .locale
                .as_ref()
                .map_or(locale::ROOT_LOCALE.to_owned(), Locale::to_string);
            (content, locale, None)
        }
        None => {
            let version = get(pool, tenant, &request.event_type, request.channel).await?;
            let tenant_default = default_locale(pool, tenant).await?;
            let (tag, content) = version
                .variant(request.locale.as_ref(), tenant_default.as_ref())
                .ok_or(TemplateError::NotFound)?;
            (content.clone(), tag.to_owned(), Some(version.id))
        }
    };
    let mut variables: Vec<String> = content
        .parts()
        .iter()
        .flat_map(|(part, source)| engine::variables(*part, source))
        .collect();
    variables.sort();
    variables.dedup();
    let mut vars = request.variables;
    vars.recipient.locale = vars.recipient.locale.or(Some(locale.clone()));
    let (email, in_app, fuel) = match &content {
        Content::Email(e) => {
            let rendered = render_email(e, &locale, &vars).map_err(TemplateError::Invalid)?;
            let fuel = rendered.fuel;
            (Some(rendered), None, fuel)
        }
        Content::InApp(i) => {
            let (rendered, fuel) = render_in_app(i, &locale, version.unwrap_or(0), &vars)
                .map_err(TemplateError::Invalid)?;
            (None, Some(rendered), fuel)
        }
    };
    Ok(Preview {
        locale,
        template_version: version,
        email,
        in_app,
        variables,
        fuel,
    })
}

/// The version a new delivery on `channel` records at fan-out.
pub async fn published_version_id(
    conn: &mut PgConnection,
    tenant: Uuid,
    event_type: &str,
    channel: Channel,
) -> sqlx::Result<Option<i64>> {
    store::get_published_version_id(conn, tenant, event_type, channel.as_str()).await
}

/// A version by id (versions never change, so callers may keep it).
pub async fn version(
    pool: &PrimaryPool,
    tenant: Uuid,
    id: i64,
) -> sqlx::Result<Option<TemplateVersion>> {
    store::get_version(pool, tenant, id)
        .await?
        .map(TemplateVersion::try_from)
        .transpose()
}

/// Template versions by (tenant, id), for the outbox workers: versions
/// never change, so an entry is never stale. Bounded: cleared whole when
/// full (a worker sees few templates; the next reads refill it).
#[derive(Default)]
pub struct VersionCache {
    versions:
        std::sync::Mutex<std::collections::HashMap<(Uuid, i64), std::sync::Arc<TemplateVersion>>>,
}

impl VersionCache {
    const CAPACITY: usize = 1024;

    pub async fn get(
        &self,
        pool: &PrimaryPool,
        tenant: Uuid,
        id: i64,
    ) -> sqlx::Result<Option<std::sync::Arc<TemplateVersion>>> {
        if let Some(found) = self.lock().get(&(tenant, id)) {
            return Ok(Some(found.clone()));
        }
        let Some(version) = version(pool, tenant, id).await? else {
            return Ok(None);
        };
        let version = std::sync::Arc::new(version);
        let mut versions = self.lock();
        if versions.len() >= Self::CAPACITY {
            versions.clear();
        }
        versions.insert((tenant, id), version.clone());
        Ok(Some(version))
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<
        '_,
        std::collections::HashMap<(Uuid, i64), std::sync::Arc<TemplateVersion>>,
    > {
        // A panic while holding it leaves a map that is still valid.
        self.versions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn email(subject: &str, html: &str) -> Content {
        Content::Email(EmailContent {
            subject: subject.into(),
            html: html.into(),
            text: None,
            format: BodyFormat::Html,
        })
    }

    #[test]
    fn the_variant_follows_the_fallback_chain() {
        let version = TemplateVersion {
            id: 1,
            event_type: "e".into(),
            channel: Channel::Email,
            version: 1,
            variants: [
                ("fr".to_string(), email("fr", "")),
                ("de".into(), email("de", "")),
            ]
            .into_iter()
            .collect(),
            created_at: chrono::Utc::now(),
        };
        let fr_be = Locale::parse("fr-BE").unwrap();
        let de = Locale::parse("de").unwrap();
        let it = Locale::parse("it").unwrap();
        assert_eq!(version.variant(Some(&fr_be), Some(&de)).unwrap().0, "fr");
        assert_eq!(version.variant(Some(&it), Some(&de)).unwrap().0, "de");
        // Neither the user's nor the tenant's nor en: the first there is.
        assert_eq!(version.variant(Some(&it), None).unwrap().0, "de");
    }

    #[test]
    fn content_is_checked_on_the_sample() {
        let sample = sample_variables("invoice.overdue", serde_json::json!({"n": 3}), None);
        assert!(check_content(
            &email("{{ payload.n }}", "<p>{{ recipient.display_name }}</p>"),
            "en",
            &sample
        )
        .is_ok());
        let err = check_content(
            &email("ok", "<p>\n{{ payload.n | bogus }}</p>"),
            "en",
            &sample,
        )
        .unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
    }
}
