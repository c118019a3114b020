//! Admission load: `--concurrency-keys N` gives every task one of N keys
//! (in turn), and the measured queues get `--max-per-key` and `--rate-limit`
//! through AdminService.UpdateQueue before the load starts, so the broker takes
//! its gated lease.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use tonic::transport::Endpoint;

use crate::args::Args;

static KEYS: OnceLock<u64> = OnceLock::new();
static NEXT: AtomicU64 = AtomicU64::new(0);

/// The next task's concurrency key, or empty without `--concurrency-keys`.
pub fn next_key() -> String {
    match KEYS.get() {
        Some(&n) if n > 0 => format!("k{}", NEXT.fetch_add(1, Ordering::Relaxed) % n),
        _ => String::new(),
    }
}

/// Sets the gates of `queues` as the arguments ask (nothing when none is asked).
pub async fn configure(args: &Args, addr: &str, queues: &[String]) -> anyhow::Result<()> {
    let _ = KEYS.set(args.concurrency_keys);
    let mut paths = Vec::new();
    let mut config = pb::QueueConfig::default();
    if args.concurrency_keys > 0 && args.max_per_key > 0 {
        config.max_concurrent_per_key = args.max_per_key;
        paths.push("max_concurrent_per_key".to_string());
    }
    if args.rate_limit > 0.0 {
        config.rate_limit = Some(pb::RateLimit {
            per_second: args.rate_limit,
            burst: 0,
        });
        paths.push("rate_limit".to_string());
    }
    if paths.is_empty() {
        return Ok(());
    }
    let channel = Endpoint::from_shared(addr.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    let mut admin = AdminServiceClient::new(channel);
    for q in queues {
        admin
            .update_queue(pb::UpdateQueueRequest {
                name: q.clone(),
                config: Some(config.clone()),
                update_mask: Some(prost_types::FieldMask {
                    paths: paths.clone(),
                }),
            })
            .await?;
    }
    Ok(())
}
