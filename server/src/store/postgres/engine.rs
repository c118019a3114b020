//! The engine on Postgres: migrations, readiness (a standby is not ready), the
//! pools, the NOTIFY listener and the planner statistics (native/).

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::super::*;
use super::native::router;
use super::{MIGRATOR, PostgresStore, sql};

#[async_trait]
impl Engine for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            shared: true,
            parallel_writes: false,
        }
    }

    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await.map_err(StoreError::Migrate)
    }

    async fn ping(&self) -> StoreResult<()> {
        // Every form: not ready while the host in use is a standby, which
        // answers reads and refuses every write the broker makes (one host named
        // alone, such as an address that did not follow a failover, or a
        // `target_session_attrs` that accepts a standby).
        let Some(router) = &self.router else {
            let in_recovery: bool = sqlx::query_scalar(sql::PING).fetch_one(&self.pool).await?;
            if in_recovery {
                return Err(StoreError::Unavailable(Box::new(InRecovery)));
            }
            return Ok(());
        };
        // With several hosts: ready while a host that matches is in use.
        let mut conn = self.pool.acquire().await?;
        let role = router::role_of(&mut conn).await?;
        if router.healthy() && router.attrs().accepts(role) {
            if role.in_recovery {
                return Err(StoreError::Unavailable(Box::new(InRecovery)));
            }
            return Ok(());
        }
        router.recheck();
        Err(StoreError::Unavailable(
            format!(
                "no database host accepts target_session_attrs={}",
                router.attrs().as_str()
            )
            .into(),
        ))
    }

    fn pool_stats(&self) -> PoolStats {
        let hot = self.hot.as_ref();
        PoolStats {
            size: self.pool.size() + hot.map_or(0, |p| p.size()),
            idle: self.pool.num_idle() + hot.map_or(0, |p| p.num_idle()),
        }
    }

    async fn statistics_refresh(&self) -> StoreResult<bool> {
        self.statistics_refresh().await
    }

    fn spawn_listener(&self, wake: Waker, stop: CancellationToken) {
        self.listen(wake, stop);
    }

    fn notification_stats(&self) -> NotificationStats {
        use std::sync::atomic::Ordering::Relaxed;
        NotificationStats {
            received: self.notes.received.load(Relaxed),
            own_skipped: self.notes.own_skipped.load(Relaxed),
        }
    }

    async fn close(&self) {
        if let Some(hot) = &self.hot {
            hot.close().await;
        }
        self.pool.close().await;
    }
}
