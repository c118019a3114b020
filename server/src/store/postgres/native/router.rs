//! Following the primary: a [`Router`] keeps the host of a multi-host
//! `database_url` the store uses now (see [`super::hosts`] for the URL), checks
//! it every second on a probe connection of its own, and when it goes away or no
//! longer matches `target_session_attrs` tries the hosts in order again and
//! points every pool at the one that matches.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::Notify;

use super::super::sql;
use super::hosts::{CHECK_EVERY, Host, PROBE_TIMEOUT, Role, SEARCH_EVERY, SessionAttrs};

/// Reads a session's role.
pub async fn role_of(conn: &mut PgConnection) -> Result<Role, sqlx::Error> {
    let (in_recovery, read_only): (bool, bool) =
        sqlx::query_as(sql::SESSION_ROLE).fetch_one(conn).await?;
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

    /// Why the store cannot start on the chosen host, a standby that
    /// `target_session_attrs` accepts: one line saying whether every host is one.
    pub async fn standby_chosen(&self) -> String {
        let mut standbys = Vec::with_capacity(self.hosts.len());
        for host in &self.hosts {
            if let Ok((role, _)) = probe(host).await
                && role.in_recovery
            {
                standbys.push(host.label.as_str());
            }
        }
        if standbys.len() == self.hosts.len() {
            return format!(
                "every host in database_url is a standby (in recovery): {}; the broker writes, \
                 so it needs a primary",
                standbys.join(", ")
            );
        }
        format!(
            "database_url: target_session_attrs={} chose {}, a standby (in recovery); the \
             broker writes, so use target_session_attrs=read-write or primary",
            self.attrs.as_str(),
            self.current()
        )
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
