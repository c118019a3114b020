#!/usr/bin/env python3
"""Fills a migrated taskbroker SQLite database with N tasks (default 1,000,000)
for measuring the console: scripts/console-bench.sh runs it.

    scripts/console-seed.py PATH.db [N]
    scripts/console-seed.py postgres://USER@HOST:PORT/DB [N]   # through psql's \copy

It writes the rows directly (not through the broker) so that a million tasks
with a realistic history take a minute, not an hour. The mix, by sequence:
90% succeeded, 5% dead (five distinct errors), 3% ready, 1% scheduled, 0.5%
leased (20 workers, in the worker registry too), 0.5% cancelled; ten queues;
created over the last seven days, the newest hour's tasks finished within the
last hour; one attempt row per finished task. Nothing here is read by the broker's tests.
"""

import csv
import io
import json
import random
import sqlite3
import subprocess
import sys
import time

ERRORS = [
    "smtp: connection refused (mx1.example.com:25)",
    "DEADLINE_EXCEEDED",
    "lease expired",
    "invalid recipient <script>alert(1)</script>",
    "upstream 503: try later",
]

TASK_COLUMNS = (
    "id, queue, payload, priority, run_at, state, attempt, created_at, updated_at, "
    "last_error, result, leased_by, lease_token, lease_duration_ms, lease_expires_at, "
    "fencing_token, finished_at, leased_at, leased_address"
)
# The columns every seeded task has the same value in.
FIXED = {
    "max_attempts": 3, "attempts_allowed": 3, "initial_backoff_ms": 10000,
    "backoff_multiplier": 2.0, "max_backoff_ms": 3600000, "jitter": 0.2, "metadata": "{}",
}
ATTEMPT_COLUMNS = "task_id, worker_id, worker_address, leased_at, finished_at, outcome, error"
WORKER_COLUMNS = "worker_id, labels, address, queues, first_seen, last_seen"


class SqliteWriter:
    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = OFF")

    def write(self, tasks: list, attempts: list) -> None:
        fixed = ", ".join(FIXED)
        values = ", ".join(repr(v) if not isinstance(v, str) else f"'{v}'" for v in FIXED.values())
        marks = ", ".join("?" * len(TASK_COLUMNS.split(",")))
        self.db.executemany(
            f"INSERT INTO tasks ({TASK_COLUMNS}, {fixed}) VALUES ({marks}, {values})", tasks
        )
        self.db.executemany(
            f"INSERT INTO task_attempts ({ATTEMPT_COLUMNS}, attempt, fencing_token) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 1, 1)",
            attempts,
        )

    def workers(self, rows: list) -> None:
        self.db.executemany(
            f"INSERT INTO workers ({WORKER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)", rows
        )

    def close(self) -> None:
        self.db.commit()
        self.db.close()


class PostgresWriter:
    """Streams CSV into psql's \\copy (no Python driver needed)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def copy(self, table: str, columns: str, rows: list) -> None:
        buf = io.StringIO()
        w = csv.writer(buf)
        for row in rows:
            w.writerow(["" if v is None else "\\x" + v.hex() if isinstance(v, bytes) else v
                        for v in row])
        subprocess.run(
            ["psql", "-q", "-v", "ON_ERROR_STOP=1", self.url, "-c",
             f"\\copy {table} ({columns}) FROM STDIN WITH (FORMAT csv)"],
            input=buf.getvalue(), text=True, check=True,
        )

    def write(self, tasks: list, attempts: list) -> None:
        fixed = list(FIXED.values())
        self.copy("tasks", f"{TASK_COLUMNS}, {', '.join(FIXED)}", [t + tuple(fixed) for t in tasks])
        self.copy("task_attempts", f"{ATTEMPT_COLUMNS}, attempt, fencing_token",
                  [a + (1, 1) for a in attempts])

    def workers(self, rows: list) -> None:
        self.copy("workers", WORKER_COLUMNS, rows)

    def close(self) -> None:
        for table in ("tasks", "task_attempts"):
            subprocess.run(["psql", "-q", self.url, "-c", f"VACUUM ANALYZE {table}"], check=True)


def main() -> None:
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    rnd = random.Random(18)
    now = int(time.time() * 1000)
    week = 7 * 24 * 3600 * 1000
    start = now - week
    db = PostgresWriter(path) if path.startswith("postgres") else SqliteWriter(path)
    tasks, attempts = [], []

    def flush() -> None:
        db.write(tasks, attempts)
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
    # The 20 workers in the registry (the Workers page), seen "until" an hour from
    # now like their leases, so that they stay live while the pages are measured.
    db.workers([
        (f"worker-{w}", json.dumps({"zone": f"eu-{w % 3}"}), f"10.0.0.{w}:5000",
         json.dumps([f"q{(w * 7) % 10:02d}"]), start, now + 3600 * 1000)
        for w in range(20)
    ])
    db.close()
    print(f"seeded {n} tasks into {path}")


if __name__ == "__main__":
    main()
