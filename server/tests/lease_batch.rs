//! Lease.max_tasks up to 1000 on both stores: a full batch when the tasks are
//! small, cut by the reply budget when they are not, and 1001 refused.

mod common;

use common::*;
use taskbroker_client::pb;

async fn a_thousand_at_once_within_the_reply_budget(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    for _ in 0..2 {
        submit(&mut c, vec![spec("small"); 500]).await;
    }
    assert_eq!(lease(&mut c, "small", 1000).await.len(), 1000);
    // 1000 tasks of 8 KiB: 8 MB, twice the 4 MiB reply budget.
    let big = pb::TaskSpec {
        payload: vec![b'x'; 8 << 10],
        ..spec("big")
    };
    for _ in 0..4 {
        submit(&mut c, vec![big.clone(); 250]).await;
    }
    let got = lease(&mut c, "big", 1000).await;
    let bytes: usize = got.iter().map(|t| t.payload.len()).sum();
    assert!(!got.is_empty() && got.len() < 1000, "{}", got.len());
    assert!(bytes <= 4 << 20, "{bytes}");
    let e = c
        .lease(lease_req("small", 1001))
        .await
        .expect_err("above 1000");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(bad_field(&e).as_deref(), Some("max_tasks"));
    app.shutdown().await;
}

all_backends!(a_thousand_at_once_within_the_reply_budget);
