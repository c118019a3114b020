//! Who may use the console, and the protections of every request.
//!
//! - With auth on, a sign-in form takes an admin token; the broker answers with a
//!   session cookie `tb_session` = `EXPIRY.MAC`, where MAC is an HMAC-SHA256 of
//!   the expiry keyed by that token. The token itself never leaves the sign-in
//!   request and is never logged; sessions survive a restart and work on every
//!   replica with the same tokens; removing a token ends its sessions.
//! - Every browser gets a random `tb_anon` cookie; the CSRF token of its forms is
//!   an HMAC keyed by that cookie. Both cookies are HttpOnly and SameSite=Strict,
//!   so another site can neither send them nor read the token. Every POST is
//!   refused unless its `csrf` field matches, and unless it comes from this site
//!   (Origin and Sec-Fetch-Site, when the browser sends them).
//! - Every response carries `Cache-Control: no-store` and a Content Security
//!   Policy that allows only this origin's scripts and styles.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Form;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use ring::hmac;
use serde::Deserialize;

use super::{Console, Viewer, layout};
use crate::domain::token::{Role, TokenEntry};

const SESSION_COOKIE: &str = "tb_session";
const ANON_COOKIE: &str = "tb_anon";
/// How long a sign-in lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Largest POST body the console reads (its forms are a few fields).
const MAX_FORM_BYTES: usize = 64 * 1024;

/// The configured tokens, as the console checks them.
pub struct Gate {
    /// Every token with its role and name; empty = auth off.
    tokens: Vec<(hmac::Key, Vec<u8>, Role, String)>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

fn session_message(expiry: u64) -> String {
    format!("taskbroker-console-session:{expiry}")
}

/// The CSRF token of a browser's anonymous cookie.
fn csrf_for(anon: &str) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, anon.as_bytes());
    hex(hmac::sign(&key, b"taskbroker-console-csrf").as_ref())
}

impl Gate {
    pub fn new(tokens: &[TokenEntry]) -> Self {
        Gate {
            tokens: tokens
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let name = t.name.clone().unwrap_or_else(|| format!("token-{}", i + 1));
                    let key = hmac::Key::new(hmac::HMAC_SHA256, t.token.as_bytes());
                    (key, t.token.as_bytes().to_vec(), t.role, name)
                })
                .collect(),
        }
    }

    pub fn auth_on(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The name of the admin token that signed this session, if it is valid now.
    fn session_name(&self, cookie: &str, now: u64) -> Option<String> {
        let (expiry, mac) = cookie.split_once('.')?;
        let expiry: u64 = expiry.parse().ok()?;
        if expiry <= now {
            return None;
        }
        let msg = session_message(expiry);
        let mut found = None;
        // Check every token so the time taken does not say which one matched.
        for (key, _, role, name) in &self.tokens {
            let ok = hex(hmac::sign(key, msg.as_bytes()).as_ref());
            if *role == Role::Admin && constant_time_eq(ok.as_bytes(), mac.as_bytes()) {
                found = Some(name.clone());
            }
        }
        found
    }

    /// A new session cookie value for a token, or why it is refused.
    fn sign_in(&self, token: &str) -> Result<(String, String), &'static str> {
        let mut found = None;
        for (key, t, role, name) in &self.tokens {
            if constant_time_eq(t, token.as_bytes()) {
                found = Some((key, *role, name));
            }
        }
        let (key, role, name) = found.ok_or("That token is not valid.")?;
        if role != Role::Admin {
            return Err("That token is valid but not an admin token; the console needs one.");
        }
        let expiry = unix_now() + SESSION_TTL.as_secs();
        let mac = hex(hmac::sign(key, session_message(expiry).as_bytes()).as_ref());
        Ok((format!("{expiry}.{mac}"), name.clone()))
    }
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn set_cookie(name: &str, value: &str, max_age: Duration, secure: bool) -> HeaderValue {
    let v = format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        max_age.as_secs(),
        if secure { "; Secure" } else { "" }
    );
    HeaderValue::from_str(&v).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Whether the browser reached us over HTTPS (through a proxy that says so):
/// then cookies are marked Secure. The port itself speaks plain HTTP.
fn https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// A request from another site (when the browser says so).
fn cross_site(headers: &HeaderMap) -> bool {
    let fetch_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("same-origin");
    if !matches!(fetch_site, "same-origin" | "none") {
        return true;
    }
    let (Some(origin), Some(host)) = (
        headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
        headers.get(header::HOST).and_then(|v| v.to_str().ok()),
    ) else {
        return false;
    };
    let origin_host = origin.split_once("://").map_or(origin, |(_, h)| h);
    origin_host != host
}

