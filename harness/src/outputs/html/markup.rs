//! The small pieces every section of `report.html` is made of: escaping, links, `data:`
//! URIs, durations, outcome classes and badges, and the cleanup table.

use kandev_report::{CheckOutcome, CleanupOutcome, CleanupRecord, Outcome, StepOutcome};
use std::fmt::Write as _;

/// Text for HTML content and attribute values: `& < > " '` as references, and the
/// characters HTML does not allow in a document (controls other than tab and newline,
/// noncharacters) as visible `\u{..}`.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' | '\t' => out.push(c),
            c if c.is_control() || is_noncharacter(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn is_noncharacter(c: char) -> bool {
    let n = c as u32;
    (0xFDD0..=0xFDEF).contains(&n) || (n & 0xFFFE) == 0xFFFE
}

/// A relative path as an `href`: each segment percent-encoded where URLs need it.
pub(super) fn href(relative: &str) -> String {
    let mut out = String::new();
    for b in relative.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

/// Standard base64 with padding (for `data:` URIs).
pub(super) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub(super) fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

pub(super) fn or_dash(value: Option<impl ToString>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "—".into())
}

/// The CSS class of an outcome (its `snake_case` name).
pub(super) fn outcome_class(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Passed => "passed",
        Outcome::Failed => "failed",
        Outcome::Errored => "errored",
        Outcome::TimedOut => "timed_out",
        Outcome::Cancelled => "cancelled",
        Outcome::Skipped => "skipped",
        Outcome::Incompatible => "incompatible",
        Outcome::Leaked => "leaked",
    }
}

pub(super) fn check_class(outcome: CheckOutcome) -> &'static str {
    match outcome {
        CheckOutcome::Passed => "passed",
        CheckOutcome::Failed => "failed",
        CheckOutcome::NotReached => "not_reached",
        CheckOutcome::NotJudged => "not_judged",
    }
}

pub(super) fn step_class(outcome: StepOutcome) -> &'static str {
    match outcome {
        StepOutcome::Passed => "passed",
        StepOutcome::Failed => "failed",
        StepOutcome::Errored => "errored",
        StepOutcome::Incompatible => "incompatible",
    }
}

pub(super) fn badge(class: &str, text: &str) -> String {
    format!(
        "<span class=\"badge {}\">{}</span>",
        escape(class),
        escape(text)
    )
}

pub(super) fn cleanup_table(h: &mut String, records: &[CleanupRecord]) {
    h.push_str("<table class=\"cleanup\"><tr><th>object</th><th>outcome</th><th>took</th><th>error</th></tr>\n");
    for c in records {
        let outcome = match c.outcome {
            CleanupOutcome::Removed => "removed",
            CleanupOutcome::AlreadyGone => "already gone",
            CleanupOutcome::Kept => "kept",
            CleanupOutcome::Failed => "failed",
        };
        let _ = writeln!(
            h,
            "<tr><td class=\"mono\">{}</td><td>{}</td><td class=\"duration\">{} ms</td><td>{}</td></tr>",
            escape(&c.object),
            badge(
                if c.outcome == CleanupOutcome::Failed {
                    "failed"
                } else {
                    "passed"
                },
                outcome
            ),
            c.duration_ms,
            escape(c.error.as_deref().unwrap_or(""))
        );
    }
    h.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_characters_html_forbids() {
        assert_eq!(
            escape("a<b>&\"c\"'\u{1b}[31m\u{0}\u{7f}\u{fffe}\n\t"),
            "a&lt;b&gt;&amp;&quot;c&quot;&#39;\\u{001b}[31m\\u{0000}\\u{007f}\\u{fffe}\n\t"
        );
    }

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }
}
