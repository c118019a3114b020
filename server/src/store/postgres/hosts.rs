//! Several Postgres hosts behind one `database_url`, in libpq's syntax:
//! `postgres://tb@db-a:5432,db-b:5432/tb?target_session_attrs=read-write`.
//!
//! The store uses one host at a time, the first in the list whose session
//! matches `target_session_attrs` (`SHOW transaction_read_only`,
//! `pg_is_in_recovery()`). A [`Router`] keeps that choice: a watcher checks the
//! chosen host every second on a probe connection of its own and, when the host
//! goes away or no longer matches (a primary demoted to a standby), tries the
//! hosts in order again and points every pool at the one that matches. Each new
//! pooled connection is checked before it is used, and pooled connections opened
//! before a switch are closed instead of being handed out, so a connection that
//! lands on a demoted primary is dropped, never written to.
//!
//! A URL with one host and no `target_session_attrs` needs none of this: it is
//! used as is.

use std::str::FromStr;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::Notify;

/// Most hosts one URL may name.
const MAX_HOSTS: usize = 16;
/// How long one host may take to accept a connection and answer the check.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the watcher checks the chosen host while it matches.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often the watcher tries the hosts while none matches.
const SEARCH_EVERY: Duration = Duration::from_millis(200);

/// libpq's `target_session_attrs`: which host's session the store accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionAttrs {
    Any,
    ReadWrite,
    ReadOnly,
    Primary,
    Standby,
    PreferStandby,
}

impl SessionAttrs {
    fn parse(v: &str) -> Option<SessionAttrs> {
        Some(match v {
            "any" => SessionAttrs::Any,
            "read-write" => SessionAttrs::ReadWrite,
            "read-only" => SessionAttrs::ReadOnly,
            "primary" => SessionAttrs::Primary,
            "standby" => SessionAttrs::Standby,
            "prefer-standby" => SessionAttrs::PreferStandby,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SessionAttrs::Any => "any",
            SessionAttrs::ReadWrite => "read-write",
            SessionAttrs::ReadOnly => "read-only",
            SessionAttrs::Primary => "primary",
            SessionAttrs::Standby => "standby",
            SessionAttrs::PreferStandby => "prefer-standby",
        }
    }

    /// Whether a session with this role matches. `prefer-standby` accepts any
    /// session; the order of the search prefers standbys.
    pub fn accepts(self, role: Role) -> bool {
        match self {
            SessionAttrs::Any | SessionAttrs::PreferStandby => true,
            SessionAttrs::ReadWrite => !role.read_only,
            SessionAttrs::ReadOnly => role.read_only,
            SessionAttrs::Primary => !role.in_recovery,
            SessionAttrs::Standby => role.in_recovery,
        }
    }
}

/// What a host's session is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    pub in_recovery: bool,
    pub read_only: bool,
}

impl Role {
    fn describe(self) -> &'static str {
        match (self.in_recovery, self.read_only) {
            (true, _) => "a standby",
            (false, true) => "a primary with read-only sessions",
            (false, false) => "a primary",
        }
    }
}

/// One host of the URL.
#[derive(Clone, Debug)]
pub struct Host {
    /// `host:port`, for messages.
    pub label: String,
    pub options: PgConnectOptions,
}

/// A parsed `database_url`. Parsed once at start; its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum DbUrl {
    /// One host and no `target_session_attrs`: used exactly as given.
    Single(PgConnectOptions),
    /// Hosts tried in order for a session that matches `attrs`.
    Hosts {
        hosts: Vec<Host>,
        attrs: SessionAttrs,
    },
}

fn bad(what: impl std::fmt::Display) -> String {
    format!("database_url: {what}")
}

