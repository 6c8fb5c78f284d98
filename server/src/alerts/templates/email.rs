//! From a rendered HTML or MJML body to what an email carries: responsive
//! HTML with its CSS inlined, and a text part derived from it when the
//! template has none.

use std::sync::OnceLock;

/// What the HTML body of an email template is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyFormat {
    Html,
    Mjml,
}

/// `rendered` (the template's output) as the HTML an email sends: MJML turned
/// into HTML by mrml (whose loaders are compiled out, so `mj-include`
/// resolves nothing), then every stylesheet inlined by css-inline, which
/// loads no remote or local file (its `http` and `file` features are off and
/// remote loading is refused).
pub fn finish_html(format: BodyFormat, rendered: &str) -> Result<String, String> {
    let html = match format {
        BodyFormat::Html => rendered.to_owned(),
        BodyFormat::Mjml => {
            let parsed = mrml::parse(rendered).map_err(|e| format!("MJML: {e}"))?;
            parsed
                .element
                .render(&mrml::prelude::render::RenderOptions::default())
                .map_err(|e| format!("MJML: {e}"))?
        }
    };
    inliner()
        .inline(&html)
        .map_err(|e| format!("inlining CSS: {e}"))
}

fn inliner() -> &'static css_inline::CSSInliner<'static> {
    static INLINER: OnceLock<css_inline::CSSInliner<'static>> = OnceLock::new();
    INLINER.get_or_init(|| {
        css_inline::CSSInliner::options()
            .load_remote_stylesheets(false)
            // Media queries stay in a <style> for clients that read them.
            .keep_style_tags(true)
            .build()
    })
}

/// A plain-text rendering of `html`: block elements become line breaks,
/// links keep their target in brackets, `<head>`, `<style>` and `<script>`
/// are dropped, entities decoded, blank runs collapsed.
pub fn text_from_html(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let mut rest = html;
    let mut skip_until: Option<&'static str> = None;
    let mut pending_href: Vec<Option<String>> = Vec::new();
    while let Some(lt) = rest.find('<') {
        if skip_until.is_none() {
            out.push_str(&decode_entities(&rest[..lt]));
        }
        let Some(gt) = rest[lt..].find('>') else {
            rest = "";
            break;
        };
        let tag = &rest[lt + 1..lt + gt];
        rest = &rest[lt + gt + 1..];
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '!')
            .collect::<String>()
            .to_ascii_lowercase();
        if let Some(end) = skip_until {
            if closing && name == end {
                skip_until = None;
            }
            continue;
        }
        match name.as_str() {
            "head" | "style" | "script" | "title" if !closing => {
                skip_until = Some(match name.as_str() {
                    "head" => "head",
                    "style" => "style",
                    "script" => "script",
                    _ => "title",
                })
            }
            "br" => out.push('\n'),
            "p" | "div" | "tr" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "table" | "ul"
            | "ol" => out.push('\n'),
            "li" if !closing => out.push_str("\n- "),
            "a" if !closing => pending_href.push(attribute(tag, "href")),
            "a" => {
                if let Some(Some(href)) = pending_href.pop() {
                    if !href.starts_with('#') && !out.trim_end().ends_with(&href) {
                        out.push_str(&format!(" [{href}]"));
                    }
                }
            }
            _ => {}
        }
    }
    if skip_until.is_none() {
        out.push_str(&decode_entities(rest));
    }
    tidy(&out)
}

fn attribute(tag: &str, name: &str) -> Option<String> {
    let at = tag.to_ascii_lowercase().find(&format!("{name}="))?;
    let value = &tag[at + name.len() + 1..];
    let quote = value.chars().next()?;
    let text = if quote == '"' || quote == '\'' {
        value[1..].split(quote).next()?
    } else {
        value.split_whitespace().next()?
    };
    Some(decode_entities(text))
}

fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let Some(semi) = rest[..rest.len().min(12)].find(';') else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..semi];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "nbsp" => Some(' '),
            _ => entity
                .strip_prefix("#x")
                .or_else(|| entity.strip_prefix("#X"))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Lines trimmed, runs of spaces collapsed, at most one blank line in a row.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            blank += 1;
            if blank > 1 || out.is_empty() {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.trim_end().to_owned() + "\n"
}

/// The HTML part of an email that has only text (the plain rendering, when
/// the event type has no template): the text escaped, in a `<pre>`.
pub fn html_from_text(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len() + 64);
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            c => escaped.push(c),
        }
    }
    format!(
        "<!DOCTYPE html><html><body><pre style=\"font-family:sans-serif;white-space:pre-wrap\">{escaped}</pre></body></html>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_derived_from_html() {
        let html = "<html><head><style>p{color:red}</style></head><body><h1>Invoice &amp; co</h1>\
                    <p>Due <b>soon</b>.<br>Pay <a href=\"https://pay.example/1\">here</a>.</p>\
                    <ul><li>one</li><li>two</li></ul></body></html>";
        assert_eq!(
            text_from_html(html),
            "Invoice & co\n\nDue soon.\nPay here [https://pay.example/1].\n\n- one\n- two\n"
        );
    }

    #[test]
    fn css_is_inlined_and_mjml_becomes_html() {
        let html = finish_html(
            BodyFormat::Html,
            "<html><head><style>p { color: red }</style></head><body><p>x</p></body></html>",
        )
        .unwrap();
        assert!(html.contains("<p style=\"color: red"), "{html}");
        let html = finish_html(
            BodyFormat::Mjml,
            "<mjml><mj-body><mj-section><mj-column><mj-text>Hello</mj-text></mj-column></mj-section></mj-body></mjml>",
        )
        .unwrap();
        assert!(html.contains("Hello") && html.contains("<table"), "{html}");
        assert!(finish_html(BodyFormat::Mjml, "<mjml><mj-body>").is_err());
    }

    #[test]
    fn remote_stylesheets_are_not_loaded() {
        let html = "<html><head><link rel=\"stylesheet\" href=\"http://127.0.0.1:9/x.css\"></head><body><p>x</p></body></html>";
        // Refused or ignored, never fetched: either way no network call.
        let _ = finish_html(BodyFormat::Html, html);
    }
}
