//! The sandbox tenants' templates run in (docs/design/templates.md,
//! "The sandbox").
//!
//! One `minijinja` environment for the whole process, built from
//! `Environment::empty()`: no loader (a template cannot include or import
//! anything), no global but `range`, and only the filters and tests listed in
//! [`FILTERS`] and [`TESTS`]. Every render has [`FUEL`] (about one unit per
//! instruction, plus the length of each string a filter works on), a
//! recursion limit and a cap on its output, so no template and no payload
//! can make a render run long, recurse deeply or allocate without bound.
//! HTML bodies are autoescaped; subjects, text bodies and in-app fields are
//! not (they are not HTML).
//!
//! Locale and time zone: the `date`, `number` and `pluralize` filters read
//! the variables `locale` (the locale of the variant being rendered) and
//! `recipient.timezone`.

use std::{io, sync::OnceLock};

use chrono::{DateTime, TimeZone, Utc};
use minijinja::{
    machinery::{get_compiled_template, Instruction, Instructions},
    value::Value,
    AutoEscape, Environment, Error, ErrorKind, State,
};

/// Instructions (and string bytes handed to filters) one render may spend:
/// a loop over a hundred payload items with a dozen expressions each costs
/// a few thousand; `range(100000)` with one expression in its body runs out.
pub const FUEL: u64 = 100_000;
/// Nested macro calls and recursive loops (minijinja's own maximum is 500).
pub const RECURSION_LIMIT: usize = 32;
/// Bytes one rendered part may have: far above a real email body, far
/// below what a worker should hold for one delivery.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// Bytes of a rendered subject, title or action URL (one line).
pub const MAX_LINE_BYTES: usize = 998;

/// The filters a template may use. Anything else is refused at save.
pub const FILTERS: &[&str] = &[
    "escape",
    "e",
    "date",
    "number",
    "pluralize",
    "default",
    "d",
    "length",
    "upper",
    "lower",
    "title",
    "capitalize",
    "trim",
    "join",
    "first",
    "last",
    "round",
    "int",
    "string",
    "replace",
];

/// The tests (`is defined`, ...) a template may use.
pub const TESTS: &[&str] = &[
    "defined",
    "undefined",
    "none",
    "number",
    "string",
    "sequence",
    "mapping",
    "odd",
    "even",
];

/// The parts of a template, each rendered on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Subject,
    Html,
    Text,
    Title,
    Body,
    ActionUrl,
}

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::Subject => "subject",
            Part::Html => "html",
            Part::Text => "text",
            Part::Title => "title",
            Part::Body => "body",
            Part::ActionUrl => "action_url",
        }
    }

    fn max_bytes(self) -> usize {
        match self {
            Part::Subject | Part::Title | Part::ActionUrl => MAX_LINE_BYTES,
            Part::Html | Part::Text | Part::Body => MAX_OUTPUT_BYTES,
        }
    }
}

/// Why a part cannot be rendered, with the line of its source when known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{part}{}: {message}", line.map(|l| format!(", line {l}")).unwrap_or_default())]
pub struct RenderError {
    pub part: &'static str,
    pub line: Option<usize>,
    pub message: String,
}

impl RenderError {
    pub fn new(part: Part, line: Option<usize>, message: impl Into<String>) -> Self {
        RenderError {
            part: part.name(),
            line,
            message: message.into(),
        }
    }

    fn from_minijinja(part: Part, err: &Error) -> Self {
        let message = match err.kind() {
            ErrorKind::OutOfFuel => {
                format!("the template ran out of fuel ({FUEL} units): a loop or a recursion is too long")
            }
            kind => match err.detail() {
                Some(detail) => format!("{kind}: {detail}"),
                None => kind.to_string(),
            },
        };
        RenderError::new(part, err.line(), message)
    }
}

