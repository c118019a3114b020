//! The page frame (head, navigation, sign-out) and how values are shown: times,
//! durations, states, sparklines. maud escapes every value it interpolates.

use std::time::Duration;

use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};

use crate::domain::TaskState;

/// The navigation, in order: (path, label). A page that lands later (schedules,
/// queue settings) is one more line here and one more route.
const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/tasks", "Tasks"),
    ("/dead", "Dead letters"),
    ("/workers", "Workers"),
    ("/queues", "Queues"),
    ("/schedules", "Schedules"),
];

/// Who is looking, and the CSRF token their forms carry.
#[derive(Clone)]
pub struct Viewer {
    /// The admin token's name, when auth is on and they signed in.
    pub name: Option<String>,
    pub csrf: String,
}

/// A whole page. `current` is the nav path to mark as the current page.
pub fn page(title: &str, current: &str, viewer: Option<&Viewer>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="htmx-config" content=r#"{"includeIndicatorStyles":false,"allowEval":false}"#;
                title { (title) " · taskbroker" }
                link rel="stylesheet" href="/assets/console.css";
                link rel="icon" href="/assets/favicon.svg" type="image/svg+xml";
                script src="/assets/htmx.min.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/" { "taskbroker" }
                    nav aria-label="Main" {
                        ul {
                            @for (path, label) in NAV {
                                li {
                                    @if *path == current {
                                        a href=(path) aria-current="page" { (label) }
                                    } @else {
                                        a href=(path) { (label) }
                                    }
                                }
                            }
                        }
                    }
                    @if let Some(v) = viewer {
                        @if let Some(name) = &v.name {
                            form.signout method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(v.csrf);
                                span { "Signed in as " (name) }
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main #main { (body) }
            }
        }
    }
}

/// A hidden CSRF field for a form.
pub fn csrf(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf" value=(viewer.csrf); }
}

/// What a confirmation page asks and explains, and the button that does it.
pub struct Ask {
    pub action: &'static str,
    pub question: &'static str,
    pub button: &'static str,
    pub explain: &'static str,
    pub danger: bool,
}

/// Declares `pub async fn $name`, the GET handler of a confirmed action: the
/// page the calling module's `confirm(console, viewer, key, ask)` renders for
/// `$ask` and the path's key (a queue name, a schedule id).
macro_rules! confirm_handler {
    ($name:ident, $ask:expr) => {
        pub async fn $name(
            axum::extract::State(console): axum::extract::State<std::sync::Arc<super::Console>>,
            axum::Extension(viewer): axum::Extension<super::Viewer>,
            axum::extract::Path(key): axum::extract::Path<String>,
        ) -> Result<maud::Markup, super::PageError> {
            confirm(&console, &viewer, &key, &$ask).await
        }
    };
}
pub(super) use confirm_handler;

/// The foot of a confirmation page: a POST to `{base}/{action}` carrying the
/// CSRF field, or the way back to `base`.
pub fn confirm_form(
    viewer: &Viewer,
    base: &str,
    action: &str,
    button: &str,
    danger: bool,
) -> Markup {
    html! {
        form.confirm method="post" action={ (base) "/" (action) } {
            (csrf(viewer))
            button type="submit" class=[danger.then_some("danger")] { (button) }
            " "
            a href=(base) { "Cancel, go back" }
        }
    }
}

/// A time in UTC, machine-readable too.
pub fn time(t: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)) {
            (t.format("%Y-%m-%d %H:%M:%S"))
        }
    }
}

pub fn opt_time(t: Option<DateTime<Utc>>) -> Markup {
    match t {
        Some(t) => time(t),
        None => html! { span.muted { "—" } },
    }
}

/// A duration for people: "850 ms", "4.2 s", "3 min 5 s", "2 h 10 min", "3 d 4 h".
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    match s {
        _ if ms < 1000 => format!("{ms} ms"),
        0..60 => format!("{:.1} s", d.as_secs_f64()),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86400 => format!("{} h {} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} d {} h", s / 86400, (s % 86400) / 3600),
    }
}

