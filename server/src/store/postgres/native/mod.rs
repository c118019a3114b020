//! What only Postgres needs: opening the pools ([`connect`]), several hosts in
//! one URL ([`hosts`]) and following the primary through a failover
//! ([`router`]), the NOTIFY listener ([`listen`]), the planner statistics of
//! the tasks table ([`statistics`]) and the event horizon ([`horizon`]).

pub(in crate::store::postgres) mod connect;
pub(in crate::store::postgres) mod horizon;
pub mod hosts;
pub(in crate::store::postgres) mod listen;
pub mod router;
pub(in crate::store::postgres) mod statistics;
