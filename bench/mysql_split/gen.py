#!/usr/bin/env python3
"""Writes the SQL of N task lifecycles for run.sh, on one of two task-table shapes.

  gen.py wide|narrow N rows|batch > lifecycles.sql

wide:   the broker's `tasks` table as its migrations leave it (45 columns, 12
        secondary indexes): a submit inserts the row, a lease and a settle update it.
narrow: the split the store could take: a body written once at submit (`bodies`),
        a narrow live row for waiting and leased tasks (`live`), and an insert-only
        finished row (`finished`); a settle inserts the finished row and deletes the
        live one.
rows:   one event row per event (`task_events`, as the broker writes them today).
batch:  one event row per statement (`event_batches`, the events as JSON arrays)
        and one narrow reference per task and statement (`event_refs`).

The statements follow the broker's batched run: submits of 500 tasks, leases of 50
(a window of candidates by a consistent read, locked by primary key), settles of 500
(the rows locked, then written in one statement joined to their values), each in a
transaction of its own, each taking its event ids from `event_seq`.
"""
import json
import sys

shape, n, events_as = sys.argv[1], int(sys.argv[2]), sys.argv[3]
assert shape in ("wide", "narrow") and events_as in ("rows", "batch")
SUBMIT, LEASE = 500, 50
NOW = 1796410000000
PAYLOAD = "'" + "x" * 120 + "'"
out = []
w = out.append
next_event = [1]


def task_id(i):
    return "01a24%011x-7000-8000-%012x" % (i, i)


def record(kind, state, tasks, attempt, worker):
    """The events of one statement: one per task."""
    k = len(tasks)
    w("UPDATE event_seq SET n = LAST_INSERT_ID(n + %d) WHERE id = 1;" % k)
    first = next_event[0]
    next_event[0] += k
    if events_as == "rows":
        w("INSERT INTO task_events (event_id, task_id, queue, kind, state, attempt, worker_id, `time`, detail) VALUES "
          + ",".join("(%d,'%s','q','%s','%s',%d,%s,%d,NULL)" % (first + i, t, kind, state, attempt, worker, NOW)
                     for i, t in enumerate(tasks)) + ";")
    else:
        body = json.dumps({"task_ids": tasks, "kinds": [kind] * k, "states": [state] * k,
                           "attempts": [attempt] * k, "workers": [worker] * k, "times": [NOW] * k})
        w("INSERT INTO event_batches (first_id, last_id, queue, body) VALUES (%d, %d, 'q', '%s');"
          % (first, first + k - 1, body.replace("'", "''")))
        w("INSERT INTO event_refs (task_id, first_id) VALUES "
          + ",".join("('%s',%d)" % (t, first) for t in tasks) + ";")


table = "tasks" if shape == "wide" else "live"
for b in range(n // SUBMIT):
    base = b * SUBMIT
    ids = [task_id(base + i) for i in range(SUBMIT)]
    w("BEGIN;")
    if shape == "wide":
        w("INSERT IGNORE INTO tasks (id, queue, `key`, payload, priority, run_at, deadline, state, max_attempts, "
          "attempts_allowed, initial_backoff_ms, backoff_multiplier, max_backoff_ms, jitter, metadata, created_at, "
          "updated_at) VALUES "
          + ",".join("('%s','q',NULL,%s,0,%d,NULL,'pending',3,3,1000,2.0,60000,0.1,'{}',%d,%d)"
                     % (ids[i], PAYLOAD, NOW, NOW, NOW) for i in range(SUBMIT)) + ";")
    else:
        w("INSERT INTO bodies (seq, id, queue, `key`, payload, deadline, max_attempts, initial_backoff_ms, "
          "backoff_multiplier, max_backoff_ms, jitter, metadata, created_at) VALUES "
          + ",".join("(%d,'%s','q',NULL,%s,NULL,3,1000,2.0,60000,0.1,'{}',%d)" % (base + i + 1, ids[i], PAYLOAD, NOW)
                     for i in range(SUBMIT)) + ";")
        w("INSERT INTO live (seq, queue, state, priority, run_at, updated_at) VALUES "
          + ",".join("(%d,'q','pending',0,%d,%d)" % (base + i + 1, NOW, NOW) for i in range(SUBMIT)) + ";")
    record("submitted", "ready", ids, 0, "NULL")
    w("COMMIT;")
    for l in range(SUBMIT // LEASE):
        first = base + l * LEASE + 1
        seqs = ",".join(str(first + k) for k in range(LEASE))
        w("BEGIN;")
        w("SELECT {t}.* FROM (SELECT seq AS cand FROM {t} WHERE state = 'pending' AND queue = 'q' AND run_at <= {a} "
          "AND lease_deadline > {b} ORDER BY priority DESC, lease_deadline, run_at, seq LIMIT {w}) c "
          "STRAIGHT_JOIN {t} ON {t}.seq = c.cand WHERE state = 'pending' LIMIT {k} FOR UPDATE SKIP LOCKED;"
          .format(t=table, a=NOW + 1, b=NOW, w=LEASE + 8, k=LEASE))
        w("UPDATE %s SET state = 'leased', attempt = attempt + 1, fencing_token = fencing_token + 1, "
          "lease_token = CONCAT('b%d.', seq), leased_by = 'bench-w1', lease_duration_ms = 30000, "
          "lease_expires_at = %d, updated_at = %d, leased_at = %d, leased_address = '10.0.0.1:5000' "
          "WHERE state = 'pending' AND seq IN (%s);" % (table, b * 100 + l, NOW + 30000, NOW, NOW, seqs))
        record("leased", "leased", ids[l * LEASE:(l + 1) * LEASE], 1, "'bench-w1'")
        w("COMMIT;")
    seqs = ",".join(str(base + i + 1) for i in range(SUBMIT))
    values = " UNION ALL ".join(("SELECT %d AS seq, 'ok' AS result, %d AS now_ms" if i == 0 else "SELECT %d, 'ok', %d")
                                % (base + i + 1, NOW) for i in range(SUBMIT))
    w("BEGIN;")
    w("SELECT * FROM %s WHERE seq IN (%s) FOR UPDATE;" % (table, seqs))
    if shape == "wide":
        w("UPDATE (%s) v STRAIGHT_JOIN tasks t ON t.seq = v.seq SET t.state = 'succeeded', t.result = v.result, "
          "t.finished_at = v.now_ms, t.lease_expires_at = NULL, t.updated_at = v.now_ms;" % values)
    else:
        w("INSERT INTO finished (seq, queue, state, attempt, worker_id, worker_address, leased_at, finished_at, "
          "fencing_token, result) SELECT l.seq, l.queue, 'succeeded', l.attempt, l.leased_by, l.leased_address, "
          "l.leased_at, v.now_ms, l.fencing_token, v.result FROM (%s) v STRAIGHT_JOIN live l ON l.seq = v.seq;" % values)
        w("DELETE FROM live WHERE seq IN (%s);" % seqs)
    record("succeeded", "succeeded", ids, 1, "'bench-w1'")
    w("COMMIT;")
print("\n".join(out))
