//! Templates (API key): `PUT/GET/DELETE /v1/templates/{event_type}/{channel}`
//! (`?locale=`), `GET /v1/templates`, `POST /v1/templates/preview` and the
//! tenant's default locale, `GET/PUT /v1/template-settings`
//! (docs/design/templates.md).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use poem_openapi::{
    param::{Path, Query},
    payload::Json,
    ApiResponse, Enum, Object, OpenApi,
};
use tidings_core::{Channel, EventType};

use super::ApiTags;
use crate::{
    alerts::templates::{
        self, email::BodyFormat, locale::Locale, Content, EmailContent, InAppContent, Recipient,
        TemplateError, TemplateVersion,
    },
    app::state::AppState,
    http::auth::ApiKeyAuth,
    http::error::{ApiError, ApiResult, ProblemCode},
    store::paging::PageRequest,
};

pub struct TemplatesApi {
    pub state: AppState,
}

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 100;

/// The channels a template can be written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum TemplateChannel {
    Email,
    InApp,
}

impl From<TemplateChannel> for Channel {
    fn from(c: TemplateChannel) -> Self {
        match c {
            TemplateChannel::Email => Channel::Email,
            TemplateChannel::InApp => Channel::InApp,
        }
    }
}

/// What the HTML body of an email template is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum BodyFormatName {
    Html,
    Mjml,
}

/// One locale's template. Email: `subject`, `html` (HTML or MJML, see
/// `format`) and optionally `text` (derived from the HTML when absent).
/// In-app: `title`, `body` and optionally `action_url`. Every field is a
/// template (minijinja syntax) over the variables `payload`, `recipient`
/// (`id`, `display_name`, `locale`, `timezone`), `event_type`, `entity_id`,
/// `subject`, `category`, `unsubscribe_url` and `locale`.
#[derive(Debug, Clone, Object)]
#[oai(deny_unknown_fields)]
pub struct TemplateIn {
    pub subject: Option<String>,
    pub html: Option<String>,
    pub text: Option<String>,
    /// `html` (default) or `mjml`.
    pub format: Option<BodyFormatName>,
    pub title: Option<String>,
    pub body: Option<String>,
    pub action_url: Option<String>,
    /// A payload the template is rendered on at save: a template that fails
    /// on it, or runs out of fuel, is refused. Default `{}`.
    pub sample: Option<serde_json::Value>,
}

/// One locale's template as stored.
#[derive(Debug, Clone, Object)]
pub struct VariantOut {
    pub subject: Option<String>,
    pub html: Option<String>,
    pub text: Option<String>,
    pub format: Option<BodyFormatName>,
    pub title: Option<String>,
    pub body: Option<String>,
    pub action_url: Option<String>,
}

impl From<&Content> for VariantOut {
    fn from(content: &Content) -> Self {
        match content {
            Content::Email(e) => VariantOut {
                subject: Some(e.subject.clone()),
                html: Some(e.html.clone()),
                text: e.text.clone(),
                format: Some(match e.format {
                    BodyFormat::Html => BodyFormatName::Html,
                    BodyFormat::Mjml => BodyFormatName::Mjml,
                }),
                title: None,
                body: None,
                action_url: None,
            },
            Content::InApp(i) => VariantOut {
                subject: None,
                html: None,
                text: None,
                format: None,
                title: Some(i.title.clone()),
                body: Some(i.body.clone()),
                action_url: i.action_url.clone(),
            },
        }
    }
}

/// The published version of a template.
#[derive(Debug, Object)]
pub struct TemplateOut {
    pub event_type: String,
    pub channel: TemplateChannel,
    /// 1, 2, ...: every save and every locale deleted makes a new version.
    pub version: i32,
    /// What deliveries rendered with this version record.
    pub template_version_id: i64,
    /// Locale → template.
    pub variants: BTreeMap<String, VariantOut>,
    pub created_at: DateTime<Utc>,
}

