//! Categories and preferences: `PUT/GET /v1/categories/{key}`,
//! `GET /v1/categories`, `GET/PATCH/PUT /v1/users/{user_id}/preferences`
//! (API key), `GET/PATCH /v1/me/preferences` (user token) and
//! `GET/PUT /v1/preference-defaults`. The rules: docs/design/preferences.md.

use poem_openapi::{param::Path, payload::Json, ApiResponse, Enum, Object, OpenApi};
use tidings_core::{Channel, EventType, Rule, Scope, Setting, UserId};

use super::{ApiTags, ChannelName};
use crate::{
    alerts::preferences::{
        self, CategorySpec, Grid, Owner, PreferencesError, SettingChange, Source,
    },
    app::state::AppState,
    http::auth::{ApiKeyAuth, UserTokenAuth},
    http::error::{ApiError, ApiResult, ProblemCode},
    store::preferences::{self as store, CategoryRow},
};

pub struct PreferencesApi {
    pub state: AppState,
}

/// Most rows one request may write, and most event types of one category.
pub const MAX_ROWS: usize = 200;
pub const MAX_LABEL_BYTES: usize = 255;

/// What a user receives on a channel. `daily` and `weekly` (email only):
/// the emails are collected into one digest a day (a week, on Mondays),
/// sent at 08:00 in the user's time zone, listing what is still unread then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum SettingName {
    On,
    Off,
    Daily,
    Weekly,
}

impl From<SettingName> for Setting {
    fn from(s: SettingName) -> Self {
        match s {
            SettingName::On => Setting::On,
            SettingName::Off => Setting::Off,
            SettingName::Daily => Setting::Daily,
            SettingName::Weekly => Setting::Weekly,
        }
    }
}

/// A stored setting as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum SettingOut {
    On,
    Off,
    Daily,
    Weekly,
}

