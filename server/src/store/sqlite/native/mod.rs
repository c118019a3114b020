//! What only SQLite needs: the writer thread that group-commits every write
//! (`writer`), with the checkpointer beside it.

pub(super) mod writer;
