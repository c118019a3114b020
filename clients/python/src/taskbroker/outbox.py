"""Transactional enqueue: write a task into the producer's own Postgres, in the
producer's transaction (psycopg 3), as a row of ``taskbroker_outbox``
(migrations/outbox/postgres/). ``taskbroker relay`` ships committed rows to the broker;
a rolled-back transaction leaves no row, so no task. See docs/outbox.md.

    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", (42, 1999))
        row = outbox.enqueue(conn, "emails", b'{"order": 42}', key="order-42")

``conn`` is a psycopg ``Connection`` or ``Cursor`` (``AsyncConnection`` /
``AsyncCursor`` for the ``_async`` functions); the row commits with the caller's
transaction. psycopg is not a dependency of this package: install it yourself, or the
``outbox`` extra (``pip install 'taskbroker[outbox]'``).
"""

from __future__ import annotations

import datetime
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from taskbroker import tracing
from taskbroker.client import timestamp
from taskbroker.v1 import broker_pb2

#: The channel the table's trigger notifies (once per INSERT statement).
CHANNEL = "taskbroker_outbox"
#: The prefix of the idempotency key of a row whose spec has no key of its own.
KEY_PREFIX = "outbox:"

_QUEUE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_MAX_KEY_BYTES = 512
_INSERT = (
    "INSERT INTO taskbroker_outbox (idempotency_key, spec) "
    "VALUES (coalesce(%s::text, 'outbox:' || gen_random_uuid()), %s) "
    "RETURNING id, idempotency_key"
)


@dataclass(frozen=True)
class Enqueued:
    """One row written to the outbox."""

    #: The row's id (its place in the shipping order).
    id: int
    #: The idempotency key the task will have at the broker: the spec's own key, or
    #: ``outbox:`` and a random UUID (``taskbroker list --key KEY`` finds the task).
    key: str


class _Executes(Protocol):
    def execute(self, query: Any, params: Any = ...) -> Any: ...


class _ExecutesAsync(Protocol):
    async def execute(self, query: Any, params: Any = ...) -> Any: ...


def task_spec(
    queue: str,
    payload: bytes = b"",
    *,
    key: str = "",
    priority: int = 0,
    run_at: datetime.datetime | None = None,
    deadline: datetime.datetime | None = None,
    retry: broker_pb2.RetryPolicy | None = None,
    metadata: Mapping[str, str] | None = None,
) -> broker_pb2.TaskSpec:
    """A TaskSpec as ``Client.submit`` builds it (with the current ``traceparent``)."""
    meta = dict(metadata or {})
    tracing.inject(meta)
    spec = broker_pb2.TaskSpec(queue=queue, payload=payload, key=key, priority=priority, retry=retry, metadata=meta)
    if run_at is not None:
        spec.run_at.CopyFrom(timestamp(run_at))
    if deadline is not None:
        spec.deadline.CopyFrom(timestamp(deadline))
    return spec


def check(spec: broker_pb2.TaskSpec) -> None:
    """Raises ``ValueError`` naming the field when Submit would refuse the spec
    whatever the broker's settings (queue name, key)."""
    if not _QUEUE.fullmatch(spec.queue):
        if not spec.queue:
            raise ValueError("queue: is required")
        if len(spec.queue) > 128:
            raise ValueError("queue: is longer than 128 characters")
        raise ValueError("queue: may only contain A-Z a-z 0-9 . _ : -")
    if len(spec.key.encode()) > _MAX_KEY_BYTES:
        raise ValueError("key: is longer than 512 characters")
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in spec.key):
        raise ValueError("key: must not contain control characters")
    # The relay submits rows of many transactions together, each under an
    # idempotency key (docs/outbox.md): an index into the request, or more than
    # one fan-out copy, cannot be shipped.
    if len(spec.depends_on_index) > 0:
        raise ValueError(
            "depends_on_index: cannot be used through the outbox (rows of many transactions "
            "share one Submit); name dependencies by task id in depends_on"
        )
    if spec.HasField("fanout") and spec.fanout.copies > 1:
        raise ValueError(
            "fanout.copies: cannot have more than one copy through the outbox (every row is "
            "submitted under an idempotency key, which Submit refuses with fan-out)"
        )


def _params(spec: broker_pb2.TaskSpec) -> tuple[str | None, bytes]:
    check(spec)
    return (spec.key or None, spec.SerializeToString())


def _row(found: Any) -> Enqueued:
    if found is None:
        raise RuntimeError("INSERT INTO taskbroker_outbox returned no row")
    return Enqueued(id=int(found[0]), key=str(found[1]))


def enqueue_spec(conn: _Executes, spec: broker_pb2.TaskSpec) -> Enqueued:
    """Writes ``spec`` into the outbox through ``conn`` (in its transaction)."""
    cur = conn.execute(_INSERT, _params(spec))
    return _row(cur.fetchone())


def enqueue(conn: _Executes, queue: str, payload: Any = b"", **kwargs: Any) -> Enqueued:
    """Writes a task into the outbox through ``conn``; the arguments are ``Client.submit``'s
    (``key``, ``priority``, ``run_at``, ``deadline``, ``retry``, ``metadata``; a payload that is
    not ``bytes`` is encoded by ``serializer=``, JSON by default)."""
    return enqueue_spec(conn, task_spec(queue, payload, **kwargs))


async def enqueue_spec_async(conn: _ExecutesAsync, spec: broker_pb2.TaskSpec) -> Enqueued:
    """``enqueue_spec`` on a psycopg ``AsyncConnection`` or ``AsyncCursor``."""
    cur = await conn.execute(_INSERT, _params(spec))
    return _row(await cur.fetchone())


async def enqueue_async(conn: _ExecutesAsync, queue: str, payload: Any = b"", **kwargs: Any) -> Enqueued:
    """``enqueue`` on a psycopg ``AsyncConnection`` or ``AsyncCursor``."""
    return await enqueue_spec_async(conn, task_spec(queue, payload, **kwargs))


_INSERT_MYSQL = "INSERT INTO taskbroker_outbox (idempotency_key, spec) VALUES (%s, %s)"


def enqueue_spec_mysql(cursor: Any, spec: broker_pb2.TaskSpec) -> Enqueued:
    """Writes ``spec`` into a MySQL/MariaDB outbox (migrations/outbox/mysql/) through a
    DB-API 2.0 ``cursor`` (PyMySQL, mysqlclient, mysql-connector): the row commits or
    rolls back with the cursor's connection. MySQL has no RETURNING: a spec without a
    key gets ``outbox:`` and a random UUID here, and the id is the cursor's ``lastrowid``."""
    key, body = _params(spec)
    key = key or KEY_PREFIX + str(uuid.uuid4())
    cursor.execute(_INSERT_MYSQL, (key, body))
    return Enqueued(id=int(cursor.lastrowid), key=key)


def enqueue_mysql(cursor: Any, queue: str, payload: bytes = b"", **kwargs: Any) -> Enqueued:
    """``enqueue`` for MySQL/MariaDB through a DB-API 2.0 cursor (see ``enqueue_spec_mysql``)."""
    return enqueue_spec_mysql(cursor, task_spec(queue, payload, **kwargs))