fn template_out(version: &TemplateVersion, only: Option<&Locale>) -> TemplateOut {
    TemplateOut {
        event_type: version.event_type.clone(),
        channel: match version.channel {
            Channel::InApp => TemplateChannel::InApp,
            _ => TemplateChannel::Email,
        },
        version: version.version,
        template_version_id: version.id,
        variants: version
            .variants
            .iter()
            .filter(|(tag, _)| only.is_none_or(|l| l.as_str() == tag.as_str()))
            .map(|(tag, content)| (tag.clone(), VariantOut::from(content)))
            .collect(),
        created_at: version.created_at,
    }
}

#[derive(Debug, Object)]
pub struct TemplateList {
    pub data: Vec<TemplateOut>,
    /// Present when more templates follow.
    pub next_cursor: Option<String>,
}

/// A sample recipient for a preview.
#[derive(Debug, Clone, Object)]
#[oai(deny_unknown_fields)]
pub struct RecipientIn {
    pub id: Option<String>,
    pub display_name: Option<String>,
    /// IANA time zone name.
    pub timezone: Option<String>,
}

#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct PreviewIn {
    pub event_type: String,
    pub channel: TemplateChannel,
    /// The locale to preview: the saved template's variant is chosen as for
    /// a recipient with this locale (with fallback).
    pub locale: Option<String>,
    /// The sample payload (`payload`).
    pub data: Option<serde_json::Value>,
    pub recipient: Option<RecipientIn>,
    /// The alert's subject (`subject`).
    pub subject: Option<String>,
    /// A template to preview instead of the saved one (nothing is saved).
    pub template: Option<TemplateIn>,
}

#[derive(Debug, Object)]
pub struct PreviewOut {
    /// The locale of the variant rendered.
    pub locale: String,
    /// The saved version rendered; absent for an unsaved `template`.
    pub template_version_id: Option<i64>,
    pub subject: Option<String>,
    pub html: Option<String>,
    pub text: Option<String>,
    pub title: Option<String>,
    pub body: Option<String>,
    pub action_url: Option<String>,
    /// The variables the template reads, as dotted paths (`payload.amount`).
    pub variables: Vec<String>,
    /// Fuel the render spent (the limit is per part).
    pub fuel: u64,
}

#[derive(Debug, Object)]
pub struct TemplateSettings {
    /// The tenant's fallback locale, between the user's language and `en`.
    pub default_locale: Option<String>,
}

#[derive(ApiResponse)]
pub enum TemplateResponse {
    #[oai(status = 200)]
    Ok(Json<TemplateOut>),
}

#[derive(ApiResponse)]
pub enum TemplateListResponse {
    #[oai(status = 200)]
    Ok(Json<TemplateList>),
}

#[derive(ApiResponse)]
pub enum TemplateDeleted {
    /// Deleted. Deliveries already enqueued keep the version they recorded.
    #[oai(status = 204)]
    Deleted,
}

/// A category's digest template: the email listing a digest's items.
/// Every field is a template (minijinja syntax) over `items` (each with
/// `subject`, `event_type`, `entity_id`, `payload`; newest first, at most
/// the digest's `max_items`), `total` (items in the digest), `more` (held
/// but not listed), `category`, `recipient` and `unsubscribe_url`.
#[derive(Debug, Clone, Object)]
#[oai(deny_unknown_fields)]
pub struct DigestTemplateIn {
    pub subject: String,
    pub html: String,
    /// Derived from the HTML when absent.
    pub text: Option<String>,
    /// `html` (default) or `mjml`.
    pub format: Option<BodyFormatName>,
}

#[derive(Debug, Clone, Object)]
pub struct DigestTemplateOut {
    pub category: String,
    pub subject: String,
    pub html: String,
    pub text: Option<String>,
    pub format: BodyFormatName,
    pub updated_at: DateTime<Utc>,
}

impl DigestTemplateOut {
    fn of(category: String, content: EmailContent, updated_at: DateTime<Utc>) -> Self {
        DigestTemplateOut {
            category,
            subject: content.subject,
            html: content.html,
            text: content.text,
            format: match content.format {
                BodyFormat::Mjml => BodyFormatName::Mjml,
                BodyFormat::Html => BodyFormatName::Html,
            },
            updated_at,
        }
    }
}

