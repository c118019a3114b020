//! The database itself on MySQL: migrations, liveness, the pool, and the
//! wake-up poller (`native/`).

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::super::*;
use super::{MIGRATOR, MysqlStore, native, sql};

#[async_trait]
impl Engine for MysqlStore {
    fn backend(&self) -> &'static str {
        "mysql"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            shared: true,
            parallel_writes: true,
        }
    }

    async fn migrate(&self) -> StoreResult<()> {
        native::checksums::rewrite_earlier(&self.pool, &MIGRATOR)
            .await
            .map_err(|e| StoreError::Migrate(e.into()))?;
        native::migrate::run(&MIGRATOR, &self.pool).await
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query(sql::PING).execute(&self.pool).await?;
        Ok(())
    }

    fn pool_stats(&self) -> PoolStats {
        PoolStats {
            size: self.pool.size(),
            idle: self.pool.num_idle(),
        }
    }

    fn spawn_listener(&self, wake: Waker, stop: CancellationToken) {
        let _ = self.waker.set(wake.clone());
        native::listen::spawn(self.pool.clone(), wake, stop, self.notes.clone());
    }

    fn notification_stats(&self) -> NotificationStats {
        self.notes.stats()
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