/// How long ago `t` was at `now` ("—" for the future).
pub fn age(now: DateTime<Utc>, t: DateTime<Utc>) -> String {
    (now - t)
        .to_std()
        .map(duration)
        .unwrap_or_else(|_| "—".into())
}

pub fn state_name(s: TaskState) -> &'static str {
    match s {
        TaskState::Scheduled => "scheduled",
        TaskState::Ready => "ready",
        TaskState::Leased => "leased",
        TaskState::Succeeded => "succeeded",
        TaskState::Dead => "dead",
        TaskState::Cancelled => "cancelled",
        TaskState::Blocked => "blocked",
    }
}

pub fn parse_state(s: &str) -> Option<TaskState> {
    Some(match s {
        "scheduled" => TaskState::Scheduled,
        "ready" => TaskState::Ready,
        "leased" => TaskState::Leased,
        "succeeded" => TaskState::Succeeded,
        "dead" => TaskState::Dead,
        "cancelled" => TaskState::Cancelled,
        "blocked" => TaskState::Blocked,
        _ => return None,
    })
}

pub const STATES: [TaskState; 6] = [
    TaskState::Scheduled,
    TaskState::Ready,
    TaskState::Leased,
    TaskState::Succeeded,
    TaskState::Dead,
    TaskState::Cancelled,
];

/// A state as a labelled badge (colour is never the only cue: the word is there).
pub fn badge(s: TaskState) -> Markup {
    let name = state_name(s);
    html! { span class={ "badge " (name) } { (name) } }
}

/// An inline SVG sparkline of `values` (drawn on a scale from 0 to `max`, or to
/// the largest value), with a text alternative.
pub fn sparkline(values: &[f64], max: Option<f64>, label: &str) -> Markup {
    const W: f64 = 120.0;
    const H: f64 = 28.0;
    let top = max
        .unwrap_or_else(|| values.iter().copied().fold(0.0, f64::max))
        .max(f64::MIN_POSITIVE);
    let step = if values.len() > 1 {
        W / (values.len() - 1) as f64
    } else {
        W
    };
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let y = H - 1.0 - (v / top).clamp(0.0, 1.0) * (H - 2.0);
            format!("{:.1},{:.1}", i as f64 * step, y)
        })
        .collect();
    html! {
        svg.spark role="img" aria-label=(label) viewBox="0 0 120 28" width="120" height="28"
            preserveAspectRatio="none" {
            title { (label) }
            polyline points=(points.join(" ")) {}
        }
    }
}

/// A count with thousands separators.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A text cut to `max` characters, with an ellipsis when cut.
pub fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

/// A link built from a path and query pairs (values percent-encoded).
pub fn href(path: &str, pairs: &[(&str, &str)]) -> String {
    let q: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    if q.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", q.join("&"))
    }
}

/// Percent-encodes everything but unreserved characters.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A notice after an action (polite live region for screen readers).
pub fn notice(text: Option<&str>) -> Markup {
    html! {
        @if let Some(t) = text {
            p.notice role="status" { (t) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_counts_and_links_read_well() {
        assert_eq!(duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(duration(Duration::from_millis(4200)), "4.2 s");
        assert_eq!(duration(Duration::from_secs(185)), "3 min 5 s");
        assert_eq!(duration(Duration::from_secs(7800)), "2 h 10 min");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(12), "12");
        assert_eq!(
            href("/tasks", &[("queue", "a b&c"), ("state", "")]),
            "/tasks?queue=a%20b%26c"
        );
        assert_eq!(short("abcdef", 3), "abc…");
    }

    #[test]
    fn values_are_escaped() {
        let m = page(
            "<t>",
            "/",
            None,
            html! { p { ("<script>alert(1)</script>") } },
        );
        let s = m.into_string();
        assert!(s.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!s.contains("<script>alert"));
    }
}
