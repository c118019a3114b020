"""Testing handlers and producers without a broker.

- ``TestContext`` (``AsyncTestContext`` for ``async def`` handlers): the ``TaskContext`` a
  handler receives, built from a queue and a payload (and whatever else the test sets:
  ``attempt``, ``metadata``, the ``checkpoint`` an earlier attempt saved), which records what
  the handler did: ``checkpoints``, ``cancel_checks`` and, through ``run``, its ``Outcome``
  (the result, or the failure as the worker would report it: retryable or permanent, with
  ``retry_after`` and the cooldown asked for, ``cool_down_key`` / ``cool_down_bucket``).
- ``FakeClient`` (``AsyncFakeClient``): the producer calls of ``Client`` (``submit``,
  ``submit_many``, ``get_task``, ``get_result``, ``wait``, ``wait_all``, ``submit_and_wait``)
  and the handler registration of ``Worker`` (``@fake.handler(queue)``, ``handle``, ``use``)
  in one object. A submit runs the task's handler in-process at once, attempt after attempt as
  the broker would (no backoff, ``run_at`` and ``delay`` not waited for), until it succeeds,
  fails permanently or its attempts run out (``max_attempts``, 3 by default; 1 with
  ``at_most_once``).

Example::

    def send(email: dict, ctx: TaskContext) -> str:
        ctx.checkpoint(b"rendered")
        return "sent"

    out = TestContext("emails", {"to": "ada@example.com"}).run(send)
    assert out.succeeded and out.value == "sent"

    fake = FakeClient()
    fake.handle("emails", send)
    assert fake.submit_and_wait("emails", {"to": "ada@example.com"}).result == b'"sent"'
"""

from __future__ import annotations

# The contexts live in testing_context, the fake clients in testing_fakes; the ``X as X``
# imports re-export the names that are not in ``__all__`` too.
# ruff: noqa: PLC0414
from typing import TypeVar

from taskbroker.context import CANCEL_REQUESTED, DEADLINE, LEASE_LOST, STOPPING
from taskbroker.testing_context import DEFAULT_MAX_ATTEMPTS, AsyncTestContext, Outcome, TestContext, leased_task
from taskbroker.testing_context import TEST_LEASE as TEST_LEASE
from taskbroker.testing_fakes import AsyncFakeClient, FakeClient
from taskbroker.v1 import broker_pb2

__all__ = [
    "CANCEL_REQUESTED",
    "DEADLINE",
    "DEFAULT_MAX_ATTEMPTS",
    "LEASE_LOST",
    "STOPPING",
    "AsyncFakeClient",
    "AsyncTestContext",
    "FakeClient",
    "Outcome",
    "TestContext",
    "leased_task",
]

T = TypeVar("T")
State = broker_pb2.TaskState