/// The `csrf` field of a urlencoded form (the token is hex: no decoding needed).
fn csrf_field(body: &[u8]) -> Option<&[u8]> {
    body.split(|b| *b == b'&')
        .find_map(|kv| kv.strip_prefix(b"csrf="))
}

fn refuse(status: StatusCode, title: &str, message: &str) -> Response {
    let body = html! {
        h1 { (title) }
        p.error role="alert" { (message) }
    };
    (status, layout::page(title, "", None, body)).into_response()
}

fn security_headers(h: &mut HeaderMap) {
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
}

/// Every console request passes here: anonymous cookie, sign-in, CSRF and
/// same-site checks for POSTs, and the security headers.
pub async fn guard(State(console): State<Arc<Console>>, req: Request, next: Next) -> Response {
    let mut resp = check(&console, req, next).await;
    security_headers(resp.headers_mut());
    resp
}

async fn check(console: &Console, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if path.starts_with("/assets/") {
        return next.run(req).await;
    }
    let headers = req.headers().clone();
    let gate = &console.gate;
    let (anon, new_anon) = match cookie(&headers, ANON_COOKIE).filter(|v| v.len() == 64) {
        Some(v) => (v.to_string(), false),
        None => (hex(&rand::random::<[u8; 32]>()), true),
    };
    let name = cookie(&headers, SESSION_COOKIE).and_then(|c| gate.session_name(c, unix_now()));
    let public = path == "/login";
    if gate.auth_on() && name.is_none() && !public {
        if headers.contains_key("hx-request") {
            let mut r = StatusCode::UNAUTHORIZED.into_response();
            r.headers_mut()
                .insert("hx-redirect", HeaderValue::from_static("/login"));
            return r;
        }
        if req.method() == Method::GET {
            let target = req
                .uri()
                .path_and_query()
                .map_or("/".to_string(), |p| p.to_string());
            let next_q = form_urlencoded_value(&target);
            return Redirect::to(&format!("/login?next={next_q}")).into_response();
        }
        return refuse(
            StatusCode::UNAUTHORIZED,
            "Sign-in needed",
            "Sign in with an admin token first.",
        );
    }
    let viewer = Viewer {
        name,
        csrf: csrf_for(&anon),
    };
    let mut req = req;
    if req.method() == Method::POST {
        if cross_site(&headers) {
            return refuse(
                StatusCode::FORBIDDEN,
                "Refused",
                "Changes are accepted only from the console's own pages.",
            );
        }
        let (parts, body) = req.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "Refused",
                "The form is too large.",
            );
        };
        let ok = !new_anon
            && csrf_field(&bytes).is_some_and(|t| constant_time_eq(t, viewer.csrf.as_bytes()));
        if !ok {
            return refuse(
                StatusCode::FORBIDDEN,
                "Refused",
                "The form has expired or did not come from this console: reload the page and try again.",
            );
        }
        req = Request::from_parts(parts, Body::from(bytes));
    }
    req.extensions_mut().insert(viewer);
    let mut resp = next.run(req).await;
    if new_anon {
        resp.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(
                ANON_COOKIE,
                &anon,
                Duration::from_secs(365 * 24 * 3600),
                https(&headers),
            ),
        );
    }
    resp
}

