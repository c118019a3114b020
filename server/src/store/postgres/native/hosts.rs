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
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

/// Most hosts one URL may name.
const MAX_HOSTS: usize = 16;
/// How long one host may take to accept a connection and answer the check.
pub(in crate::store::postgres) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the watcher checks the chosen host while it matches.
pub(in crate::store::postgres) const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often the watcher tries the hosts while none matches.
pub(in crate::store::postgres) const SEARCH_EVERY: Duration = Duration::from_millis(200);

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
    pub(in crate::store::postgres) fn describe(self) -> &'static str {
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
