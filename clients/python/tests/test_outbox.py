"""taskbroker.outbox against a real Postgres ($TASKBROKER_TEST_POSTGRES_URL, as
scripts/test.sh exports; skipped without one unless TASKBROKER_REQUIRE_POSTGRES is set),
and end to end through `taskbroker relay --once` when a broker ($TASKBROKER_ADDR) and
the built binary are there."""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import subprocess
from collections.abc import Iterator

import pytest

from taskbroker import Client, outbox
from taskbroker.v1 import admin_pb2, broker_pb2

psycopg = pytest.importorskip("psycopg")

ADMIN_URL = os.environ.get("TASKBROKER_TEST_POSTGRES_URL")
if not ADMIN_URL and os.environ.get("TASKBROKER_REQUIRE_POSTGRES"):
    raise RuntimeError("TASKBROKER_TEST_POSTGRES_URL is not set but Postgres tests are required")
pytestmark = pytest.mark.skipif(not ADMIN_URL, reason="TASKBROKER_TEST_POSTGRES_URL is not set")

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "migrations" / "outbox" / "postgres" / "0001_outbox.sql"


@pytest.fixture
def url() -> Iterator[str]:
    """A fresh database with the outbox schema (applied from the shipped file) and an
    orders table."""
    assert ADMIN_URL
    name = f"tb_py_outbox_{os.getpid()}_{random.randrange(1 << 40)}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    db_url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(SCHEMA.read_text())
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, total bigint NOT NULL)")
    yield db_url
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def rows(url: str) -> list[tuple[int, str, broker_pb2.TaskSpec]]:
    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT id, idempotency_key, spec FROM taskbroker_outbox ORDER BY id").fetchall()
    return [(i, k, broker_pb2.TaskSpec.FromString(bytes(s))) for i, k, s in found]


def test_a_committed_transaction_leaves_its_row_and_a_rolled_back_one_none(url: str) -> None:
    with psycopg.connect(url) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO orders VALUES (1, 100)")
            kept = outbox.enqueue(conn, "emails", b"order 1", priority=3, metadata={"tenant": "a"})
        with pytest.raises(ZeroDivisionError), conn.transaction():
            conn.execute("INSERT INTO orders VALUES (2, 200)")
            outbox.enqueue(conn, "emails", b"order 2")
            _ = 1 / 0
    assert kept.key.startswith(outbox.KEY_PREFIX)
    found = rows(url)
    assert [(i, k) for i, k, _ in found] == [(kept.id, kept.key)]
    spec = found[0][2]
    assert (spec.queue, spec.payload, spec.priority, spec.metadata["tenant"]) == ("emails", b"order 1", 3, "a")
    assert spec.key == "", "the row's key is used when the spec has none"


def test_a_spec_key_is_the_rows_key_and_rows_keep_their_order(url: str) -> None:
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        a = outbox.enqueue(cur, "emails", b"a", key="order-7")
        b = outbox.enqueue_spec(cur, broker_pb2.TaskSpec(queue="emails", payload=b"b"))
    assert a.key == "order-7"
    assert a.id < b.id
    assert [k for _, k, _ in rows(url)] == ["order-7", b.key]


@pytest.mark.parametrize(
    ("queue", "key", "message"),
    [
        ("", "", "queue: is required"),
        ("has space", "", "queue: may only contain A-Z a-z 0-9 . _ : -"),
        ("q" * 129, "", "queue: is longer than 128 characters"),
        ("q", "k" * 513, "key: is longer than 512 characters"),
        ("q", "a\nb", "key: must not contain control characters"),
    ],
)
def test_a_spec_submit_would_refuse_is_refused_and_nothing_is_written(
    url: str, queue: str, key: str, message: str
) -> None:
    with psycopg.connect(url) as conn:
        with pytest.raises(ValueError, match=f"^{message}$".replace(".", r"\.")):
            outbox.enqueue(conn, queue, b"x", key=key)
        conn.commit()
    assert rows(url) == []


def test_fields_a_batch_of_rows_cannot_carry_are_refused(url: str) -> None:
    indexed = broker_pb2.TaskSpec(queue="q", depends_on_index=[0])
    copies = broker_pb2.TaskSpec(queue="q", fanout=broker_pb2.Fanout(copies=2))
    with psycopg.connect(url) as conn:
        with pytest.raises(ValueError, match="^depends_on_index: cannot be used through the outbox"):
            outbox.enqueue_spec(conn, indexed)
        with pytest.raises(ValueError, match="^fanout.copies: cannot have more than one copy"):
            outbox.enqueue_spec(conn, copies)
        one = outbox.enqueue_spec(conn, broker_pb2.TaskSpec(queue="q", fanout=broker_pb2.Fanout(copies=1)))
        conn.commit()
    assert [k for _, k, _ in rows(url)] == [one.key]


def test_the_asyncio_variant_writes_in_the_callers_transaction(url: str) -> None:
    async def run() -> outbox.Enqueued:
        async with await psycopg.AsyncConnection.connect(url) as conn:
            async with conn.transaction():
                await conn.execute("INSERT INTO orders VALUES (3, 300)")
                return await outbox.enqueue_async(conn, "emails", b"async")

    row = asyncio.run(run())
    assert [(i, s.payload) for i, _, s in rows(url)] == [(row.id, b"async")]


def test_the_insert_notifies_the_relays_channel_once_per_transaction(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as listener, psycopg.connect(url) as conn:
        listener.execute(f"LISTEN {outbox.CHANNEL}")
        with conn.transaction():
            for i in range(5):
                outbox.enqueue(conn, "emails", str(i).encode())
        got = list(listener.notifies(timeout=5.0, stop_after=1))
        assert [n.channel for n in got] == [outbox.CHANNEL]
        assert list(listener.notifies(timeout=0.2)) == [], "one notification for the transaction"


BROKER = os.environ.get("TASKBROKER_ADDR")
BINARY = pathlib.Path(os.environ.get("TASKBROKER_BIN", ROOT / "target" / "debug" / "taskbroker"))


@pytest.mark.skipif(not BROKER or not BINARY.exists(), reason="needs a broker and the built taskbroker binary")
def test_the_relay_turns_committed_rows_into_tasks(url: str) -> None:
    queue = f"test.python.outbox.{random.randrange(1 << 32)}"
    with psycopg.connect(url) as conn:
        with conn.transaction():
            kept = outbox.enqueue(conn, queue, b"kept")
        with pytest.raises(ZeroDivisionError), conn.transaction():
            outbox.enqueue(conn, queue, b"rolled back")
            _ = 1 / 0
    out = subprocess.run(
        [str(BINARY), "relay", "--once", "--source", url, "--addr", str(BROKER)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("shipped 1 rows"), out.stdout
    with Client.from_env(BROKER) as tb:
        tasks = tb.admin.ListTasks(admin_pb2.ListTasksRequest(queue=queue), timeout=10).tasks
    assert [(t.key, t.payload) for t in tasks] == [(kept.key, b"kept")]
    assert rows(url) == []
