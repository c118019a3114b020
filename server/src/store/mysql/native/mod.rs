//! What only MySQL/MariaDB needs: migrations where DDL commits as it goes
//! (`migrate.rs`) and the checksums of migrations rewritten after they shipped
//! (`checksums.rs`), statements cut to the server's packet (`packet.rs`), and
//! wake-ups across replicas by polling the event counter (`listen.rs`).

pub(super) mod checksums;
pub(super) mod listen;
pub(super) mod migrate;
pub(crate) mod packet;
