"""Routing: who may lease a task, how its retries stay on one worker, and
fan-out to several workers. Builders of the ``broker_pb2`` messages that ``Client.submit``
and ``AsyncClient.submit`` take as ``target=``, ``sticky=`` and ``fanout=``.

>>> tb.submit("render", b"frame-1", target=target(labels={"gpu": "a100"}))
>>> tb.submit("build", b"", sticky=sticky("soft", timeout=60))
>>> tb.submit("warm-cache", b"", fanout=fanout(6, distinct_workers=True)).copy_task_ids
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from taskbroker.spec import Duration, seconds
from taskbroker.v1 import broker_pb2

#: At most this many labels on a worker or a target.
MAX_LABELS = 32

StickyStrategy = Literal["soft", "hard"]


def target(worker_id: str = "", labels: Mapping[str, str] | None = None) -> broker_pb2.Target:
    """Only the worker with ``worker_id`` (when given), and only a worker whose labels include
    every pair of ``labels`` (when any), may lease the task. No such worker is not an error:
    the task waits."""
    if not worker_id and not labels:
        raise ValueError("a target needs a worker_id or labels")
    return broker_pb2.Target(worker_id=worker_id, labels=dict(labels or {}))


def sticky(strategy: StickyStrategy = "soft", *, timeout: Duration | None = None) -> broker_pb2.StickyPolicy:
    """A retry is reserved for the worker that ran the failed attempt. ``"soft"``: until
    ``timeout`` (a ``timedelta`` or seconds: 1 s to 24 h; the broker's default 30 s) passes,
    then any worker; ``"hard"``: until the task's deadline or an admin requeue (``timeout`` is
    not used)."""
    strategies = {"soft": broker_pb2.STICKY_STRATEGY_SOFT, "hard": broker_pb2.STICKY_STRATEGY_HARD}
    if strategy not in strategies:
        raise ValueError(f"sticky strategy must be 'soft' or 'hard', not {strategy!r}")
    policy = broker_pb2.StickyPolicy(strategy=strategies[strategy])
    if timeout is not None:
        if strategy == "hard":
            raise ValueError("a hard sticky policy has no timeout")
        policy.timeout.FromNanoseconds(round(seconds(timeout) * 1e9))
    return policy


def fanout(copies: int, *, distinct_workers: bool = False) -> broker_pb2.Fanout:
    """Submit makes ``copies`` tasks (1 to 1000) sharing a fan-out group, the first copy's id;
    the SubmitResult's ``copy_task_ids`` lists them. With ``distinct_workers`` no worker gets
    two copies of the group."""
    if not 1 <= copies <= 1000:
        raise ValueError("fanout copies must be 1 to 1000")
    return broker_pb2.Fanout(copies=copies, distinct_workers=distinct_workers)


def check_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    """A worker's labels as sent on every Lease; the broker checks their syntax."""
    out = dict(labels or {})
    if len(out) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels, got {len(out)}")
    return out
