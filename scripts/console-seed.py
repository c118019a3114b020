#!/usr/bin/env python3
"""Fills a migrated taskbroker SQLite database with N tasks (default 1,000,000)
for measuring the console: scripts/console-bench.sh runs it.

    scripts/console-seed.py PATH.db [N]

It writes the rows directly (not through the broker) so that a million tasks
with a realistic history take a minute, not an hour. The mix, by sequence:
90% succeeded, 5% dead (five distinct errors), 3% ready, 1% scheduled, 0.5%
leased (20 workers), 0.5% cancelled; ten queues; created over the last seven
days, the newest hour's tasks finished within the last hour; one attempt row per
finished task. Nothing here is read by the broker's tests.
"""

import json
import random
import sqlite3
import sys
import time

ERRORS = [
    "smtp: connection refused (mx1.example.com:25)",
    "DEADLINE_EXCEEDED",
    "lease expired",
    "invalid recipient <script>alert(1)</script>",
    "upstream 503: try later",
]


def main() -> None:
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    rnd = random.Random(18)
    now = int(time.time() * 1000)
    week = 7 * 24 * 3600 * 1000
    start = now - week
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")
    tasks, attempts = [], []

    def flush() -> None:
        db.executemany(
            "INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state, "
            "attempt, max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, "
            "max_backoff_ms, jitter, metadata, created_at, updated_at, last_error, result, "
            "leased_by, lease_token, lease_duration_ms, lease_expires_at, fencing_token, "
            "finished_at, leased_at, leased_address) VALUES "
            "(?, ?, NULL, ?, ?, ?, NULL, ?, ?, 3, 3, 10000, 2.0, 3600000, 0.2, '{}', ?, ?, ?, ?, "
            "?, ?, ?, ?, ?, ?, ?, ?)",
            tasks,
        )
        db.executemany(
            "INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, leased_at, "
            "finished_at, outcome, error, fencing_token) VALUES (?, 1, ?, ?, ?, ?, ?, ?, 1)",
            attempts,
        )
        tasks.clear()
        attempts.clear()

    for i in range(n):
        created = start + i * week // n
        queue = f"q{(i * 7) % 10:02d}"
        task_id = f"0190{i:08x}-0000-7000-8000-{rnd.getrandbits(48):012x}"
        payload = json.dumps({"n": i, "to": f"user{i}@example.com", "kind": "welcome"}).encode()
        slot = i % 1000
        worker = f"worker-{i % 20}"
        address = f"10.0.0.{i % 20}:5000"
        run_ms = rnd.randint(20, 2000)
        # Finished a little after creation; the newest tasks within the last hour.
        finished = min(created + run_ms + 1000, now - 1000)
        state, attempt, error, result, finished_at = "pending", 0, None, None, None
        leased_by = token = expires = leased_at = leased_address = None
        run_at = created
        if slot < 900:
            state, attempt, result, finished_at = "succeeded", 1, b'{"ok":true}', finished
        elif slot < 950:
            state, attempt, finished_at = "dead", 1, finished
            error = ERRORS[i % len(ERRORS)]
        elif slot < 980:
            pass
        elif slot < 990:
            run_at = now + 3600 * 1000
        elif slot < 995:
            state, attempt = "leased", 1
            leased_by, token, leased_address = worker, f"tok-{i}", address
            expires, leased_at = now + 3600 * 1000, now - run_ms
        else:
            state, finished_at = "cancelled", finished
        tasks.append((
            task_id, queue, payload, i % 3, run_at, state, attempt, created,
            finished_at or created, error, result, leased_by, token,
            30000 if token else None, expires, attempt, finished_at, leased_at, leased_address,
        ))
        if state in ("succeeded", "dead"):
            outcome = "succeeded" if state == "succeeded" else "failed"
            attempts.append((task_id, worker, address, finished - run_ms, finished, outcome, error))
        if len(tasks) == 50_000:
            flush()
    flush()
    db.commit()
    db.close()
    print(f"seeded {n} tasks into {path}")


if __name__ == "__main__":
    main()
