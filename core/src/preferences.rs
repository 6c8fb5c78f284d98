//! Notification preferences: which setting applies to one (event type,
//! category, channel) for one user, and which level of the rules decided it.
//!
//! Settings are sparse rows (a [`Rule`]): a scope (everything, one category,
//! one event type), a channel or every channel (`*`), and a [`Setting`]. A
//! user has their own rows; the tenant has default rows, which it may lock.
//! [`resolve`] reads them, most specific first (docs/design/preferences.md):
//!
//! 1. a critical category is `on`, whatever anyone set;
//! 2. a locked tenant default;
//! 3. the user's row for the event type, then the category, then global;
//! 4. the tenant default in the same order;
//! 5. the category's own default for the channel;
//! 6. `on`.
//!
//! Within one scope a row for the channel beats a row for every channel.
//! The server applies this at fan-out and the inbox page runs the same
//! function compiled to WebAssembly, so the two never disagree;
//! `core/preferences.json` holds the vectors both check.

use std::{fmt, str::FromStr};

use crate::key::Channel;

/// What a user receives on one channel. `daily` and `weekly` are the
/// digest cadences; only `on` and `off` have a meaning at fan-out today.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Setting {
    On,
    Off,
    Daily,
    Weekly,
}

impl Setting {
    pub const ALL: [Setting; 4] = [Setting::On, Setting::Off, Setting::Daily, Setting::Weekly];

    pub const fn as_str(self) -> &'static str {
        match self {
            Setting::On => "on",
            Setting::Off => "off",
            Setting::Daily => "daily",
            Setting::Weekly => "weekly",
        }
    }
}

/// The scope of a rule, least specific last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    EventType,
    Category,
    Global,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::EventType, Scope::Category, Scope::Global];

    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::EventType => "event_type",
            Scope::Category => "category",
            Scope::Global => "global",
        }
    }
}

/// The level of the rules that decided a [`Resolution`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
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
    /// The category's default for the channel.
    CategoryDefault,
    /// Nothing was set: `on`.
    Fallback,
}

impl Level {
    pub const ALL: [Level; 10] = [
        Level::Critical,
        Level::Locked,
        Level::UserEventType,
        Level::UserCategory,
        Level::UserGlobal,
        Level::TenantEventType,
        Level::TenantCategory,
        Level::TenantGlobal,
        Level::CategoryDefault,
        Level::Fallback,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Level::Critical => "critical",
            Level::Locked => "locked",
            Level::UserEventType => "user_event_type",
            Level::UserCategory => "user_category",
            Level::UserGlobal => "user_global",
            Level::TenantEventType => "tenant_event_type",
            Level::TenantCategory => "tenant_category",
            Level::TenantGlobal => "tenant_global",
            Level::CategoryDefault => "category_default",
            Level::Fallback => "fallback",
        }
    }

    fn user(scope: Scope) -> Level {
        match scope {
            Scope::EventType => Level::UserEventType,
            Scope::Category => Level::UserCategory,
            Scope::Global => Level::UserGlobal,
        }
    }

    fn tenant(scope: Scope) -> Level {
        match scope {
            Scope::EventType => Level::TenantEventType,
            Scope::Category => Level::TenantCategory,
            Scope::Global => Level::TenantGlobal,
        }
    }
}

macro_rules! names {
    ($($ty:ident => $what:literal),*) => {$(
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = PreferenceError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $ty::ALL
                    .into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| PreferenceError::Unknown { what: $what, value: s.to_owned() })
            }
        }
    )*};
}

names!(Setting => "setting", Scope => "scope", Level => "level");

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreferenceError {
    #[error("unknown {what} {value:?}")]
    Unknown { what: &'static str, value: String },
    #[error("a global rule has no key")]
    GlobalWithKey,
    #[error("a {0} rule needs a key")]
    MissingKey(Scope),
    #[error("daily and weekly are digests of email: the channel must be email")]
    DigestNotEmail,
}

/// One sparse settings row. `key` is the category key or the event type;
/// empty for `global`. `channel: None` is every channel (`*`). `locked`
/// only means something on a tenant default.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    pub scope: Scope,
    pub key: String,
    pub channel: Option<Channel>,
    pub setting: Setting,
    pub locked: bool,
}