/// A rendered part and the fuel it spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub output: String,
    pub fuel: u64,
}

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::empty();
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_auto_escape_callback(|name| {
            if name == Part::Html.name() {
                AutoEscape::Html
            } else {
                AutoEscape::None
            }
        });
        // A missing value prints nothing, not "none": a recipient without a
        // display name reads "Hello ,", never "Hello none,".
        env.set_formatter(|out, state, value| {
            if value.is_none() || value.is_undefined() {
                Ok(())
            } else {
                minijinja::escape_formatter(out, state, value)
            }
        });
        use minijinja::filters as f;
        env.add_filter("escape", f::escape);
        env.add_filter("e", f::escape);
        env.add_filter("date", date);
        env.add_filter("number", number);
        env.add_filter("pluralize", pluralize);
        env.add_filter("default", f::default);
        env.add_filter("d", f::default);
        env.add_filter("length", f::length);
        env.add_filter("upper", f::upper);
        env.add_filter("lower", f::lower);
        env.add_filter("title", f::title);
        env.add_filter("capitalize", f::capitalize);
        env.add_filter("trim", f::trim);
        env.add_filter("join", f::join);
        env.add_filter("first", f::first);
        env.add_filter("last", f::last);
        env.add_filter("round", f::round);
        env.add_filter("int", f::int);
        env.add_filter("string", f::string);
        env.add_filter("replace", f::replace);
        use minijinja::tests as t;
        env.add_test("defined", t::is_defined);
        env.add_test("undefined", t::is_undefined);
        env.add_test("none", t::is_none);
        env.add_test("number", t::is_number);
        env.add_test("string", t::is_string);
        env.add_test("sequence", t::is_sequence);
        env.add_test("mapping", t::is_mapping);
        env.add_test("odd", t::is_odd);
        env.add_test("even", t::is_even);
        env.add_function("range", minijinja::functions::range);
        env
    })
}

/// Parses `source` and checks that it names only vetted filters and tests,
/// on every branch (a render only meets the branches its data takes).
pub fn check(part: Part, source: &str) -> Result<(), RenderError> {
    let template = environment()
        .template_from_named_str(part.name(), source)
        .map_err(|err| RenderError::from_minijinja(part, &err))?;
    let compiled = get_compiled_template(&template);
    std::iter::once(&compiled.instructions)
        .chain(compiled.blocks.values())
        .try_for_each(|instructions| check_names(part, instructions))
}

fn check_names(part: Part, instructions: &Instructions<'_>) -> Result<(), RenderError> {
    let mut at = 0u32;
    while let Some(instruction) = instructions.get(at) {
        let refused = match instruction {
            Instruction::ApplyFilter(name, ..) if !FILTERS.contains(name) => Some(format!(
                "unknown filter {name:?} (allowed: {})",
                FILTERS.join(", ")
            )),
            Instruction::PerformTest(name, ..) if !TESTS.contains(name) => Some(format!(
                "unknown test {name:?} (allowed: {})",
                TESTS.join(", ")
            )),
            _ => None,
        };
        if let Some(message) = refused {
            return Err(RenderError::new(part, instructions.get_line(at), message));
        }
        at += 1;
    }
    Ok(())
}

/// Renders `source` with `context` under the sandbox's limits.
pub fn render(part: Part, source: &str, context: &Value) -> Result<Rendered, RenderError> {
    let template = environment()
        .template_from_named_str(part.name(), source)
        .map_err(|err| RenderError::from_minijinja(part, &err))?;
    let mut out = CappedWriter {
        bytes: Vec::new(),
        cap: part.max_bytes(),
        overflowed: false,
    };
    let captured = template.render_captured_to(context.clone(), &mut out);
    if out.overflowed {
        return Err(RenderError::new(
            part,
            None,
            format!("the output is longer than {} bytes", part.max_bytes()),
        ));
    }
    let captured = captured.map_err(|err| RenderError::from_minijinja(part, &err))?;
    let fuel = captured
        .state()
        .fuel_levels()
        .map(|(used, _)| used)
        .unwrap_or(0);
    let output = String::from_utf8(out.bytes)
        .map_err(|_| RenderError::new(part, None, "the output is not UTF-8"))?;
    Ok(Rendered { output, fuel })
}

/// The variables a template reads, as dotted paths (`payload.amount`), for the preview.
pub fn variables(part: Part, source: &str) -> Vec<String> {
    let Ok(template) = environment().template_from_named_str(part.name(), source) else {
        return Vec::new();
    };
    let mut names: Vec<String> = template.undeclared_variables(true).into_iter().collect();
    names.sort();
    names
}

struct CappedWriter {
    bytes: Vec<u8>,
    cap: usize,
    overflowed: bool,
}

