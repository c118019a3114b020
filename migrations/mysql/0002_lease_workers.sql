-- One row per worker id that has leased: a lease that applies the rules about what
-- its worker holds (one copy of a distinct fan-out group, the per-worker cap) locks
-- its worker's row first (SELECT ... FOR UPDATE, in id order), so two leases of one
-- worker at once, on any replica, read what it holds one after the other. Leases of
-- different workers lock different rows and never wait for each other here.
CREATE TABLE lease_workers (
    worker_id VARCHAR(256) NOT NULL PRIMARY KEY
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
