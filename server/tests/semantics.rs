//! End-to-end tests of the numbered semantics in docs/semantics.md, over real gRPC,
//! against both backends. Time moves by the manual clock, never by sleeping.

mod common;

use std::time::Duration;

use common::*;

use taskbroker_client::pb;

use tonic::Code;

// Lease order across queues, and a Lease reply that stays within the reply budget.
#[path = "semantics/ordering.rs"]
mod ordering;
// Lease tokens: stale tokens, repeated settles, CompleteMany and fencing off a previous holder.
#[path = "semantics/tokens.rs"]
mod tokens;
// Attempts: reclaim, the retry policy, checkpoints, deadlines and per-queue lease bounds.
#[path = "semantics/attempts.rs"]
mod attempts;
// Idempotent submit, cancel, requeue and the attempt history.
#[path = "semantics/dedup_cancel_requeue.rs"]
mod dedup_cancel_requeue;