/// Percent-encodes a path for a query value.
fn form_urlencoded_value(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `next` when it is a path on this site as a browser reads it, else `/`, so
/// sign-in cannot redirect elsewhere. A browser drops tabs and newlines anywhere in
/// a URL, reads `\` as `/` and `//host` as another site: only visible ASCII
/// without `\` is taken, starting with a single `/`; and decoding its
/// percent-escapes (as often as they nest) must not make it anything else.
fn safe_next(next: Option<&str>) -> String {
    fn one_slash(b: &[u8]) -> bool {
        b.first() == Some(&b'/') && !matches!(b.get(1), Some(b'/' | b'\\'))
    }
    let Some(n) = next else {
        return "/".into();
    };
    if !one_slash(n.as_bytes()) || !n.bytes().all(|c| c.is_ascii_graphic() && c != b'\\') {
        return "/".into();
    }
    let mut bytes = n.as_bytes().to_vec();
    for _ in 0..8 {
        let decoded = percent_decode(&bytes);
        if decoded == bytes {
            return n.into();
        }
        let hostile = |c: &u8| c.is_ascii_control() || c.is_ascii_whitespace() || *c == b'\\';
        if !one_slash(&decoded) || decoded.iter().any(hostile) {
            return "/".into();
        }
        bytes = decoded;
    }
    "/".into()
}

/// `%XX` escapes decoded once; anything else (a stray `%`) kept as it is.
fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let escape = (s[i] == b'%')
            .then(|| Some(hex(*s.get(i + 1)?)? * 16 + hex(*s.get(i + 2)?)?))
            .flatten();
        match escape {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    out
}

#[derive(Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

fn login_page(viewer: &Viewer, next: &str, error: Option<&str>) -> maud::Markup {
    let body = html! {
        h1 { "Sign in" }
        p { "The console needs an admin token (a line " code { "admin TOKEN NAME" } " of the broker's tokens file)." }
        @if let Some(e) = error { p.error role="alert" { (e) } }
        form.stack method="post" action="/login" {
            input type="hidden" name="csrf" value=(viewer.csrf);
            input type="hidden" name="next" value=(next);
            label for="token" { "Admin token" }
            input #token type="password" name="token" required autocomplete="current-password" autofocus;
            button type="submit" { "Sign in" }
        }
    };
    layout::page("Sign in", "", None, body)
}

pub async fn login_form(
    State(console): State<Arc<Console>>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    Query(q): Query<NextQuery>,
) -> Response {
    if !console.gate.auth_on() {
        return Redirect::to("/").into_response();
    }
    login_page(&viewer, &safe_next(q.next.as_deref()), None).into_response()
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

pub async fn login(
    State(console): State<Arc<Console>>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    let next = safe_next(f.next.as_deref());
    if !console.gate.auth_on() {
        return Redirect::to(&next).into_response();
    }
    match console.gate.sign_in(f.token.trim()) {
        Ok((session, name)) => {
            tracing::info!(token = %name, "console: signed in");
            let mut r = Redirect::to(&next).into_response();
            r.headers_mut().append(
                header::SET_COOKIE,
                set_cookie(SESSION_COOKIE, &session, SESSION_TTL, https(&headers)),
            );
            r
        }
        Err(why) => {
            tracing::warn!("console: sign-in refused");
            (
                StatusCode::UNAUTHORIZED,
                login_page(&viewer, &next, Some(why)),
            )
                .into_response()
        }
    }
}

pub async fn logout(headers: HeaderMap) -> Response {
    let mut r = Redirect::to("/login").into_response();
    r.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(SESSION_COOKIE, "", Duration::ZERO, https(&headers)),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> Gate {
        Gate::new(&[
            TokenEntry {
                role: Role::Admin,
                token: "admin-token-0123456789".into(),
                name: Some("ops".into()),
                workers: None,
                queues: None,
            },
            TokenEntry {
                role: Role::Worker,
                token: "worker-token-0123456789".into(),
                name: None,
                workers: None,
                queues: None,
            },
        ])
    }

    #[test]
    fn sessions_are_signed_by_an_admin_token_and_expire() {
        let g = gate();
        let (session, name) = g.sign_in("admin-token-0123456789").unwrap();
        assert_eq!(name, "ops");
        assert!(!session.contains("admin-token"));
        assert_eq!(g.session_name(&session, unix_now()).as_deref(), Some("ops"));
        let expiry: u64 = session.split_once('.').unwrap().0.parse().unwrap();
        assert_eq!(g.session_name(&session, expiry), None, "expired");
        let forged = format!("{}.{}", expiry + 10, session.split_once('.').unwrap().1);
        assert_eq!(
            g.session_name(&forged, unix_now()),
            None,
            "expiry is signed"
        );
        assert!(g.sign_in("worker-token-0123456789").is_err());
        assert!(g.sign_in("nope").is_err());
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_behind_https() {
        let mut h = HeaderMap::new();
        assert!(!https(&h));
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(https(&h));
        let c = set_cookie("a", "b", Duration::from_secs(1), true);
        assert_eq!(
            c.to_str().unwrap(),
            "a=b; Path=/; HttpOnly; SameSite=Strict; Max-Age=1; Secure"
        );
    }

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(safe_next(Some("/tasks?state=dead")), "/tasks?state=dead");
        assert_eq!(safe_next(Some("//evil.example")), "/");
        assert_eq!(safe_next(Some("https://evil.example")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn cross_site_posts_are_recognised() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9090"));
        assert!(!cross_site(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:9090"),
        );
        assert!(!cross_site(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("http://evil"));
        assert!(cross_site(&h));
        let mut h = HeaderMap::new();
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(cross_site(&h));
    }
}