impl From<Setting> for SettingOut {
    fn from(s: Setting) -> Self {
        match s {
            Setting::On => SettingOut::On,
            Setting::Off => SettingOut::Off,
            Setting::Daily => SettingOut::Daily,
            Setting::Weekly => SettingOut::Weekly,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum ScopeName {
    Global,
    Category,
    EventType,
}

impl From<ScopeName> for Scope {
    fn from(s: ScopeName) -> Self {
        match s {
            ScopeName::Global => Scope::Global,
            ScopeName::Category => Scope::Category,
            ScopeName::EventType => Scope::EventType,
        }
    }
}

impl From<Scope> for ScopeName {
    fn from(s: Scope) -> Self {
        match s {
            Scope::Global => ScopeName::Global,
            Scope::Category => ScopeName::Category,
            Scope::EventType => ScopeName::EventType,
        }
    }
}

/// A channel, or `*` for every channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
pub enum ChannelSelector {
    #[oai(rename = "*")]
    All,
    #[oai(rename = "in_app")]
    InApp,
    #[oai(rename = "email")]
    Email,
    #[oai(rename = "webhook")]
    Webhook,
}

impl From<ChannelSelector> for Option<Channel> {
    fn from(c: ChannelSelector) -> Self {
        match c {
            ChannelSelector::All => None,
            ChannelSelector::InApp => Some(Channel::InApp),
            ChannelSelector::Email => Some(Channel::Email),
            ChannelSelector::Webhook => Some(Channel::Webhook),
        }
    }
}

impl From<Option<Channel>> for ChannelSelector {
    fn from(c: Option<Channel>) -> Self {
        match c {
            None => ChannelSelector::All,
            Some(Channel::InApp) => ChannelSelector::InApp,
            Some(Channel::Email) => ChannelSelector::Email,
            Some(Channel::Webhook) => ChannelSelector::Webhook,
        }
    }
}

/// The level of the rules that decided a setting, most specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum LevelName {
    /// The category is critical: settings do not apply.
    Critical,
    /// A locked tenant default.
    Locked,
    UserEventType,
    UserCategory,
    UserGlobal,
    TenantEventType,
    TenantCategory,
    TenantGlobal,
    /// The category's own default for the channel.
    CategoryDefault,
    /// Nothing was set: `on`.
    Fallback,
}

impl From<tidings_core::Level> for LevelName {
    fn from(l: tidings_core::Level) -> Self {
        use tidings_core::Level as L;
        match l {
            L::Critical => LevelName::Critical,
            L::Locked => LevelName::Locked,
            L::UserEventType => LevelName::UserEventType,
            L::UserCategory => LevelName::UserCategory,
            L::UserGlobal => LevelName::UserGlobal,
            L::TenantEventType => LevelName::TenantEventType,
            L::TenantCategory => LevelName::TenantCategory,
            L::TenantGlobal => LevelName::TenantGlobal,
            L::CategoryDefault => LevelName::CategoryDefault,
            L::Fallback => LevelName::Fallback,
        }
    }
}

/// A category's own setting per channel; an omitted channel has none.
#[derive(Debug, Clone, Default, Object)]
#[oai(deny_unknown_fields)]
pub struct ChannelDefaults {
    pub in_app: Option<SettingName>,
    pub email: Option<SettingName>,
    pub webhook: Option<SettingName>,
}

#[derive(Debug, Clone, Object)]
#[oai(deny_unknown_fields)]
pub struct CategoryIn {
    /// For people, e.g. "Billing" (1–255 bytes).
    pub label: String,
    /// Critical categories (password resets, receipts, security notices)
    /// ignore every preference and carry no unsubscribe link.
    #[oai(default)]
    pub critical: bool,
    /// The category's own setting per channel; absent: none.
    pub defaults: Option<ChannelDefaults>,
    /// The event types this category holds; each event type is in one
    /// category at most (409 otherwise). Replaces the category's list.
    #[oai(default)]
    pub event_types: Vec<String>,
}

#[derive(Debug, Clone, Object)]
pub struct DefaultsOut {
    pub in_app: Option<SettingOut>,
    pub email: Option<SettingOut>,
    pub webhook: Option<SettingOut>,
}

#[derive(Debug, Clone, Object)]
pub struct CategoryOut {
    pub key: String,
    pub label: String,
    pub critical: bool,
    pub defaults: DefaultsOut,
    pub event_types: Vec<String>,
}

impl From<&CategoryRow> for CategoryOut {
    fn from(row: &CategoryRow) -> Self {
        let category = preferences::category_of(row);
        let default = |c| category.default_for(c).map(SettingOut::from);
        CategoryOut {
            key: row.key.clone(),
            label: row.label.clone(),
            critical: row.critical,
            defaults: DefaultsOut {
                in_app: default(Channel::InApp),
                email: default(Channel::Email),
                webhook: default(Channel::Webhook),
            },
            event_types: row.event_types.clone(),
        }
    }
}

#[derive(Debug, Clone, Object)]
pub struct CategoryListOut {
    pub categories: Vec<CategoryOut>,
}

/// One sparse settings row. `key` is the category key or the event type,
/// omitted for `global`.
#[derive(Debug, Clone, Object)]
#[oai(deny_unknown_fields)]
pub struct SettingRowIn {
    pub scope: ScopeName,
    pub key: Option<String>,
    pub channel: ChannelSelector,
    /// `null` in a PATCH removes the row.
    pub setting: Option<SettingName>,
    /// Tenant defaults only: a locked default beats every user setting.
    pub locked: Option<bool>,
}

#[derive(Debug, Clone, Object)]
#[oai(deny_unknown_fields)]
pub struct SettingsIn {
    /// At most 200 rows.
    pub settings: Vec<SettingRowIn>,
}

#[derive(Debug, Clone, Object)]
pub struct SettingRowOut {
    pub scope: ScopeName,
    pub key: Option<String>,
    pub channel: ChannelSelector,
    pub setting: SettingOut,
    pub locked: bool,
}

impl From<&Rule> for SettingRowOut {
    fn from(r: &Rule) -> Self {
        SettingRowOut {
            scope: r.scope.into(),
            key: (r.scope != Scope::Global).then(|| r.key.clone()),
            channel: r.channel.into(),
            setting: r.setting.into(),
            locked: r.locked,
        }
    }
}

/// One cell of the grid: the setting that applies and the level that
/// decided it.
#[derive(Debug, Clone, Object)]
pub struct CellOut {
    pub channel: ChannelName,
    pub setting: SettingOut,
    pub decided_by: LevelName,
}

#[derive(Debug, Clone, Object)]
pub struct GridRowOut {
    pub category: CategoryOut,
    /// One per channel.
    pub channels: Vec<CellOut>,
}

/// A user's preferences: the resolved grid (categories × channels), the
/// user's own rows, and the tenant's defaults (what a preference panel
/// needs to resolve with the WebAssembly core as the user toggles).
#[derive(Debug, Clone, Object)]
pub struct PreferencesOut {
    pub user_id: String,
    pub categories: Vec<GridRowOut>,
    pub settings: Vec<SettingRowOut>,
    pub tenant_defaults: Vec<SettingRowOut>,
}

fn render(user: &UserId, grid: &Grid) -> PreferencesOut {
    PreferencesOut {
        user_id: user.to_string(),
        categories: grid
            .rows
            .iter()
            .map(|row| GridRowOut {
                category: (&row.category).into(),
                channels: row
                    .cells
                    .iter()
                    .map(|(channel, r)| CellOut {
                        channel: (*channel).into(),
                        setting: r.setting.into(),
                        decided_by: r.level.into(),
                    })
                    .collect(),
            })
            .collect(),
        settings: grid.user_rules.iter().map(SettingRowOut::from).collect(),
        tenant_defaults: grid.tenant_rules.iter().map(SettingRowOut::from).collect(),
    }
}

#[derive(Debug, Clone, Object)]
pub struct PreferenceDefaultsOut {
    pub settings: Vec<SettingRowOut>,
}

#[derive(ApiResponse)]
pub enum CategoryPut {
    #[oai(status = 201)]
    Created(Json<CategoryOut>),
    #[oai(status = 200)]
    Replaced(Json<CategoryOut>),
}

#[derive(ApiResponse)]
pub enum CategoryResponse {
    #[oai(status = 200)]
    Ok(Json<CategoryOut>),
}

#[derive(ApiResponse)]
pub enum CategoryListResponse {
    #[oai(status = 200)]
    Ok(Json<CategoryListOut>),
}

#[derive(ApiResponse)]
pub enum PreferencesResponse {
    #[oai(status = 200)]
    Ok(Json<PreferencesOut>),
}

#[derive(ApiResponse)]
pub enum DefaultsResponse {
    #[oai(status = 200)]
    Ok(Json<PreferenceDefaultsOut>),
}

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::unprocessable(ProblemCode::InvalidPreferences, detail)
}

/// Whose rows a body writes: user rows cannot be locked; PUT rows need a
/// setting.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writing {
    UserPatch,
    UserPut,
    DefaultsPut,
}

