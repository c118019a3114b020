"""The numbers and rules of docs/client-spec.md that every client shares.

Pure: no I/O, so the worker, the asyncio worker and the tests read the same values.
"""

from __future__ import annotations

import random

import grpc
import grpc.aio

#: Handlers running at once (and leases held at most).
DEFAULT_CONCURRENCY = 4
#: Lease long-poll wait, seconds.
DEFAULT_POLL_WAIT = 10.0
#: Lease duration and every extension, seconds.
DEFAULT_LEASE_DURATION = 30.0
#: How long stop() lets running handlers finish before cancelling them, seconds.
DEFAULT_STOP_TIMEOUT = 30.0
#: Deadline of every call except Lease, seconds.
CALL_TIMEOUT = 10.0
#: Added to the poll wait to make a Lease call's deadline, seconds.
LEASE_MARGIN = 5.0
#: Backoff after failed calls in a row: full jitter between a tenth and all of
#: min(BACKOFF_MAX, BACKOFF_BASE * 2**failures), seconds.
BACKOFF_BASE = 0.2
BACKOFF_MAX = 10.0
#: Codes that stop a worker: retrying the same Lease cannot fix them.
STOP_CODES = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
#: Codes on which Complete and Fail (idempotent per lease token) are sent again, until the
#: lease is about to run out (SETTLE_MARGIN).
REPORT_RETRY_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
#: A settle is not retried when the retry would start within this of the lease's expiry, seconds.
SETTLE_MARGIN = 1.0
#: What stop() may take past its stop timeout, seconds: HANDBACK_GRACE for cancelled handlers
#: to return, then the hand-backs (Fail, retry_after 0) with the rest as their deadline.
STOP_MARGIN = 2.0
#: How long handlers cancelled by the stop timeout get to return before they are left behind.
HANDBACK_GRACE = 1.0
#: The message of the Fail that hands a task back at stop (retryable, retry_after 0).
HANDBACK_MESSAGE = "worker stopped"


def heartbeat_interval(lease_duration: float) -> float:
    """A third of the lease: two heartbeats may fail before a lease runs out."""
    return lease_duration / 3


def backoff_ceiling(failures: int) -> float:
    """The longest pause after ``failures`` failures in a row (0 = the first)."""
    return min(BACKOFF_MAX, BACKOFF_BASE * 2 ** min(max(failures, 0), 16))


def backoff(failures: int) -> float:
    """A random pause in [0.1, 1] x backoff_ceiling(failures), so workers spread out."""
    return backoff_ceiling(failures) * max(random.random(), 0.1)  # noqa: S311 -- jitter, not crypto


def stops_worker(err: BaseException) -> bool:
    """True when a Lease error (sync or asyncio) stops the worker instead of being retried."""
    return isinstance(err, (grpc.Call, grpc.aio.AioRpcError)) and err.code() in STOP_CODES