#[derive(ApiResponse)]
pub enum DigestTemplateResponse {
    #[oai(status = 200)]
    Ok(Json<DigestTemplateOut>),
}

#[derive(ApiResponse)]
pub enum DigestTemplateDeleted {
    /// Deleted: the category's digests use the built-in layout again.
    #[oai(status = 204)]
    Deleted,
}

fn no_digest_template(category: &str) -> ApiError {
    ApiError::not_found(
        ProblemCode::TemplateNotFound,
        format!("no digest template for category {category:?}"),
    )
}

#[derive(ApiResponse)]
pub enum PreviewResponse {
    #[oai(status = 200)]
    Ok(Json<PreviewOut>),
}

#[derive(ApiResponse)]
pub enum SettingsResponse {
    #[oai(status = 200)]
    Ok(Json<TemplateSettings>),
}

impl From<TemplateError> for ApiError {
    fn from(err: TemplateError) -> Self {
        match err {
            TemplateError::Invalid(e) => {
                ApiError::unprocessable(ProblemCode::InvalidTemplate, e.to_string())
            }
            TemplateError::BadInput(detail) => {
                ApiError::unprocessable(ProblemCode::InvalidTemplate, detail)
            }
            TemplateError::NotFound => ApiError::not_found(
                ProblemCode::TemplateNotFound,
                "no template for this event type, channel and locale",
            ),
            TemplateError::Database(e) => e.into(),
        }
    }
}

/// A path's channel: `webhook` has no template.
fn parse_channel(text: &str) -> ApiResult<TemplateChannel> {
    match text {
        "email" => Ok(TemplateChannel::Email),
        "in_app" => Ok(TemplateChannel::InApp),
        other => Err(ApiError::unprocessable(
            ProblemCode::InvalidChannel,
            format!("templates are for channels email and in_app, not {other:?}"),
        )),
    }
}

fn parse_locale(text: Option<&str>) -> ApiResult<Option<Locale>> {
    text.map(Locale::parse)
        .transpose()
        .map_err(|e| ApiError::unprocessable(ProblemCode::InvalidLocale, e.to_string()))
}

fn missing(field: &str, channel: &str) -> ApiError {
    ApiError::unprocessable(
        ProblemCode::InvalidTemplate,
        format!("{field} is required for a {channel} template"),
    )
}

/// The body's fields as the content of `channel`; fields of the other
/// channel are refused.
fn content_of(channel: TemplateChannel, body: TemplateIn) -> ApiResult<Content> {
    match channel {
        TemplateChannel::Email => {
            if body.title.is_some() || body.body.is_some() || body.action_url.is_some() {
                return Err(ApiError::unprocessable(
                    ProblemCode::InvalidTemplate,
                    "title, body and action_url are in-app fields; email has subject, html, text",
                ));
            }
            Ok(Content::Email(EmailContent {
                subject: body.subject.ok_or_else(|| missing("subject", "email"))?,
                html: body.html.ok_or_else(|| missing("html", "email"))?,
                text: body.text,
                format: match body.format {
                    Some(BodyFormatName::Mjml) => BodyFormat::Mjml,
                    _ => BodyFormat::Html,
                },
            }))
        }
        TemplateChannel::InApp => {
            if body.subject.is_some()
                || body.html.is_some()
                || body.text.is_some()
                || body.format.is_some()
            {
                return Err(ApiError::unprocessable(
                    ProblemCode::InvalidTemplate,
                    "subject, html, text and format are email fields; in-app has title, body, action_url",
                ));
            }
            Ok(Content::InApp(InAppContent {
                title: body.title.ok_or_else(|| missing("title", "in_app"))?,
                body: body.body.ok_or_else(|| missing("body", "in_app"))?,
                action_url: body.action_url,
            }))
        }
    }
}