fn parse_rows(body: &SettingsIn, writing: Writing) -> ApiResult<Vec<SettingChange>> {
    if body.settings.len() > MAX_ROWS {
        return Err(invalid(format!("at most {MAX_ROWS} settings per request")));
    }
    body.settings
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let at = |what: &str| invalid(format!("settings[{i}]: {what}"));
            let scope: Scope = row.scope.into();
            if let (Some(key), false) = (&row.key, scope == Scope::Global) {
                tidings_core::validate_id("key", key).map_err(|e| at(&e.to_string()))?;
            }
            let locked = row.locked.unwrap_or(false);
            if locked && writing != Writing::DefaultsPut {
                return Err(at("only tenant defaults can be locked"));
            }
            if row.setting.is_none() && writing != Writing::UserPatch {
                return Err(at("setting is required (null removes a row only in PATCH)"));
            }
            let setting = row.setting.map_or(Setting::Off, Setting::from);
            let rule = Rule::new(
                scope,
                row.key.as_deref(),
                row.channel.into(),
                setting,
                locked,
            )
            .map_err(|e| at(&e.to_string()))?;
            Ok(SettingChange {
                rule,
                remove: row.setting.is_none(),
            })
        })
        .collect()
}

fn category_problem(err: PreferencesError) -> ApiError {
    match err {
        taken @ PreferencesError::EventTypeTaken { .. } => ApiError::Conflict {
            code: ProblemCode::EventTypeInAnotherCategory,
            detail: taken.to_string(),
            retry_after_secs: None,
        },
        unknown @ PreferencesError::UnknownCategory(_) => {
            ApiError::not_found(ProblemCode::CategoryNotFound, unknown.to_string())
        }
        PreferencesError::Db(db) => db.into(),
    }
}

impl PreferencesApi {
    async fn grid_of(&self, tenant: uuid::Uuid, user: &UserId) -> ApiResult<PreferencesResponse> {
        let grid = preferences::grid(&self.state.pool, tenant, user).await?;
        Ok(PreferencesResponse::Ok(Json(render(user, &grid))))
    }

    async fn write_user(
        &self,
        tenant: uuid::Uuid,
        user: &UserId,
        body: &SettingsIn,
        writing: Writing,
        source: Source,
    ) -> ApiResult<PreferencesResponse> {
        let changes = parse_rows(body, writing)?;
        let owner = Owner::User(user);
        if writing == Writing::UserPut {
            let rules: Vec<Rule> = changes.into_iter().map(|c| c.rule).collect();
            preferences::replace_settings(&self.state.pool, tenant, owner, &rules, source).await?;
        } else {
            preferences::patch_settings(&self.state.pool, tenant, owner, &changes, source).await?;
        }
        self.grid_of(tenant, user).await
    }
}

