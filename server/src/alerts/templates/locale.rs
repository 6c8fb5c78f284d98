//! Locales and time zones of recipients: checked once on entry, then trusted.
//!
//! A locale is checked for the shape of a BCP 47 language tag (RFC 5646,
//! "langtag": a 2–3 or 5–8 letter language, then subtags of 1–8 letters or
//! digits, none starting with `x-` handling beyond the shape); whether the
//! language exists is not checked, since a template for it is what matters.
//! It is kept in its canonical case (`fr-BE`, `zh-Hant-TW`) so that lookups
//! compare equal strings. A time zone must be a name of the IANA database as
//! `chrono-tz` compiles it in.

use std::fmt;

/// The last locale of every fallback chain.
pub const ROOT_LOCALE: &str = "en";

/// A BCP 47 language tag in canonical case.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Locale(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocaleError {
    #[error("locale {0:?} is not a BCP 47 language tag (for example en, fr-BE, zh-Hant-TW)")]
    NotALanguageTag(String),
    #[error("timezone {0:?} is not an IANA time zone name (for example Europe/Brussels)")]
    UnknownTimezone(String),
}

impl Locale {
    pub fn parse(text: &str) -> Result<Locale, LocaleError> {
        let bad = || LocaleError::NotALanguageTag(text.to_owned());
        if text.is_empty() || text.len() > 35 {
            return Err(bad());
        }
        let mut subtags = text.split(['-', '_']);
        let language = subtags.next().unwrap_or_default();
        if !(matches!(language.len(), 2 | 3 | 5..=8)
            && language.chars().all(|c| c.is_ascii_alphabetic()))
        {
            return Err(bad());
        }
        let mut canonical = language.to_ascii_lowercase();
        for (i, subtag) in subtags.enumerate() {
            if subtag.is_empty()
                || subtag.len() > 8
                || !subtag.chars().all(|c| c.is_ascii_alphanumeric())
            {
                return Err(bad());
            }
            canonical.push('-');
            // RFC 5646 §2.1.1: regions upper case, scripts title case.
            match subtag.len() {
                2 if i < 2 && subtag.chars().all(|c| c.is_ascii_alphabetic()) => {
                    canonical.push_str(&subtag.to_ascii_uppercase())
                }
                4 if i == 0 && subtag.chars().all(|c| c.is_ascii_alphabetic()) => {
                    canonical.push_str(&subtag[..1].to_ascii_uppercase());
                    canonical.push_str(&subtag[1..].to_ascii_lowercase());
                }
                _ => canonical.push_str(&subtag.to_ascii_lowercase()),
            }
        }
        Ok(Locale(canonical))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The language subtag: `fr` of `fr-BE`.
    pub fn language(&self) -> &str {
        self.0.split('-').next().unwrap_or(&self.0)
    }
}

impl fmt::Display for Locale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An IANA time zone name, checked against the compiled-in database.
pub fn parse_timezone(text: &str) -> Result<chrono_tz::Tz, LocaleError> {
    text.parse::<chrono_tz::Tz>()
        .map_err(|_| LocaleError::UnknownTimezone(text.to_owned()))
}

/// The locales to try, most specific first: the user's (`fr-BE`), its
/// language (`fr`), the tenant's default (and its language), then `en`;
/// each once.
pub fn fallback_chain(user: Option<&Locale>, tenant_default: Option<&Locale>) -> Vec<String> {
    let mut chain: Vec<String> = Vec::with_capacity(5);
    let mut push = |tag: &str| {
        if !chain.iter().any(|c| c == tag) {
            chain.push(tag.to_owned());
        }
    };
    for locale in [user, tenant_default].into_iter().flatten() {
        push(locale.as_str());
        push(locale.language());
    }
    push(ROOT_LOCALE);
    chain
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_tags_are_checked_for_shape_and_put_in_canonical_case() {
        for (input, canonical) in [
            ("en", "en"),
            ("FR-be", "fr-BE"),
            ("fr_BE", "fr-BE"),
            ("zh-hant-tw", "zh-Hant-TW"),
            ("es-419", "es-419"),
            ("de-CH-1996", "de-CH-1996"),
        ] {
            assert_eq!(Locale::parse(input).unwrap().as_str(), canonical);
        }
        for bad in [
            "",
            "e",
            "englishlanguage",
            "fr-",
            "fr--BE",
            "fr BE",
            "1r",
            "fr-BE<script>",
            "fr-abcdefghi",
        ] {
            assert!(Locale::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn timezones_are_names_of_the_iana_database() {
        assert!(parse_timezone("Europe/Brussels").is_ok());
        assert!(parse_timezone("UTC").is_ok());
        assert!(parse_timezone("Mars/Olympus").is_err());
        assert!(parse_timezone("+02:00").is_err());
    }

    #[test]
    fn fallback_goes_user_then_language_then_tenant_then_english() {
        let user = Locale::parse("fr-BE").unwrap();
        let tenant = Locale::parse("de").unwrap();
        assert_eq!(
            fallback_chain(Some(&user), Some(&tenant)),
            ["fr-BE", "fr", "de", "en"]
        );
        assert_eq!(fallback_chain(None, None), ["en"]);
        let english = Locale::parse("en-GB").unwrap();
        assert_eq!(fallback_chain(Some(&english), None), ["en-GB", "en"]);
    }
}