fn sample_payload(sample: Option<serde_json::Value>) -> ApiResult<serde_json::Value> {
    match sample {
        None => Ok(serde_json::json!({})),
        Some(value @ serde_json::Value::Object(_)) => Ok(value),
        Some(_) => Err(ApiError::unprocessable(
            ProblemCode::InvalidTemplate,
            "sample must be a JSON object (the payload)",
        )),
    }
}

#[OpenApi(tag = "ApiTags::Templates")]
impl TemplatesApi {
    /// Save a template.
    ///
    /// One locale of an event type and channel. Writes and publishes a new
    /// immutable version (with the template's other locales); alerts enqueued
    /// before keep the version they recorded. A template that does not parse,
    /// names a filter outside the vetted set, or fails or runs out of fuel on
    /// `sample` is refused with 422 naming the part and line.
    #[oai(
        path = "/v1/templates/:event_type/:channel",
        method = "put",
        operation_id = "templates.put"
    )]
    async fn put(
        &self,
        auth: ApiKeyAuth,
        /// The event type the template renders, e.g. `invoice.overdue`.
        event_type: Path<String>,
        /// `email` or `in_app`.
        channel: Path<String>,
        /// BCP 47 tag; default `en`.
        locale: Query<Option<String>>,
        body: Json<TemplateIn>,
    ) -> ApiResult<TemplateResponse> {
        let event_type = EventType::parse(event_type.0)?;
        let locale = parse_locale(locale.0.as_deref())?
            .unwrap_or_else(|| Locale::parse("en").expect("a valid tag"));
        let mut body = body.0;
        let sample = sample_payload(body.sample.take())?;
        let content = content_of(parse_channel(&channel.0)?, body)?;
        let sample = templates::sample_variables(
            &event_type,
            sample,
            Some(Recipient {
                id: "sample-user".into(),
                display_name: Some("Sample User".into()),
                locale: Some(locale.to_string()),
                timezone: Some("UTC".into()),
            }),
        );
        let version = templates::save(
            &self.state.pool,
            auth.0.tenant_id,
            &event_type,
            &locale,
            content,
            &sample,
        )
        .await?;
        Ok(TemplateResponse::Ok(Json(template_out(&version, None))))
    }

    /// Read a published template.
    ///
    /// The published version for an event type and channel: every locale, or
    /// the one named by `?locale=` (exactly that locale, no fallback).
    #[oai(
        path = "/v1/templates/:event_type/:channel",
        method = "get",
        operation_id = "templates.get"
    )]
    async fn get(
        &self,
        auth: ApiKeyAuth,
        /// The event type the template renders, e.g. `invoice.overdue`.
        event_type: Path<String>,
        /// `email` or `in_app`.
        channel: Path<String>,
        /// Only this locale (BCP 47), exactly, with no fallback.
        locale: Query<Option<String>>,
    ) -> ApiResult<TemplateResponse> {
        let event_type = EventType::parse(event_type.0)?;
        let locale = parse_locale(locale.0.as_deref())?;
        let version = templates::get(
            &self.state.pool,
            auth.0.tenant_id,
            &event_type,
            parse_channel(&channel.0)?.into(),
        )
        .await?;
        if let Some(locale) = &locale {
            if !version.variants.contains_key(locale.as_str()) {
                return Err(TemplateError::NotFound.into());
            }
        }
        Ok(TemplateResponse::Ok(Json(template_out(
            &version,
            locale.as_ref(),
        ))))
    }

    /// Delete a template.
    ///
    /// One locale (`?locale=`) or the whole template. Without a template,
    /// alerts of the event type are rendered from their subject and payload.
    #[oai(
        path = "/v1/templates/:event_type/:channel",
        method = "delete",
        operation_id = "templates.delete"
    )]
    async fn delete(
        &self,
        auth: ApiKeyAuth,
        /// The event type the template renders, e.g. `invoice.overdue`.
        event_type: Path<String>,
        /// `email` or `in_app`.
        channel: Path<String>,
        /// Delete only this locale (BCP 47); absent: the whole template.
        locale: Query<Option<String>>,
    ) -> ApiResult<TemplateDeleted> {
        let event_type = EventType::parse(event_type.0)?;
        let locale = parse_locale(locale.0.as_deref())?;
        templates::delete(
            &self.state.pool,
            auth.0.tenant_id,
            &event_type,
            parse_channel(&channel.0)?.into(),
            locale.as_ref(),
        )
        .await?;
        Ok(TemplateDeleted::Deleted)
    }

    /// Save a category's digest template.
    ///
    /// The email a digest of this category's event types is sent as. Checked
    /// like every template (it parses, names only vetted filters, and renders
    /// within the sandbox's limits on a sample digest): 422 naming the part
    /// and line otherwise; 404 for a category that does not exist. Digests
    /// sent from now on use it.
    #[oai(
        path = "/v1/categories/:key/digest-template",
        method = "put",
        operation_id = "categories.digest_template.put"
    )]
    async fn put_digest_template(
        &self,
        auth: ApiKeyAuth,
        /// The category's key.
        key: Path<String>,
        body: Json<DigestTemplateIn>,
    ) -> ApiResult<DigestTemplateResponse> {
        let body = body.0;
        let content = EmailContent {
            subject: body.subject,
            html: body.html,
            text: body.text,
            format: match body.format {
                Some(BodyFormatName::Mjml) => BodyFormat::Mjml,
                _ => BodyFormat::Html,
            },
        };
        let (content, updated_at) =
            templates::digest::save(&self.state.pool, auth.0.tenant_id, &key.0, content)
                .await
                .map_err(|err| match err {
                    TemplateError::NotFound => ApiError::not_found(
                        ProblemCode::CategoryNotFound,
                        format!(
                            "no category {:?}; create it with PUT /v1/categories/{{key}}",
                            key.0
                        ),
                    ),
                    other => other.into(),
                })?;
        Ok(DigestTemplateResponse::Ok(Json(DigestTemplateOut::of(
            key.0, content, updated_at,
        ))))
    }

    /// Read a category's digest template.
    ///
    /// 404 when the category has none (its digests use the built-in layout).
    #[oai(
        path = "/v1/categories/:key/digest-template",
        method = "get",
        operation_id = "categories.digest_template.get"
    )]
    async fn get_digest_template(
        &self,
        auth: ApiKeyAuth,
        /// The category's key.
        key: Path<String>,
    ) -> ApiResult<DigestTemplateResponse> {
        let (content, updated_at) =
            templates::digest::find(&self.state.pool, auth.0.tenant_id, &key.0)
                .await?
                .ok_or_else(|| no_digest_template(&key.0))?;
        Ok(DigestTemplateResponse::Ok(Json(DigestTemplateOut::of(
            key.0, content, updated_at,
        ))))
    }

    /// Delete a category's digest template.
    ///
    /// Digests sent from now on use the built-in layout. 404 when the
    /// category has none.
    #[oai(
        path = "/v1/categories/:key/digest-template",
        method = "delete",
        operation_id = "categories.digest_template.delete"
    )]
    async fn delete_digest_template(
        &self,
        auth: ApiKeyAuth,
        /// The category's key.
        key: Path<String>,
    ) -> ApiResult<DigestTemplateDeleted> {
        if !templates::digest::delete(&self.state.pool, auth.0.tenant_id, &key.0).await? {
            return Err(no_digest_template(&key.0));
        }
        Ok(DigestTemplateDeleted::Deleted)
    }

    /// List templates.
    ///
    /// The tenant's published templates, by channel then event type, a page at
    /// a time.
    #[oai(
        path = "/v1/templates",
        method = "get",
        operation_id = "templates.list"
    )]
    async fn list(
        &self,
        auth: ApiKeyAuth,
        /// `next_cursor` of the previous page (opaque).
        cursor: Query<Option<String>>,
        /// 1–100, default 50.
        limit: Query<Option<u32>>,
    ) -> ApiResult<TemplateListResponse> {
        let page = PageRequest::parse(cursor.0.as_deref(), limit.0, DEFAULT_LIMIT, MAX_LIMIT)?;
        let page = templates::list(&self.state.pool, auth.0.tenant_id, &page).await?;
        let page = page.map(|v| template_out(&v, None));
        Ok(TemplateListResponse::Ok(Json(TemplateList {
            data: page.items,
            next_cursor: page.next_cursor,
        })))
    }

    /// Preview a template.
    ///
    /// Renders on sample data the saved template for the event type, channel
    /// and locale (with the recipients' locale fallback), or the unsaved
    /// `template` given. Answers the subject, HTML and text, the variables used
    /// and the fuel spent. Writes nothing.
    #[oai(
        path = "/v1/templates/preview",
        method = "post",
        operation_id = "templates.preview"
    )]
    async fn preview(&self, auth: ApiKeyAuth, body: Json<PreviewIn>) -> ApiResult<PreviewResponse> {
        let body = body.0;
        let event_type = EventType::parse(body.event_type)?;
        let locale = parse_locale(body.locale.as_deref())?;
        let content = body
            .template
            .map(|mut t| {
                t.sample = None;
                content_of(body.channel, t)
            })
            .transpose()?;
        let data = sample_payload(body.data)?;
        let recipient = body.recipient.unwrap_or(RecipientIn {
            id: None,
            display_name: None,
            timezone: None,
        });
        if let Some(tz) = &recipient.timezone {
            templates::locale::parse_timezone(tz).map_err(|e| {
                ApiError::unprocessable(ProblemCode::InvalidTimezone, e.to_string())
            })?;
        }
        let mut variables = templates::sample_variables(
            &event_type,
            data,
            Some(Recipient {
                id: recipient.id.unwrap_or_else(|| "sample-user".into()),
                display_name: recipient.display_name,
                locale: locale.as_ref().map(Locale::to_string),
                timezone: Some(recipient.timezone.unwrap_or_else(|| "UTC".into())),
            }),
        );
        variables.subject = body.subject;
        let preview = templates::preview(
            &self.state.pool,
            auth.0.tenant_id,
            templates::PreviewRequest {
                event_type: event_type.to_string(),
                channel: body.channel.into(),
                locale,
                content,
                variables,
            },
        )
        .await?;
        let (email, in_app) = (preview.email, preview.in_app);
        Ok(PreviewResponse::Ok(Json(PreviewOut {
            locale: preview.locale,
            template_version_id: preview.template_version,
            subject: email.as_ref().map(|e| e.subject.clone()),
            html: email.as_ref().map(|e| e.html.clone()),
            text: email.map(|e| e.text),
            title: in_app.as_ref().map(|i| i.title.clone()),
            body: in_app.as_ref().map(|i| i.body.clone()),
            action_url: in_app.and_then(|i| i.action_url),
            variables: preview.variables,
            fuel: preview.fuel,
        })))
    }

    /// Read the template settings.
    ///
    /// The tenant's default locale.
    #[oai(
        path = "/v1/template-settings",
        method = "get",
        operation_id = "template-settings.get"
    )]
    async fn get_settings(&self, auth: ApiKeyAuth) -> ApiResult<SettingsResponse> {
        let locale = templates::default_locale(&self.state.pool, auth.0.tenant_id).await?;
        Ok(SettingsResponse::Ok(Json(TemplateSettings {
            default_locale: locale.map(|l| l.to_string()),
        })))
    }

    /// Set the template settings.
    ///
    /// The tenant's default locale, the third step of the locale fallback
    /// (absent: none, then `en`).
    #[oai(
        path = "/v1/template-settings",
        method = "put",
        operation_id = "template-settings.put"
    )]
    async fn put_settings(
        &self,
        auth: ApiKeyAuth,
        body: Json<TemplateSettings>,
    ) -> ApiResult<SettingsResponse> {
        let locale = parse_locale(body.0.default_locale.as_deref())?;
        templates::set_default_locale(&self.state.pool, auth.0.tenant_id, locale.as_ref()).await?;
        Ok(SettingsResponse::Ok(Json(TemplateSettings {
            default_locale: locale.map(|l| l.to_string()),
        })))
    }
}
