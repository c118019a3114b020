//! Limit buckets and cooldowns on MySQL: the shared reads and writes of
//! `store/buckets.rs` over this pool and the statements of `buckets.sql`.

use super::{MysqlStore, sql};

super::super::buckets::pool_buckets!(MysqlStore, sqlx::MySql);
