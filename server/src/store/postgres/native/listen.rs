//! The notification listener: NOTIFY on the channel wakes long-polls on every
//! replica, except a replica's own wake-ups, which its broker already acted on.

use super::super::*;
use super::connect::MAIN_SESSION;

/// What a notification on [`CHANNEL`] asks of the listener of the store tagged
/// `own`: the payload is a queue name, followed by the sender's tag when a store
/// of this version sent it from a path whose broker wakes its own waiters itself
/// (`queue@id`; queue names have no `@`). An untagged payload (another path, an
/// older replica) always wakes.
pub(in crate::store::postgres) fn wake_for<'a>(payload: &'a str, own: &str) -> Option<&'a str> {
    match payload.find('@') {
        Some(at) if &payload[at..] == own => None,
        Some(at) => Some(&payload[..at]),
        None => Some(payload),
    }
}

impl PostgresStore {
    /// Listens for NOTIFY on [`CHANNEL`] and calls `wake(Some(queue))`; after a
    /// (re)connect, when notifications may have been missed, calls `wake(None)`.
    pub(in crate::store::postgres) fn listen(&self, wake: Waker, stop: CancellationToken) {
        let options = self.options.clone();
        let router = self.router.clone();
        let (tag, notes) = (self.wake_tag.clone(), self.notes.clone());
        tokio::spawn(async move {
            loop {
                // With several hosts, the one in use now.
                let options = match &router {
                    Some(r) => r.options().options(MAIN_SESSION),
                    None => options.clone(),
                };
                let listener = async {
                    // A pool of its own with one connection, kept for good.
                    let own = PgPoolOptions::new()
                        .max_connections(1)
                        .idle_timeout(None)
                        .max_lifetime(None)
                        .acquire_timeout(Duration::from_secs(5))
                        .connect_with(options.clone())
                        .await?;
                    let mut l = PgListener::connect_with(&own).await?;
                    l.listen(CHANNEL).await?;
                    wake(None);
                    loop {
                        match l.try_recv().await? {
                            Some(n) => {
                                use std::sync::atomic::Ordering::Relaxed;
                                notes.received.fetch_add(1, Relaxed);
                                match wake_for(n.payload(), &tag) {
                                    Some(q) => wake(Some(q)),
                                    // Its broker woke its waiters when it committed.
                                    None => _ = notes.own_skipped.fetch_add(1, Relaxed),
                                }
                            }
                            // The connection dropped and was re-established.
                            None => wake(None),
                        }
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), sqlx::Error>(())
                };
                tokio::select! {
                    _ = stop.cancelled() => return,
                    res = listener => {
                        if let Err(e) = res {
                            tracing::warn!(error = %e, "notification listener failed; retrying");
                        }
                    }
                }
                // Keep the retry gentle while the database is away.
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        });
    }
}

#[cfg(test)]
mod wake_tag_tests {
    use super::wake_for;

    #[test]
    fn own_wake_ups_are_skipped_and_others_wake_their_queue() {
        let own = "@00000000000000aa";
        assert_eq!(wake_for("emails@00000000000000aa", own), None);
        assert_eq!(wake_for("emails@00000000000000bb", own), Some("emails"));
        // Untagged: an older replica, or a path whose broker does not wake locally.
        assert_eq!(
            wake_for("emails.v2:high-prio_1", own),
            Some("emails.v2:high-prio_1")
        );
        // A tag that merely starts like ours is another replica's.
        assert_eq!(wake_for("q@00000000000000aa1", own), Some("q"));
    }
}
