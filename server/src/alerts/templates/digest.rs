//! A category's digest template: the email that lists a digest's items
//! (ARCHITECTURE.md, "Digests"). One per category, in one locale, checked
//! at save like every template (it parses, names only vetted filters, and
//! renders within the sandbox's limits on a sample digest), rendered at the
//! send with the items the flush decided on. A digest whose category has
//! none uses the built-in layout (`workers::digests::compose`).

use serde::Serialize;
use uuid::Uuid;

use super::{check_parts, render_email_in, Content, EmailContent, RenderedEmail, TemplateError};
use crate::{db::PrimaryPool, store::digests as store};

/// One item of a digest, as a template sees it (`items[]`).
#[derive(Debug, Clone, Serialize)]
pub struct DigestItem {
    pub subject: Option<String>,
    pub event_type: Option<String>,
    pub entity_id: Option<String>,
    pub payload: serde_json::Value,
}

/// Every variable a digest template may read.
#[derive(Debug, Clone, Serialize)]
pub struct DigestVariables {
    /// The items listed, newest first (at most the digest's `max_items`).
    pub items: Vec<DigestItem>,
    /// Items the digest holds, listed or not: what the subject states.
    pub total: i64,
    /// Items held but not listed.
    pub more: i64,
    pub category: String,
    pub recipient: super::Recipient,
    /// The one-click unsubscribe link, when there is one.
    pub unsubscribe_url: Option<String>,
}

impl DigestVariables {
    fn context(&self) -> minijinja::Value {
        minijinja::Value::from(minijinja::value::Serde(self))
    }
}

/// Renders a digest's email with its category's template.
pub fn render(
    content: &EmailContent,
    vars: &DigestVariables,
) -> Result<RenderedEmail, super::engine::RenderError> {
    render_email_in(content, "en", &vars.context())
}

/// What a template is checked on at save: two items of three.
fn sample(category: &str) -> DigestVariables {
    let item = |n: u32| DigestItem {
        subject: Some(format!("Sample item {n}")),
        event_type: Some("sample.event".into()),
        entity_id: Some(format!("sample-{n}")),
        payload: serde_json::json!({"n": n}),
    };
    DigestVariables {
        items: vec![item(2), item(1)],
        total: 3,
        more: 1,
        category: category.to_owned(),
        recipient: super::Recipient {
            id: "sample-user".into(),
            display_name: Some("Sample User".into()),
            locale: Some("en".into()),
            timezone: Some("UTC".into()),
        },
        unsubscribe_url: Some("https://example.com/u/sample".into()),
    }
}

/// Checks and stores `content` as `category`'s digest template; the next
/// digest sent uses it.
pub async fn save(
    pool: &PrimaryPool,
    tenant: Uuid,
    category: &str,
    content: EmailContent,
) -> Result<(EmailContent, chrono::DateTime<chrono::Utc>), TemplateError> {
    if crate::store::preferences::get_category(pool, tenant, category)
        .await?
        .is_none()
    {
        return Err(TemplateError::NotFound);
    }
    // The parts' checks (length, names on every branch), then a render on
    // the sample digest.
    let content = Content::Email(content);
    check_parts(&content)?;
    let Content::Email(content) = content else {
        unreachable!("built as email above")
    };
    render(&content, &sample(category)).map_err(TemplateError::Invalid)?;
    let stored =
        serde_json::to_value(&content).map_err(|e| TemplateError::BadInput(e.to_string()))?;
    let row = store::upsert_digest_template(pool, tenant, category, &stored).await?;
    Ok((content, row.updated_at))
}

/// A category's digest template, if it has one (and it can be read).
pub async fn find(
    pool: &PrimaryPool,
    tenant: Uuid,
    category: &str,
) -> sqlx::Result<Option<(EmailContent, chrono::DateTime<chrono::Utc>)>> {
    Ok(store::find_digest_template(pool, tenant, category)
        .await?
        .and_then(|row| {
            serde_json::from_value(row.content)
                .ok()
                .map(|c| (c, row.updated_at))
        }))
}

pub async fn delete(pool: &PrimaryPool, tenant: Uuid, category: &str) -> sqlx::Result<bool> {
    store::delete_digest_template(pool, tenant, category).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::templates::email::BodyFormat;

    #[test]
    fn a_digest_template_lists_the_items_and_states_the_count() {
        let content = EmailContent {
            subject: "{{ total }} new in {{ category }}".into(),
            html: "<ul>{% for item in items %}<li>{{ item.subject }} ({{ item.payload.n }})</li>{% endfor %}</ul>{% if more %}<p>and {{ more }} more</p>{% endif %}".into(),
            text: None,
            format: BodyFormat::Html,
        };
        let email = render(&content, &sample("comments")).expect("renders");
        assert_eq!(email.subject, "3 new in comments");
        assert!(
            email
                .html
                .contains("<li>Sample item 2 (2)</li><li>Sample item 1 (1)</li>"),
            "{}",
            email.html
        );
        assert!(email.text.contains("and 1 more"), "{}", email.text);
    }
}
