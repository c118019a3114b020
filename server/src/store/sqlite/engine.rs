//! The database itself on SQLite: migrations, ping, pool statistics, close,
//! and the writer's wake-up for long-polls.

use async_trait::async_trait;

use super::super::*;
use super::{MIGRATOR, SqliteStore, sql};

#[async_trait]
impl Engine for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR
            .run(&self.write_pool)
            .await
            .map_err(StoreError::Migrate)
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query(sql::PING).execute(&self.reader).await?;
        Ok(())
    }

    fn pool_stats(&self) -> PoolStats {
        PoolStats {
            size: self.write_pool.size() + self.reader.size(),
            idle: self.write_pool.num_idle() + self.reader.num_idle(),
        }
    }

    async fn close(&self) {
        self.write_pool.close().await;
        self.reader.close().await;
    }

    /// Flow: wakes long-polls for tasks unblocked (or requeued in bulk) by
    /// the writer; the writer thread calls it after each commit.
    fn spawn_listener(&self, wake: Waker, _stop: tokio_util::sync::CancellationToken) {
        let writer = self.writer.clone();
        tokio::spawn(async move {
            if let Err(e) = writer
                .write(move |_| {
                    super::flow::set_waker(wake);
                    Ok(())
                })
                .await
            {
                tracing::warn!(error = %e, "cannot install the writer's wake-up");
            }
        });
    }
}
