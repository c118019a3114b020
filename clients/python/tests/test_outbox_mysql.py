"""taskbroker.outbox's MySQL enqueue against a real MariaDB/MySQL
($TASKBROKER_TEST_MYSQL_URL, from scripts/mysql.sh; skipped without one unless
TASKBROKER_REQUIRE_MYSQL is set), through PyMySQL's DB-API cursor."""

from __future__ import annotations

import os
import pathlib
import random
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from taskbroker import outbox
from taskbroker.v1 import broker_pb2

ADMIN_URL = os.environ.get("TASKBROKER_TEST_MYSQL_URL")
if not ADMIN_URL and os.environ.get("TASKBROKER_REQUIRE_MYSQL"):
    raise RuntimeError("TASKBROKER_TEST_MYSQL_URL is not set but MySQL tests are required")
pytestmark = pytest.mark.skipif(not ADMIN_URL, reason="TASKBROKER_TEST_MYSQL_URL is not set")
pymysql = pytest.importorskip("pymysql")

SCHEMA = pathlib.Path(__file__).resolve().parents[3] / "migrations" / "outbox" / "mysql" / "0001_outbox.sql"


def connect(database: str | None) -> Any:
    assert ADMIN_URL
    u = urllib.parse.urlparse(ADMIN_URL)
    return pymysql.connect(
        host=u.hostname, port=u.port or 3306, user=u.username, password=u.password, database=database
    )


@pytest.fixture
def conn() -> Iterator[Any]:
    """A connection to a fresh database with the shipped outbox schema and an orders table."""
    name = f"tb_py_outbox_{os.getpid()}_{random.randrange(1 << 40)}"
    admin = connect(None)
    with admin.cursor() as c:
        c.execute(f"CREATE DATABASE {name}")
    c = connect(name)
    with c.cursor() as cur:
        cur.execute(SCHEMA.read_text())
        cur.execute("CREATE TABLE orders (id bigint PRIMARY KEY, total bigint NOT NULL) ENGINE = InnoDB")
    c.commit()
    try:
        yield c
    finally:
        c.close()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE {name}")
        admin.close()


def test_a_row_commits_and_rolls_back_with_the_callers_transaction(conn: Any) -> None:
    with conn.cursor() as cur:
        cur.execute("INSERT INTO orders VALUES (1, 100)")
        kept = outbox.enqueue_mysql(cur, "emails", b"order 1", key="order-1")
    conn.commit()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO orders VALUES (2, 200)")
        dropped = outbox.enqueue_mysql(cur, "emails", b"order 2")
    conn.rollback()
    assert kept.key == "order-1"
    assert dropped.key.startswith(outbox.KEY_PREFIX)
    with conn.cursor() as cur:
        cur.execute("SELECT id, idempotency_key, spec FROM taskbroker_outbox")
        rows = cur.fetchall()
    assert [(r[0], r[1]) for r in rows] == [(kept.id, "order-1")]
    spec = broker_pb2.TaskSpec.FromString(rows[0][2])
    assert (spec.queue, spec.payload, spec.key) == ("emails", b"order 1", "order-1")


def test_a_spec_the_broker_would_refuse_writes_nothing(conn: Any) -> None:
    with conn.cursor() as cur, pytest.raises(ValueError, match="^queue: may only contain"):
        outbox.enqueue_mysql(cur, "has space", b"x")
    conn.commit()
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM taskbroker_outbox")
        assert cur.fetchone()[0] == 0
