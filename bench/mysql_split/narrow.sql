-- The split shape of gen.py: a body written once, a narrow live row, an insert-only finished row.
CREATE TABLE bodies (
  seq BIGINT NOT NULL PRIMARY KEY, id VARCHAR(64) NOT NULL, queue VARCHAR(255) NOT NULL, `key` VARCHAR(512) NULL,
  payload LONGBLOB NOT NULL, deadline BIGINT NULL, max_attempts BIGINT NOT NULL, initial_backoff_ms BIGINT NOT NULL,
  backoff_multiplier DOUBLE NOT NULL, max_backoff_ms BIGINT NOT NULL, jitter DOUBLE NOT NULL, metadata MEDIUMTEXT NOT NULL,
  created_at BIGINT NOT NULL, schedule_id VARCHAR(255) NULL, fire_time BIGINT NULL, target_worker VARCHAR(256) NULL,
  target_labels TEXT NULL, fanout_group VARCHAR(255) NULL, fanout_distinct BOOLEAN NOT NULL DEFAULT FALSE,
  concurrency_key VARCHAR(256) NULL, retry_schedule TEXT NULL,
  UNIQUE KEY b_id (id), UNIQUE KEY b_queue_key (queue, `key`), KEY b_created (created_at, seq), KEY b_schedule (schedule_id, seq),
  KEY b_deadline (deadline), KEY b_fanout (fanout_group)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE TABLE live (
  seq BIGINT NOT NULL PRIMARY KEY, queue VARCHAR(255) NOT NULL, state VARCHAR(16) NOT NULL, priority BIGINT NOT NULL,
  run_at BIGINT NOT NULL, deadline BIGINT NULL,
  lease_deadline BIGINT GENERATED ALWAYS AS (COALESCE(deadline, 9223372036854775807)) STORED,
  attempt BIGINT NOT NULL DEFAULT 0, fencing_token BIGINT NOT NULL DEFAULT 0, lease_token VARCHAR(64) NULL,
  leased_by VARCHAR(256) NULL, lease_duration_ms BIGINT NULL, lease_expires_at BIGINT NULL, leased_at BIGINT NULL,
  leased_address VARCHAR(512) NULL, updated_at BIGINT NOT NULL, last_error TEXT NULL, checkpoint LONGBLOB NULL,
  reserved_for VARCHAR(256) NULL, reserved_until BIGINT NULL, cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
  KEY l_lease (state, queue, priority DESC, lease_deadline, run_at, seq), KEY l_leased (state, queue, leased_by)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE TABLE finished (
  seq BIGINT NOT NULL PRIMARY KEY, queue VARCHAR(255) NOT NULL, state VARCHAR(16) NOT NULL, attempt BIGINT NOT NULL,
  worker_id VARCHAR(256) NULL, worker_address VARCHAR(512) NULL, leased_at BIGINT NULL, finished_at BIGINT NOT NULL,
  fencing_token BIGINT NOT NULL, result LONGBLOB NULL, last_error TEXT NULL,
  KEY f_finished (state, finished_at), KEY f_queue_state (queue, state, finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
