"""The numbers and rules of docs/client-spec.md that every client shares.

Pure: no I/O, so the worker, the asyncio worker and the tests read the same values.
"""

from __future__ import annotations

import datetime
import random
import re

import grpc
import grpc.aio

from taskbroker.errors import retry_delay

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
#: Submit refused with RESOURCE_EXHAUSTED carrying google.rpc.RetryInfo (a queue's
#: max_pending): sent again after the hinted delay, at most this many times (5 tries in all;
#: docs/client-spec.md, point 18).
SUBMIT_RETRIES = 4
#: The longest wait before one such resend, seconds (a longer hint is cut to this).
SUBMIT_RETRY_MAX_DELAY = 10.0


#: A duration in the public API: a ``datetime.timedelta`` or a number of seconds.
Duration = float | datetime.timedelta


def seconds(value: Duration) -> float:
    """A duration (``timedelta`` or seconds) as seconds."""
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a duration is a timedelta or a number of seconds, not {type(value).__name__}")
    return float(value)


def check_worker_options(queues: object, concurrency: int, lease_duration: float, poll_wait: float) -> None:
    """Raises ValueError, naming the option, for a Worker or AsyncWorker the broker would refuse
    (``queues`` None: the queues come from registered handlers, checked when it runs)."""
    if queues is not None and not queues:
        raise ValueError("queues is empty")
    if not 1 <= concurrency <= 256:
        raise ValueError("concurrency must be 1 to 256 (the broker's max_tasks)")
    if lease_duration < 1:
        raise ValueError("lease_duration is below the broker's 1 s minimum")
    if not 0 <= poll_wait <= 60:
        raise ValueError("poll_wait must be 0 to 60 s")


def heartbeat_interval(lease_duration: float) -> float:
    """A third of the lease: two heartbeats may fail before a lease runs out."""
    return lease_duration / 3


def backoff_ceiling(failures: int) -> float:
    """The longest pause after ``failures`` failures in a row (0 = the first)."""
    return min(BACKOFF_MAX, BACKOFF_BASE * 2 ** min(max(failures, 0), 16))


def backoff(failures: int) -> float:
    """A random pause in [0.1, 1] x backoff_ceiling(failures), so workers spread out."""
    return backoff_ceiling(failures) * max(random.random(), 0.1)  # noqa: S311 -- jitter, not crypto


def submit_retry_delay(err: BaseException, retries: int) -> float | None:
    """Seconds to wait before sending a refused Submit again, or None to raise the error:
    only RESOURCE_EXHAUSTED with a RetryInfo delay is retried (the broker stored nothing),
    at most SUBMIT_RETRIES times (``retries`` made so far), each wait at most
    SUBMIT_RETRY_MAX_DELAY."""
    if retries >= SUBMIT_RETRIES:
        return None
    if not isinstance(err, (grpc.Call, grpc.aio.AioRpcError)) or err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    delay = retry_delay(err)
    if delay is None:
        return None
    return min(max(delay, 0.0), SUBMIT_RETRY_MAX_DELAY)


def stops_worker(err: BaseException) -> bool:
    """True when a Lease error (sync or asyncio) stops the worker instead of being retried."""
    return isinstance(err, (grpc.Call, grpc.aio.AioRpcError)) and err.code() in STOP_CODES


def config_error(err: BaseException) -> str | None:
    """With fail_fast: one plain line when a call's error is a configuration that retrying
    cannot fix (a TLS mismatch, a port that is not the broker's gRPC port, a refused token or
    role), else None (docs/client-spec.md, point 17)."""
    if not isinstance(err, (grpc.Call, grpc.aio.AioRpcError)):
        return None
    code, details = err.code(), err.details() or ""
    low = details.lower()
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return f"the broker refused the token (UNAUTHENTICATED): {details}"
    if code == grpc.StatusCode.PERMISSION_DENIED:
        if "received http" in low:
            return f"the server is not a gRPC broker (an HTTP answer: {details})"
        return f"the broker refused the call (PERMISSION_DENIED): {details}"
    if code in STOP_CODES and "received http" in low:
        return f"the server is not a gRPC broker (an HTTP answer: {details})"
    if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
        return None
    if "handshake failed" in low or "ssl_error" in low:
        reason = re.search(r"OPENSSL_internal:([A-Z_]+)", details)
        why = reason.group(1) if reason else "see the log"
        if why == "WRONG_VERSION_NUMBER":
            return "the TLS handshake failed: the server does not speak TLS (a plaintext port reached with TLS?)"
        return f"the TLS handshake failed ({why}): is TLS on at both ends, with the right CA?"
    if "failed to connect to all addresses" in low and "socket closed" in low:
        return "the server closed the connection before answering: a TLS port reached without TLS?"
    if "received http" in low or "http/1" in low:
        return f"the server is not a gRPC broker ({details})"
    return None