#[OpenApi(tag = "ApiTags::Preferences")]
impl PreferencesApi {
    /// Create or replace a category.
    ///
    /// Its label, whether it is critical, its default per channel and the event
    /// types it holds. Preferences name categories; alerts of an event type fall
    /// in its category.
    #[oai(
        path = "/v1/categories/:key",
        method = "put",
        operation_id = "categories.put"
    )]
    async fn put_category(
        &self,
        auth: ApiKeyAuth,
        /// The category's key, e.g. `billing`.
        key: Path<String>,
        body: Json<CategoryIn>,
    ) -> ApiResult<CategoryPut> {
        tidings_core::validate_id("key", &key.0)?;
        let label = body.label.trim();
        if label.is_empty() || label.len() > MAX_LABEL_BYTES || label.chars().any(char::is_control)
        {
            return Err(ApiError::unprocessable(
                ProblemCode::InvalidCategory,
                "label must be 1 to 255 bytes without control characters",
            ));
        }
        if body.event_types.len() > MAX_ROWS {
            return Err(ApiError::unprocessable(
                ProblemCode::InvalidCategory,
                format!("at most {MAX_ROWS} event types per category"),
            ));
        }
        let event_types = body
            .event_types
            .iter()
            .map(|e| EventType::parse_as("event_types[]", e.as_str()))
            .collect::<Result<Vec<_>, _>>()?;
        let d = body.defaults.clone().unwrap_or_default();
        let digest =
            |s: Option<SettingName>| matches!(s, Some(SettingName::Daily | SettingName::Weekly));
        if digest(d.in_app) || digest(d.webhook) {
            return Err(ApiError::unprocessable(
                ProblemCode::InvalidCategory,
                "defaults: daily and weekly are digests of email: only email may take them",
            ));
        }
        let defaults = [
            (Channel::InApp, d.in_app),
            (Channel::Email, d.email),
            (Channel::Webhook, d.webhook),
        ]
        .into_iter()
        .filter_map(|(c, s)| s.map(|s| (c, s.into())))
        .collect();
        let spec = CategorySpec {
            label: label.to_owned(),
            critical: body.critical,
            defaults,
            event_types,
        };
        let (created, row) =
            preferences::put_category(&self.state.pool, auth.0.tenant_id, &key.0, &spec)
                .await
                .map_err(category_problem)?;
        let out = Json(CategoryOut::from(&row));
        Ok(if created {
            CategoryPut::Created(out)
        } else {
            CategoryPut::Replaced(out)
        })
    }

    /// Read a category.
    ///
    /// 404 when the tenant has no category with this key.
    #[oai(
        path = "/v1/categories/:key",
        method = "get",
        operation_id = "categories.get"
    )]
    async fn get_category(
        &self,
        auth: ApiKeyAuth,
        /// The category's key, e.g. `billing`.
        key: Path<String>,
    ) -> ApiResult<CategoryResponse> {
        tidings_core::validate_id("key", &key.0)?;
        let row = store::get_category(&self.state.pool, auth.0.tenant_id, &key.0)
            .await?
            .ok_or_else(|| {
                ApiError::not_found(ProblemCode::CategoryNotFound, "no such category")
            })?;
        Ok(CategoryResponse::Ok(Json((&row).into())))
    }

    /// List categories.
    ///
    /// Every category of the tenant, ordered by key.
    #[oai(
        path = "/v1/categories",
        method = "get",
        operation_id = "categories.list"
    )]
    async fn list_categories(&self, auth: ApiKeyAuth) -> ApiResult<CategoryListResponse> {
        let rows = store::list_categories(&self.state.pool, auth.0.tenant_id).await?;
        Ok(CategoryListResponse::Ok(Json(CategoryListOut {
            categories: rows.iter().map(CategoryOut::from).collect(),
        })))
    }

    /// Read a user's preferences.
    ///
    /// The resolved grid (category by channel) with the level that decided each
    /// cell, the user's own rows and the tenant's defaults. The WebAssembly core
    /// resolves the same rows the same way.
    #[oai(
        path = "/v1/users/:user_id/preferences",
        method = "get",
        operation_id = "preferences.get"
    )]
    async fn get_user(
        &self,
        auth: ApiKeyAuth,
        /// The user, as the tenant names them (1–255 bytes, no control characters).
        user_id: Path<String>,
    ) -> ApiResult<PreferencesResponse> {
        let user = UserId::parse(user_id.0)?;
        self.grid_of(auth.0.tenant_id, &user).await
    }

    /// Merge rows into a user's preferences.
    ///
    /// A row with `"setting": null` is removed; other rows are added or replace
    /// the row of the same scope, key and channel. Answers the preferences after
    /// the change.
    #[oai(
        path = "/v1/users/:user_id/preferences",
        method = "patch",
        operation_id = "preferences.patch"
    )]
    async fn patch_user(
        &self,
        auth: ApiKeyAuth,
        /// The user, as the tenant names them (1–255 bytes, no control characters).
        user_id: Path<String>,
        body: Json<SettingsIn>,
    ) -> ApiResult<PreferencesResponse> {
        let user = UserId::parse(user_id.0)?;
        self.write_user(
            auth.0.tenant_id,
            &user,
            &body,
            Writing::UserPatch,
            Source::Api,
        )
        .await
    }

    /// Replace a user's preferences.
    ///
    /// The user's rows become exactly these. Answers the preferences after the
    /// change.
    #[oai(
        path = "/v1/users/:user_id/preferences",
        method = "put",
        operation_id = "preferences.put"
    )]
    async fn put_user(
        &self,
        auth: ApiKeyAuth,
        /// The user, as the tenant names them (1–255 bytes, no control characters).
        user_id: Path<String>,
        body: Json<SettingsIn>,
    ) -> ApiResult<PreferencesResponse> {
        let user = UserId::parse(user_id.0)?;
        self.write_user(
            auth.0.tenant_id,
            &user,
            &body,
            Writing::UserPut,
            Source::Api,
        )
        .await
    }

    /// Read the signed-in user's preferences.
    ///
    /// As `GET /v1/users/{user_id}/preferences`, with a user token: what a
    /// preference panel shows.
    #[oai(
        path = "/v1/me/preferences",
        method = "get",
        operation_id = "me.preferences.get"
    )]
    async fn get_me(&self, auth: UserTokenAuth) -> ApiResult<PreferencesResponse> {
        let user = auth.0;
        self.grid_of(user.tenant_id, &user.user_id).await
    }

    /// Merge rows into the signed-in user's preferences.
    ///
    /// As `PATCH /v1/users/{user_id}/preferences` (`null` removes a row), with a
    /// user token. Locked tenant defaults and critical categories still win.
    #[oai(
        path = "/v1/me/preferences",
        method = "patch",
        operation_id = "me.preferences.patch"
    )]
    async fn patch_me(
        &self,
        auth: UserTokenAuth,
        body: Json<SettingsIn>,
    ) -> ApiResult<PreferencesResponse> {
        let user = auth.0;
        self.write_user(
            user.tenant_id,
            &user.user_id,
            &body,
            Writing::UserPatch,
            Source::User,
        )
        .await
    }

    /// Read the tenant's default preferences.
    ///
    /// The tenant's default rows; locked ones beat every user setting.
    #[oai(
        path = "/v1/preference-defaults",
        method = "get",
        operation_id = "preference_defaults.get"
    )]
    async fn get_defaults(&self, auth: ApiKeyAuth) -> ApiResult<DefaultsResponse> {
        let rules = preferences::tenant_defaults(&self.state.pool, auth.0.tenant_id).await?;
        Ok(DefaultsResponse::Ok(Json(PreferenceDefaultsOut {
            settings: rules.iter().map(SettingRowOut::from).collect(),
        })))
    }

    /// Replace the tenant's default preferences.
    ///
    /// The tenant's default rows become exactly these; a locked row beats every
    /// user setting.
    #[oai(
        path = "/v1/preference-defaults",
        method = "put",
        operation_id = "preference_defaults.put"
    )]
    async fn put_defaults(
        &self,
        auth: ApiKeyAuth,
        body: Json<SettingsIn>,
    ) -> ApiResult<DefaultsResponse> {
        let tenant = auth.0.tenant_id;
        let rules: Vec<Rule> = parse_rows(&body, Writing::DefaultsPut)?
            .into_iter()
            .map(|c| c.rule)
            .collect();
        preferences::replace_settings(
            &self.state.pool,
            tenant,
            Owner::Tenant,
            &rules,
            Source::Admin,
        )
        .await?;
        let rules = preferences::tenant_defaults(&self.state.pool, tenant).await?;
        Ok(DefaultsResponse::Ok(Json(PreferenceDefaultsOut {
            settings: rules.iter().map(SettingRowOut::from).collect(),
        })))
    }
}