impl io::Write for CappedWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.bytes.len() + buf.len() > self.cap {
            self.overflowed = true;
            return Err(io::Error::other("output cap"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The locale being rendered (`locale`) and the recipient's time zone.
fn locale_of(state: &State) -> String {
    state
        .lookup("locale")
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| super::locale::ROOT_LOCALE.to_owned())
}

fn timezone_of(state: &State) -> chrono_tz::Tz {
    state
        .lookup("recipient")
        .and_then(|r| r.get_attr("timezone").ok())
        .and_then(|tz| tz.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(chrono_tz::UTC)
}

fn language(locale: &str) -> &str {
    locale.split('-').next().unwrap_or(locale)
}

const MONTHS_EN: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const MONTHS_FR: [&str; 12] = [
    "janvier",
    "février",
    "mars",
    "avril",
    "mai",
    "juin",
    "juillet",
    "août",
    "septembre",
    "octobre",
    "novembre",
    "décembre",
];
const MONTHS_DE: [&str; 12] = [
    "Januar",
    "Februar",
    "März",
    "April",
    "Mai",
    "Juni",
    "Juli",
    "August",
    "September",
    "Oktober",
    "November",
    "Dezember",
];
const MONTHS_ES: [&str; 12] = [
    "enero",
    "febrero",
    "marzo",
    "abril",
    "mayo",
    "junio",
    "julio",
    "agosto",
    "septiembre",
    "octubre",
    "noviembre",
    "diciembre",
];

/// `{{ payload.due | date }}` or `| date("long")`, `"date"`, `"time"`:
/// an RFC 3339 string or Unix seconds, shown in the recipient's time zone
/// with the locale's order and month names (en, fr, de, es; others as en).
fn date(state: &State, value: &Value, style: Option<&str>) -> Result<String, Error> {
    let instant: DateTime<Utc> = if let Some(text) = value.as_str() {
        DateTime::parse_from_rfc3339(text)
            .map(|d| d.with_timezone(&Utc))
            .map_err(|_| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    format!("date expects an RFC 3339 time or Unix seconds, got {text:?}"),
                )
            })?
    } else if let Some(seconds) = value.as_i64() {
        Utc.timestamp_opt(seconds, 0).single().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                "date: Unix seconds out of range",
            )
        })?
    } else {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "date expects an RFC 3339 time or Unix seconds",
        ));
    };
    let local = instant.with_timezone(&timezone_of(state));
    let locale = locale_of(state);
    let lang = language(&locale);
    let months = match lang {
        "fr" => MONTHS_FR,
        "de" => MONTHS_DE,
        "es" => MONTHS_ES,
        _ => MONTHS_EN,
    };
    use chrono::{Datelike, Timelike};
    let (d, m, y) = (local.day(), local.month(), local.year());
    let time = format!("{:02}:{:02}", local.hour(), local.minute());
    let month = months[(m - 1) as usize];
    let long_date = match lang {
        "en" if locale == "en-US" || locale == "en" => format!("{month} {d}, {y}"),
        "de" => format!("{d}. {month} {y}"),
        "es" => format!("{d} de {month} de {y}"),
        _ => format!("{d} {month} {y}"),
    };
    let short_date = match (lang, locale.as_str()) {
        (_, "en-US") | (_, "en") => format!("{m:02}/{d:02}/{y}"),
        ("de", _) => format!("{d:02}.{m:02}.{y}"),
        _ => format!("{d:02}/{m:02}/{y}"),
    };
    Ok(match style.unwrap_or("short") {
        "long" => format!("{long_date} {time}"),
        "date" => long_date,
        "time" => time,
        "iso" => local.to_rfc3339(),
        "short" => format!("{short_date} {time}"),
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("date style {other:?} is not one of short, long, date, time, iso"),
            ))
        }
    })
}

/// `{{ payload.amount | number }}`, `| number(2)`: grouped thousands and
/// the decimal mark of the locale.
fn number(state: &State, value: &Value, decimals: Option<u32>) -> Result<String, Error> {
    let n: f64 = if let Some(i) = value.as_i64() {
        i as f64
    } else {
        f64::try_from(value.clone()).map_err(|_| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("number expects a number, got {value}"),
            )
        })?
    };
    if !n.is_finite() {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "number is not finite",
        ));
    }
    let decimals = decimals
        .unwrap_or(if n.fract() == 0.0 { 0 } else { 2 })
        .min(10) as usize;
    let locale = locale_of(state);
    let (group, mark) = match language(&locale) {
        "fr" => ("\u{202f}", ","),
        "de" | "es" | "it" | "nl" | "pt" => (".", ","),
        _ => (",", "."),
    };
    let text = format!("{:.*}", decimals, n.abs());
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let mut grouped = String::new();
    for (i, digit) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            grouped.push_str(group);
        }
        grouped.push(digit);
    }
    let sign = if n < 0.0 { "-" } else { "" };
    Ok(if fraction.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}{mark}{fraction}")
    })
}

