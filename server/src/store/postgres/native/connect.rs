//! Opening the Postgres store: the pools, their options, and the hot pool's
//! generic plans.

use super::super::*;

/// How long a pooled connection may sit idle and still be handed out untested.
pub(in crate::store::postgres) const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// The pools' options. sqlx pings every idle connection before handing it out by
/// default: a round trip to Postgres before every store call, most of them on a
/// connection that finished a statement microseconds earlier (measured: 0.07 ms of
/// a lone Submit's 0.79). A connection idle for longer than [`PING_AFTER_IDLE`]
/// (where a restart or a proxy's idle cut is likely to have broken it) is still
/// pinged, and replaced if that fails; one broken while busy fails its statement,
/// as it would have without the ping, and is dropped.
pub(in crate::store::postgres) fn pool_options(router: Option<&Arc<Router>>) -> PgPoolOptions {
    let follow = router.map(Arc::downgrade);
    let opts = PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(5))
        .test_before_acquire(false)
        .before_acquire(move |conn, meta| {
            let router = follow.as_ref().and_then(std::sync::Weak::upgrade);
            Box::pin(async move {
                // Opened on the host used before the last switch: closed, not used.
                if router.is_some_and(|r| r.stale(meta.age)) {
                    return Ok(false);
                }
                if meta.idle_for > PING_AFTER_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        });
    match router.map(Arc::downgrade) {
        // Each new connection must match `target_session_attrs`.
        Some(weak) => opts.after_connect(move |conn, _| {
            let router = weak.upgrade();
            Box::pin(async move {
                match router {
                    Some(r) => r.admit(conn).await,
                    None => Ok(()),
                }
            })
        }),
        None => opts,
    }
}

/// The session settings of the main pool's connections (see [`PostgresStore::connect`]).
pub(in crate::store::postgres) const MAIN_SESSION: [(&str, &str); 3] = [
    ("plan_cache_mode", "force_custom_plan"),
    ("jit", "off"),
    ("idle_in_transaction_session_timeout", WRITER_IDLE_LIMIT),
];
/// The session settings of the hot pool's connections.
const HOT_SESSION: [(&str, &str); 4] = [
    ("plan_cache_mode", "force_generic_plan"),
    ("jit", "off"),
    ("enable_seqscan", "off"),
    ("idle_in_transaction_session_timeout", WRITER_IDLE_LIMIT),
];

/// How long the store waits at start for a host that matches while some host
/// does not answer.
const START_WITHIN: Duration = Duration::from_secs(5);

/// `host:port` of a single-host URL (the socket directory for a Unix socket).
fn label(options: &PgConnectOptions) -> String {
    format!("{}:{}", options.get_host(), options.get_port())
}

impl PostgresStore {
    pub async fn connect(url: &str, max_connections: u32) -> StoreResult<Self> {
        debug_assert!(
            super::super::gated::cuts_by_reply_bound(),
            "a lease statement's reply bound differs from store/reply.rs's"
        );
        // Custom plans only: a generic plan of the lease statement, cached while the
        // table was small, reads the whole table on every lease once it is large
        // (a seq scan and sort instead of the ordered lease index), until the next
        // ANALYZE. Planning per execution costs ~1 ms; a bad generic plan, seconds.
        // No JIT: the lease statement's estimated cost (subplans per candidate row)
        // passes the JIT thresholds, and compiling it took 0.2-6 s per execution
        // while the statement itself runs in under a millisecond.
        //
        // A transaction of the broker left idle (its replica frozen, or cut off
        // from the database without a reset) holds back the event horizon of every
        // replica's watch (native/horizon.rs): the server ends it after
        // WRITER_IDLE_LIMIT. No broker transaction waits on anything but the
        // database between its statements.
        let (base, router) = match hosts::parse(url).map_err(StoreError::Config)? {
            DbUrl::Single(options) => (options, None),
            DbUrl::Hosts { hosts, attrs } => {
                let (router, probe) = Router::start(hosts, attrs, START_WITHIN)
                    .await
                    .map_err(|e| StoreError::Config(e.message))?;
                Router::watch(&router, probe);
                (router.options(), Some(router))
            }
        };
        let options = base.clone().options(MAIN_SESSION);
        // Planning was three quarters of Postgres's time per task
        // (docs/performance.md, "What limits Postgres: planning"). The statements of
        // the plain lease and of the task inserts keep one generic plan per
        // connection instead, on half of the connections. They name their states
        // as constants (a generic plan cannot match a partial index's predicate
        // against a parameter), and those connections forbid sequential scans, so a
        // plan cached while the table was empty still reads it through its index
        // once it holds millions of rows.
        let hot_connections = max_connections / 2;
        let pool = pool_options(router.as_ref())
            .max_connections(max_connections - hot_connections)
            .connect_with(options.clone())
            .await?;
        let hot = if hot_connections == 0 {
            None
        } else {
            let hot = pool_options(router.as_ref())
                .max_connections(hot_connections)
                .connect_with(base.clone().options(HOT_SESSION))
                .await?;
            Some(hot)
        };
        if let Some(r) = &router {
            r.follow(pool.clone(), MAIN_SESSION.to_vec());
            if let Some(h) = &hot {
                r.follow(h.clone(), HOT_SESSION.to_vec());
            }
        }
        // The broker writes, so a standby cannot serve it (its migrations would
        // be the first writes to fail): one plain line says so instead.
        let role = router::role_of(&mut *pool.acquire().await?).await?;
        if role.in_recovery {
            return Err(StoreError::Config(match &router {
                None => format!(
                    "database_url names a standby (in recovery), {}: the broker writes, \
                     so it needs the primary",
                    label(&base)
                ),
                Some(r) => r.standby_chosen().await,
            }));
        }
        Ok(PostgresStore {
            pool,
            hot,
            options,
            router,
            wake_tag: format!("@{:016x}", rand::random::<u64>()),
            notes: Arc::default(),
        })
    }

    /// Where the plain lease and the task inserts run (see [`PostgresStore::connect`]).
    pub(in crate::store::postgres) fn hot(&self) -> &PgPool {
        self.hot.as_ref().unwrap_or(&self.pool)
    }
}