impl Rule {
    /// A rule whose key agrees with its scope.
    pub fn new(
        scope: Scope,
        key: Option<&str>,
        channel: Option<Channel>,
        setting: Setting,
        locked: bool,
    ) -> Result<Rule, PreferenceError> {
        if matches!(setting, Setting::Daily | Setting::Weekly) && channel != Some(Channel::Email) {
            return Err(PreferenceError::DigestNotEmail);
        }
        let key = match (scope, key.filter(|k| !k.is_empty())) {
            (Scope::Global, None) => String::new(),
            (Scope::Global, Some(_)) => return Err(PreferenceError::GlobalWithKey),
            (scope, None) => return Err(PreferenceError::MissingKey(scope)),
            (_, Some(key)) => key.to_owned(),
        };
        Ok(Rule {
            scope,
            key,
            channel,
            setting,
            locked,
        })
    }

    fn applies_to(&self, target: &Target<'_>, scope: Scope, channel: Option<Channel>) -> bool {
        self.scope == scope
            && self.channel == channel
            && match scope {
                Scope::Global => true,
                Scope::Category => target.category.is_some_and(|c| c.key == self.key),
                Scope::EventType => target.event_type == Some(self.key.as_str()),
            }
    }
}

/// A category as resolution needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Category {
    pub key: String,
    pub critical: bool,
    /// The category's default per channel, in the order of `Channel::ALL`.
    pub defaults: [Option<Setting>; 3],
}

impl Category {
    pub fn default_for(&self, channel: Channel) -> Option<Setting> {
        self.defaults[channel_index(channel)]
    }

    pub fn set_default(&mut self, channel: Channel, setting: Option<Setting>) {
        self.defaults[channel_index(channel)] = setting;
    }
}

fn channel_index(channel: Channel) -> usize {
    match channel {
        Channel::InApp => 0,
        Channel::Email => 1,
        Channel::Webhook => 2,
    }
}

/// What is being decided: one channel of one notification, or (with no
/// event type) one cell of a category × channel grid.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub event_type: Option<&'a str>,
    pub category: Option<&'a Category>,
    pub channel: Channel,
}

/// The setting that applies and the level that decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resolution {
    pub setting: Setting,
    pub level: Level,
}

/// The rule of `rules` that applies to `target`, most specific first:
/// event type, category, global; within each the channel's row, then `*`.
fn most_specific<'r>(
    rules: &'r [Rule],
    target: &Target<'_>,
    keep: impl Fn(&Rule) -> bool,
) -> Option<&'r Rule> {
    Scope::ALL.into_iter().find_map(|scope| {
        [Some(target.channel), None]
            .into_iter()
            .find_map(|channel| {
                rules
                    .iter()
                    .find(|r| keep(r) && r.applies_to(target, scope, channel))
            })
    })
}

