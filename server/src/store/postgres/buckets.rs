//! Limit buckets and cooldowns on Postgres: the shared reads and writes of
//! `store/buckets.rs` over this pool and the statements of `buckets.sql`.

use super::{PostgresStore, sql};

super::super::buckets::pool_buckets!(PostgresStore, sqlx::Postgres);