/// Parses a `postgres://` or `postgresql://` URL with one host or a
/// comma-separated list of `host[:port]` (IPv6 in brackets) and an optional
/// `target_session_attrs`. Errors are one line naming what is wrong.
pub fn parse(url: &str) -> Result<DbUrl, String> {
    let (scheme, rest) = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|s| url.strip_prefix(s).map(|r| (*s, r)))
        .ok_or_else(|| bad("must start with postgres:// or postgresql://"))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostlist) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    let mut attrs = None;
    let mut kept = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == "target_session_attrs" {
            if attrs.is_some() {
                return Err(bad("target_session_attrs is given twice"));
            }
            attrs = Some(SessionAttrs::parse(v).ok_or_else(|| {
                bad(format!(
                    "target_session_attrs {v:?} is not one of any, read-write, read-only, \
                     primary, standby, prefer-standby"
                ))
            })?);
        } else {
            kept.push(pair);
        }
    }
    if !hostlist.contains(',') && attrs.is_none() {
        return PgConnectOptions::from_str(url)
            .map(DbUrl::Single)
            .map_err(bad);
    }
    let entries: Vec<&str> = hostlist.split(',').collect();
    if entries.len() > MAX_HOSTS {
        return Err(bad(format!("{} hosts; at most {MAX_HOSTS}", entries.len())));
    }
    let suffix = if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    let mut hosts = Vec::with_capacity(entries.len());
    for entry in entries {
        let (host, port) = split_host(entry)?;
        let label = format!("{host}:{port}");
        let one = format!("{scheme}{userinfo}{label}{suffix}");
        let options = PgConnectOptions::from_str(&one).map_err(|e| bad(format!("{label}: {e}")))?;
        hosts.push(Host { label, options });
    }
    Ok(DbUrl::Hosts {
        hosts,
        attrs: attrs.unwrap_or(SessionAttrs::Any),
    })
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`; the port defaults to 5432.
fn split_host(entry: &str) -> Result<(&str, u16), String> {
    if entry.is_empty() {
        return Err(bad("an empty host in the host list"));
    }
    let (host, port) = if let Some(v6) = entry.strip_prefix('[') {
        let close = v6
            .find(']')
            .ok_or_else(|| bad(format!("host {entry:?} has no closing ]")))?;
        let after = &v6[close + 1..];
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| bad(format!("host {entry:?}: junk after ]")))?,
            ),
        };
        (&entry[..close + 2], port)
    } else {
        match entry.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(bad(format!("host {entry:?} has no name")));
    }
    let port = match port {
        None => 5432,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(bad(format!("host {host}: port {p:?} is not 1-65535"))),
        },
    };
    Ok((host, port))
}

/// Reads a session's role.
pub async fn role_of(conn: &mut PgConnection) -> Result<Role, sqlx::Error> {
    let (in_recovery, read_only): (bool, bool) = sqlx::query_as(
        "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'",
    )
    .fetch_one(conn)
    .await?;
    Ok(Role {
        in_recovery,
        read_only,
    })
}

/// Connects to one host and reads its session's role.
async fn probe(host: &Host) -> Result<(Role, PgConnection), String> {
    let attempt = async {
        let mut conn = PgConnection::connect_with(&host.options).await?;
        let role = role_of(&mut conn).await?;
        Ok::<_, sqlx::Error>((role, conn))
    };
    match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
        Ok(Ok(found)) => Ok(found),
        Ok(Err(e)) => Err(one_line(&e)),
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
}

/// The first line of an error's text, without its source chain.
fn one_line(e: &sqlx::Error) -> String {
    let s = match e {
        sqlx::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    };
    s.lines().next().unwrap_or_default().to_string()
}

/// Why no host matched: every host's answer, one line.
#[derive(Debug)]
pub struct NoMatch {
    /// True when every host answered (none matched): retrying will not help
    /// until a host changes role.
    pub all_answered: bool,
    pub message: String,
}

/// Tries the hosts in order; returns the index of the first that matches and a
/// connection to it (`prefer-standby`: the first standby, else the first host
/// that answers).
pub async fn find(hosts: &[Host], attrs: SessionAttrs) -> Result<(usize, PgConnection), NoMatch> {
    let mut reasons = Vec::with_capacity(hosts.len());
    let mut fallback = None;
    let mut all_answered = true;
    for (i, host) in hosts.iter().enumerate() {
        match probe(host).await {
            Ok((role, conn)) if attrs == SessionAttrs::PreferStandby && !role.in_recovery => {
                reasons.push(format!("{} is {}", host.label, role.describe()));
                fallback.get_or_insert((i, conn));
            }
            Ok((role, conn)) if attrs.accepts(role) => return Ok((i, conn)),
            Ok((role, _)) => reasons.push(format!("{} is {}", host.label, role.describe())),
            Err(why) => {
                all_answered = false;
                reasons.push(format!("{}: {why}", host.label));
            }
        }
    }
    if let Some(found) = fallback {
        return Ok(found);
    }
    Err(NoMatch {
        all_answered,
        message: format!(
            "no host in database_url accepts target_session_attrs={}: {}",
            attrs.as_str(),
            reasons.join("; ")
        ),
    })
}

/// Which host the store uses now, and the pools that follow it.
pub struct Router {
    hosts: Vec<Host>,
    attrs: SessionAttrs,
    state: Mutex<State>,
    /// Asks the watcher to check the chosen host now.
    wake: Notify,
}

struct State {
    current: usize,
    /// When the store last moved to another host: connections opened before are
    /// closed instead of being handed out.
    switched_at: Instant,
    /// Whether the chosen host matched at the watcher's last check.
    healthy: bool,
    /// The pools and the session settings each opens its connections with.
    pools: Vec<(sqlx::PgPool, Vec<(&'static str, &'static str)>)>,
}

impl Router {
    /// Finds the first matching host; waits up to `within` for one while some
    /// host does not answer, and fails at once when every host answers and
    /// none matches.
    pub async fn start(
        hosts: Vec<Host>,
        attrs: SessionAttrs,
        within: Duration,
    ) -> Result<(Arc<Router>, PgConnection), NoMatch> {
        let deadline = Instant::now() + within;
        let (current, conn) = loop {
            match find(&hosts, attrs).await {
                Ok(found) => break found,
                Err(e) if e.all_answered || Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(SEARCH_EVERY).await,
            }
        };
        let router = Arc::new(Router {
            hosts,
            attrs,
            state: Mutex::new(State {
                current,
                switched_at: Instant::now(),
                healthy: true,
                pools: Vec::new(),
            }),
            wake: Notify::new(),
        });
        Ok((router, conn))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The chosen host's connect options.
    pub fn options(&self) -> PgConnectOptions {
        self.hosts[self.state().current].options.clone()
    }

    pub fn attrs(&self) -> SessionAttrs {
        self.attrs
    }

    /// The chosen host, `host:port`.
    pub fn current(&self) -> String {
        self.hosts[self.state().current].label.clone()
    }

    /// Whether the chosen host matched at the last check.
    pub fn healthy(&self) -> bool {
        self.state().healthy
    }

    /// Follows the chosen host with `pool` from now on (its connections are
    /// opened with `session` settings).
    pub fn follow(&self, pool: sqlx::PgPool, session: Vec<(&'static str, &'static str)>) {
        let mut s = self.state();
        // The watcher may have switched since the pool was built.
        pool.set_connect_options(
            self.hosts[s.current]
                .options
                .clone()
                .options(session.clone()),
        );
        s.pools.push((pool, session));
    }

    /// Whether a connection `age` old was opened before the last switch.
    pub fn stale(&self, age: Duration) -> bool {
        match Instant::now().checked_sub(age) {
            Some(opened) => opened < self.state().switched_at,
            None => false,
        }
    }

    /// Asks the watcher to check the chosen host now (a connection found it
    /// gone or of the wrong role).
    pub fn recheck(&self) {
        self.state().healthy = false;
        self.wake.notify_one();
    }

    /// Checks a new connection's role; an error (the connection is closed and
    /// another host looked for) when it does not match.
    pub async fn admit(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        let role = role_of(conn).await?;
        if self.attrs.accepts(role) {
            Ok(())
        } else {
            self.recheck();
            Err(sqlx::Error::Configuration(
                format!(
                    "the host is {}, not {}",
                    role.describe(),
                    self.attrs.as_str()
                )
                .into(),
            ))
        }
    }

    fn switch(&self, to: usize) {
        let mut s = self.state();
        s.healthy = true;
        if s.current == to {
            return;
        }
        tracing::warn!(
            from = %self.hosts[s.current].label,
            to = %self.hosts[to].label,
            attrs = self.attrs.as_str(),
            "database host changed"
        );
        s.current = to;
        s.switched_at = Instant::now();
        for (pool, session) in &s.pools {
            pool.set_connect_options(self.hosts[to].options.clone().options(session.clone()));
        }
    }

    /// Keeps the choice current until the router is dropped; `probe` is a
    /// connection to the chosen host.
    pub fn watch(router: &Arc<Router>, probe: PgConnection) {
        let weak: Weak<Router> = Arc::downgrade(router);
        tokio::spawn(async move {
            let mut probe = Some(probe);
            let mut wait = CHECK_EVERY;
            loop {
                let Some(router) = weak.upgrade() else {
                    return; // the store is gone
                };
                tokio::select! {
                    _ = router.wake.notified() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
                if Arc::strong_count(&router) == 1 {
                    return; // the store went while this waited
                }
                let ok = match probe.as_mut() {
                    Some(c) => matches!(
                        tokio::time::timeout(PROBE_TIMEOUT, role_of(c)).await,
                        Ok(Ok(role)) if router.attrs.accepts(role)
                    ),
                    None => false,
                };
                if ok {
                    router.state().healthy = true;
                    wait = CHECK_EVERY;
                    continue;
                }
                probe = None;
                match find(&router.hosts, router.attrs).await {
                    Ok((i, conn)) => {
                        router.switch(i);
                        probe = Some(conn);
                        wait = CHECK_EVERY;
                    }
                    Err(e) => {
                        let mut s = router.state();
                        if s.healthy {
                            tracing::warn!(reason = %e.message, "no database host matches");
                        }
                        s.healthy = false;
                        wait = SEARCH_EVERY;
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::ConnectOptions as _;

    fn hosts(url: &str) -> (Vec<String>, SessionAttrs) {
        match parse(url).unwrap() {
            DbUrl::Hosts { hosts, attrs } => (hosts.into_iter().map(|h| h.label).collect(), attrs),
            DbUrl::Single(_) => panic!("{url} parsed as a single host"),
        }
    }

    #[test]
    fn a_single_host_without_attrs_is_used_as_is() {
        for url in [
            "postgres://tb@db:5432/tb",
            "postgresql://tb:secret@db/tb?sslmode=require",
            "postgres:///tb?host=/var/run/postgresql",
        ] {
            assert!(matches!(parse(url), Ok(DbUrl::Single(_))), "{url}");
        }
    }

    #[test]
    fn hosts_keep_their_order_ports_and_the_rest_of_the_url() {
        let (h, a) = hosts(
            "postgres://tb:pw@db-a:5433,db-b,[::1]:6000/tb?sslmode=disable&target_session_attrs=read-write",
        );
        assert_eq!(h, ["db-a:5433", "db-b:5432", "[::1]:6000"]);
        assert_eq!(a, SessionAttrs::ReadWrite);
        let DbUrl::Hosts { hosts, .. } = parse(
            "postgres://tb:pw@db-a:5433,db-b/tb?sslmode=disable&target_session_attrs=primary",
        )
        .unwrap() else {
            unreachable!()
        };
        let url = hosts[1].options.to_url_lossy().to_string();
        assert!(url.contains("tb:pw@db-b:5432/tb"), "{url}");
        assert!(url.contains("sslmode=disable"), "{url}");
    }

    #[test]
    fn every_libpq_session_attr_parses_and_one_host_with_attrs_is_routed() {
        for (v, want) in [
            ("any", SessionAttrs::Any),
            ("read-write", SessionAttrs::ReadWrite),
            ("read-only", SessionAttrs::ReadOnly),
            ("primary", SessionAttrs::Primary),
            ("standby", SessionAttrs::Standby),
            ("prefer-standby", SessionAttrs::PreferStandby),
        ] {
            let (h, a) = hosts(&format!("postgres://db/tb?target_session_attrs={v}"));
            assert_eq!((h.len(), a), (1, want));
        }
        assert_eq!(hosts("postgres://a,b/tb").1, SessionAttrs::Any);
    }

    #[test]
    fn hostile_urls_are_one_line_config_errors() {
        for (url, says) in [
            (
                "postgres://tb@/tb?target_session_attrs=primary",
                "empty host",
            ),
            ("postgres://tb@a,,b/tb", "empty host"),
            ("postgres://tb@,/tb", "empty host"),
            ("postgres://tb@a,b:0/tb", "port \"0\""),
            ("postgres://tb@a,b:65536/tb", "port \"65536\""),
            ("postgres://tb@a,b:+5/tb", "port \"+5\""),
            ("postgres://tb@a,b:x/tb", "port \"x\""),
            ("postgres://tb@a:1:2,b/tb", "port \"1:2\""),
            ("postgres://tb@a,[::1/tb", "no closing ]"),
            ("postgres://tb@a,[::1]x/tb", "junk after ]"),
            ("postgres://tb@a,[]:5/tb", "no name"),
            (
                "postgres://a,b/tb?target_session_attrs=master",
                "is not one of",
            ),
            ("postgres://a,b/tb?target_session_attrs=", "is not one of"),
            (
                "postgres://a/tb?target_session_attrs=any&target_session_attrs=primary",
                "twice",
            ),
            ("mysql://a,b/tb", "must start with"),
        ] {
            let e = parse(url).expect_err(url);
            assert!(e.starts_with("database_url: "), "{url}: {e}");
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains('\n'), "{url}: {e}");
        }
        let many = format!("postgres://{}/tb", vec!["h"; MAX_HOSTS + 1].join(","));
        assert!(parse(&many).unwrap_err().contains("at most"));
    }

    #[test]
    fn roles_match_libpq() {
        let primary = Role {
            in_recovery: false,
            read_only: false,
        };
        let standby = Role {
            in_recovery: true,
            read_only: true,
        };
        let ro_primary = Role {
            in_recovery: false,
            read_only: true,
        };
        use SessionAttrs::*;
        for (attrs, p, s, r) in [
            (Any, true, true, true),
            (ReadWrite, true, false, false),
            (ReadOnly, false, true, true),
            (Primary, true, false, true),
            (Standby, false, true, false),
            (PreferStandby, true, true, true),
        ] {
            assert_eq!(
                (
                    attrs.accepts(primary),
                    attrs.accepts(standby),
                    attrs.accepts(ro_primary)
                ),
                (p, s, r),
                "{attrs:?}"
            );
        }
    }
}