/// `{{ count | pluralize("item", "items") }}`: the singular for one (and,
/// in French, for zero), the plural otherwise.
fn pluralize(state: &State, count: &Value, singular: &str, plural: &str) -> Result<String, Error> {
    let n = count.as_i64().ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("pluralize expects an integer, got {count}"),
        )
    })?;
    let one = match language(&locale_of(state)) {
        "fr" => n == 0 || n.abs() == 1,
        _ => n.abs() == 1,
    };
    Ok(if one { singular } else { plural }.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(payload: serde_json::Value, locale: &str) -> Value {
        Value::from(minijinja::value::Serde(serde_json::json!({
            "payload": payload,
            "locale": locale,
            "recipient": {"timezone": "Europe/Brussels"},
        })))
    }

    #[test]
    fn html_is_escaped_and_text_is_not() {
        let c = ctx(serde_json::json!({"name": "<script>x</script>"}), "en");
        let html = render(Part::Html, "<p>{{ payload.name }}</p>", &c).unwrap();
        assert_eq!(html.output, "<p>&lt;script&gt;x&lt;&#x2f;script&gt;</p>");
        let text = render(Part::Text, "{{ payload.name }}", &c).unwrap();
        assert_eq!(text.output, "<script>x</script>");
        assert!(html.fuel > 0);
    }

    #[test]
    fn a_missing_or_null_value_prints_nothing() {
        let c = ctx(serde_json::json!({"gone": null}), "en");
        for part in [Part::Html, Part::Text] {
            let out = render(
                part,
                "[{{ payload.gone }}|{{ payload.absent }}|{{ recipient.display_name }}]",
                &c,
            )
            .unwrap();
            assert_eq!(out.output, "[||]");
        }
    }

    #[test]
    fn unknown_filters_are_refused_on_every_branch_with_their_line() {
        let err = check(Part::Html, "a\n{% if false %}\n{{ 1 | safe }}{% endif %}").unwrap_err();
        assert_eq!(err.line, Some(3), "{err}");
        assert!(err.message.contains("unknown filter \"safe\""), "{err}");
        assert!(check(Part::Text, "{{ x is callable }}").is_err());
        assert!(check(Part::Text, "{{ x | upper | default('y') }}").is_ok());
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let err = check(Part::Subject, "ok\n{{ unclosed").unwrap_err();
        assert_eq!(err.line, Some(2), "{err}");
    }

    #[test]
    fn long_loops_run_out_of_fuel_and_huge_ranges_are_refused() {
        let c = ctx(serde_json::json!({}), "en");
        let err = render(Part::Text, "{% for i in range(10**9) %}x{% endfor %}", &c).unwrap_err();
        assert!(err.message.contains("too many elements"), "{err}");
        let err = render(
            Part::Text,
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            &c,
        )
        .unwrap_err();
        assert!(err.message.contains("fuel"), "{err}");
    }

    #[test]
    fn deep_recursion_is_stopped() {
        let c = ctx(serde_json::json!({}), "en");
        let err = render(
            Part::Text,
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            &c,
        )
        .unwrap_err();
        assert!(
            err.message.contains("recursion") || err.message.contains("fuel"),
            "{err}"
        );
    }

    #[test]
    fn output_is_capped() {
        let c = ctx(serde_json::json!({"s": "x".repeat(1000)}), "en");
        let err = render(Part::Subject, "{{ payload.s }}", &c).unwrap_err();
        assert!(err.message.contains("longer than"), "{err}");
    }

    #[test]
    fn numbers_dates_and_plurals_follow_locale_and_timezone() {
        let c = ctx(
            serde_json::json!({"n": 1234567.5, "t": "2026-03-01T23:30:00Z"}),
            "fr",
        );
        let out = render(
            Part::Text,
            "{{ payload.n | number }}|{{ payload.t | date('long') }}|{{ 0 | pluralize('jour', 'jours') }}",
            &c,
        )
        .unwrap();
        assert_eq!(
            out.output,
            "1\u{202f}234\u{202f}567,50|2 mars 2026 00:30|jour"
        );
        let c = ctx(serde_json::json!({"n": 1234567}), "en");
        let out = render(
            Part::Text,
            "{{ payload.n | number }} {{ 0 | pluralize('day', 'days') }}",
            &c,
        )
        .unwrap();
        assert_eq!(out.output, "1,234,567 days");
    }
}