/// The setting of `target` for a user with rows `user`, in a tenant with
/// default rows `tenant`. A `locked` flag on a user row is ignored.
pub fn resolve(target: &Target<'_>, user: &[Rule], tenant: &[Rule]) -> Resolution {
    let decided = |setting, level| Resolution { setting, level };
    if target.category.is_some_and(|c| c.critical) {
        return decided(Setting::On, Level::Critical);
    }
    if let Some(rule) = most_specific(tenant, target, |r| r.locked) {
        return decided(rule.setting, Level::Locked);
    }
    if let Some(rule) = most_specific(user, target, |_| true) {
        return decided(rule.setting, Level::user(rule.scope));
    }
    if let Some(rule) = most_specific(tenant, target, |_| true) {
        return decided(rule.setting, Level::tenant(rule.scope));
    }
    if let Some(setting) = target.category.and_then(|c| c.default_for(target.channel)) {
        return decided(setting, Level::CategoryDefault);
    }
    decided(Setting::On, Level::Fallback)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rule(scope: Scope, key: &str, channel: Option<Channel>, setting: Setting) -> Rule {
        Rule::new(scope, Some(key), channel, setting, false).expect("valid rule")
    }

    fn billing(critical: bool) -> Category {
        Category {
            key: "billing".into(),
            critical,
            defaults: [None, Some(Setting::Off), None],
        }
    }

    #[test]
    fn each_level_decides_when_nothing_above_it_applies() {
        let cat = billing(false);
        let target = Target {
            event_type: Some("invoice.overdue"),
            category: Some(&cat),
            channel: Channel::Email,
        };
        let none: &[Rule] = &[];
        assert_eq!(
            resolve(&target, none, none),
            Resolution {
                setting: Setting::Off,
                level: Level::CategoryDefault
            }
        );
        let global_on = Rule::new(Scope::Global, None, None, Setting::On, false).expect("ok");
        assert_eq!(
            resolve(&target, none, std::slice::from_ref(&global_on)).level,
            Level::TenantGlobal
        );
        let user = [rule(Scope::Category, "billing", None, Setting::On)];
        assert_eq!(
            resolve(&target, &user, std::slice::from_ref(&global_on)).level,
            Level::UserCategory
        );
        let locked = Rule {
            locked: true,
            setting: Setting::Off,
            ..global_on.clone()
        };
        assert_eq!(
            resolve(&target, &user, &[locked]),
            Resolution {
                setting: Setting::Off,
                level: Level::Locked
            }
        );
        let critical = billing(true);
        let target = Target {
            category: Some(&critical),
            ..target
        };
        assert_eq!(
            resolve(&target, &user, &[]),
            Resolution {
                setting: Setting::On,
                level: Level::Critical
            }
        );
    }

    #[test]
    fn a_rule_for_the_channel_beats_one_for_every_channel_in_the_same_scope() {
        let target = Target {
            event_type: None,
            category: None,
            channel: Channel::InApp,
        };
        let user = [
            Rule::new(Scope::Global, None, None, Setting::Off, false).expect("ok"),
            Rule::new(
                Scope::Global,
                None,
                Some(Channel::InApp),
                Setting::On,
                false,
            )
            .expect("ok"),
        ];
        assert_eq!(resolve(&target, &user, &[]).setting, Setting::On);
    }

    #[test]
    fn rule_keys_agree_with_their_scope() {
        assert_eq!(
            Rule::new(Scope::Global, Some("x"), None, Setting::On, false),
            Err(PreferenceError::GlobalWithKey)
        );
        assert_eq!(
            Rule::new(Scope::Category, None, None, Setting::On, false),
            Err(PreferenceError::MissingKey(Scope::Category))
        );
        assert!("sometimes".parse::<Setting>().is_err());
        for level in Level::ALL {
            assert_eq!(level.as_str().parse::<Level>(), Ok(level));
        }
    }

    fn any_rule(locked: bool) -> impl Strategy<Value = Rule> {
        (
            0usize..3,
            prop::sample::select(vec!["billing", "comments", "invoice.overdue"]),
            prop::option::of(prop::sample::select(Channel::ALL.to_vec())),
            prop::sample::select(vec![Setting::On, Setting::Off]),
            any::<bool>(),
        )
            .prop_map(move |(scope, key, channel, setting, lock)| {
                let scope = Scope::ALL[scope];
                let key = (scope != Scope::Global).then_some(key);
                Rule::new(scope, key, channel, setting, locked && lock).expect("valid")
            })
    }

    proptest! {
        /// A user row can change the outcome only when nothing locked or
        /// critical decided; and a critical category is always `on`.
        #[test]
        fn users_cannot_override_critical_or_locked(
            user in prop::collection::vec(any_rule(false), 0..6),
            tenant in prop::collection::vec(any_rule(true), 0..6),
            critical in any::<bool>(),
            channel in prop::sample::select(Channel::ALL.to_vec()),
        ) {
            let cat = Category { critical, ..billing(false) };
            let target = Target { event_type: Some("invoice.overdue"), category: Some(&cat), channel };
            let with = resolve(&target, &user, &tenant);
            let without = resolve(&target, &[], &tenant);
            if critical {
                prop_assert_eq!(with, Resolution { setting: Setting::On, level: Level::Critical });
            }
            if matches!(without.level, Level::Critical | Level::Locked) {
                prop_assert_eq!(with, without);
            }
        }
    }
}
