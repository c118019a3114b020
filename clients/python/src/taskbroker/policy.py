"""Policy declared with a handler (docs/client-spec.md point 20), and ``TaskDef``.

``@worker.handler("emails", max_attempts=5, backoff=10, non_retryable=(ValueError,),
concurrency=2)``: the retry fields fill what a task's own retry leaves unset when it is
submitted through the worker's client (the spec's own retry wins, then the handler's,
then the broker's ``[queues.NAME] retry``, then its ``[retry]``); an exception of a
``non_retryable`` type (or with one among its causes) fails the attempt for good; and
``concurrency`` caps how many of the queue's tasks this worker runs at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from taskbroker.errors import PermanentError
from taskbroker.spec import Duration
from taskbroker.v1 import broker_pb2

P = TypeVar("P")
R = TypeVar("R")


@dataclass(frozen=True)
class QueuePolicy:
    """A queue's policy; each field unset (0, None, empty) unless given."""

    max_attempts: int = 0
    backoff: Duration | None = None
    backoff_multiplier: float = 0.0
    max_backoff: Duration | None = None
    non_retryable: tuple[type[BaseException], ...] = ()
    concurrency: int = 0

    def __post_init__(self) -> None:
        if self.max_attempts < 0:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.concurrency < 0:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        object.__setattr__(self, "non_retryable", tuple(self.non_retryable))

    def retry(self) -> broker_pb2.RetryPolicy:
        """The retry defaults as a RetryPolicy (unset fields at their zero value)."""
        from taskbroker.client import retry_policy

        return retry_policy(
            self.max_attempts,
            initial_backoff=self.backoff,
            backoff_multiplier=self.backoff_multiplier,
            max_backoff=self.max_backoff,
        )

    def is_non_retryable(self, error: BaseException) -> bool:
        """Whether ``error`` or one of its causes is of a ``non_retryable`` type."""
        seen: set[int] = set()
        e: BaseException | None = error
        while e is not None and id(e) not in seen and self.non_retryable:
            if isinstance(e, self.non_retryable):
                return True
            seen.add(id(e))
            e = e.__cause__ or e.__context__
        return False

    def classify(self, error: BaseException) -> BaseException:
        """``error``, as a PermanentError (its cause) when its type is non-retryable."""
        if isinstance(error, PermanentError) or not self.is_non_retryable(error):
            return error
        permanent = PermanentError(f"{type(error).__name__}: {error}")
        permanent.__cause__ = error
        return permanent


def policy_of(
    policy: QueuePolicy | None,
    *,
    max_attempts: int = 0,
    backoff: Duration | None = None,
    backoff_multiplier: float = 0.0,
    max_backoff: Duration | None = None,
    non_retryable: Iterable[type[BaseException]] = (),
    concurrency: int = 0,
) -> QueuePolicy | None:
    """The policy given (``policy=``) or built from the keyword arguments; None when empty."""
    built = QueuePolicy(max_attempts, backoff, backoff_multiplier, max_backoff, tuple(non_retryable), concurrency)
    if policy is not None:
        if built != QueuePolicy():
            raise ValueError("pass policy= or the policy's keyword arguments, not both")
        return policy
    return None if built == QueuePolicy() else built


def fill_retry(task: broker_pb2.TaskSpec, defaults: broker_pb2.RetryPolicy) -> None:
    """Fills, in place, the retry fields ``task`` leaves unset from ``defaults``."""
    if defaults == broker_pb2.RetryPolicy():
        return
    own = task.retry
    if own.max_attempts == 0:
        own.max_attempts = defaults.max_attempts
    if own.backoff_multiplier == 0:
        own.backoff_multiplier = defaults.backoff_multiplier
    if not own.HasField("initial_backoff") and defaults.HasField("initial_backoff"):
        own.initial_backoff.CopyFrom(defaults.initial_backoff)
    if not own.HasField("max_backoff") and defaults.HasField("max_backoff"):
        own.max_backoff.CopyFrom(defaults.max_backoff)
    if not own.HasField("jitter") and defaults.HasField("jitter"):
        own.jitter = defaults.jitter
    task.retry.CopyFrom(own)


def apply_defaults(
    table: Mapping[str, broker_pb2.RetryPolicy], specs: Sequence[broker_pb2.TaskSpec]
) -> list[broker_pb2.TaskSpec]:
    """``specs``, each with its queue's retry defaults filled in (copies; the caller's stay)."""
    if not table:
        return list(specs)
    out = []
    for s in specs:
        d = table.get(s.queue)
        if d is not None:
            c = broker_pb2.TaskSpec()
            c.CopyFrom(s)
            fill_retry(c, d)
            s = c
        out.append(s)
    return out


def lease_plan(
    queues: Sequence[str], limits: Mapping[str, int], running: Counter[str], free: int
) -> tuple[list[str], int]:
    """The queues a Lease may ask for and its max_tasks, so that no queue with its own
    ``concurrency`` gets more tasks than its free slots: full queues are left out, and
    the batch is no larger than the smallest free count of a limited queue asked for."""
    if not limits:
        return list(queues), free
    asked = [q for q in queues if q not in limits or running[q] < limits[q]]
    for q in asked:
        if q in limits:
            free = min(free, limits[q] - running[q])
    return asked, free


class TaskDef(Generic[P, R]):
    """One queue's tasks: the payload type ``P`` and result type ``R``, used by producers and
    workers alike.

    >>> emails = TaskDef("emails", Email, Sent, policy=QueuePolicy(max_attempts=5))
    >>> emails.submit(tb, Email(to="a@b.c"), delay=60)
    >>> sent = emails.submit_and_wait(tb, Email(to="a@b.c"), timeout=30)   # a Sent
    >>> @worker.task(emails)
    ... def send(e: Email) -> Sent: ...
    """

    def __init__(self, queue: str, payload: type[P], result: type[R], *, policy: QueuePolicy | None = None) -> None:
        self.queue = queue
        self.payload_type = payload
        self.result_type = result
        self.policy = policy

    def __repr__(self) -> str:
        return f"TaskDef({self.queue!r}, {self.payload_type.__name__}, {self.result_type.__name__})"

    def _options(self, options: dict[str, Any]) -> dict[str, Any]:
        if self.policy is None or self.policy.retry() == broker_pb2.RetryPolicy():
            return options
        retry = broker_pb2.RetryPolicy()
        if options.get("retry") is not None:
            retry.CopyFrom(options["retry"])
        holder = broker_pb2.TaskSpec(retry=retry)
        fill_retry(holder, self.policy.retry())
        return {**options, "retry": holder.retry}

    def submit(self, client: Any, payload: P, **options: Any) -> Any:
        """``client.submit`` to this queue (the client's keyword arguments: ``delay=``,
        ``run_at=``, ``key=``...), the definition's retry defaults filling what ``retry=``
        leaves unset. With an AsyncClient, await it."""
        return client.submit(self.queue, payload, **self._options(options))

    def delay(self, client: Any, payload: P, delay: Duration, **options: Any) -> Any:
        """``submit`` with the task not leased before ``delay`` (seconds or a timedelta) from now."""
        return self.submit(client, payload, delay=delay, **options)

    def run_at(self, client: Any, payload: P, at: Any, **options: Any) -> Any:
        """``submit`` with the task not leased before ``at`` (a datetime; naive is UTC)."""
        return self.submit(client, payload, run_at=at, **options)

    def submit_and_wait(self, client: Any, payload: P, *, timeout: Duration | None = None, **options: Any) -> R:
        """Submits, waits and returns the result decoded as ``R``; a task that ends DEAD or
        CANCELLED raises ``TaskFailedError``."""
        task = client.submit_and_wait(self.queue, payload, timeout=timeout, **self._options(options))
        return client.get_result(task, self.result_type)  # type: ignore[no-any-return]

    async def submit_and_wait_async(
        self, client: Any, payload: P, *, timeout: Duration | None = None, **options: Any
    ) -> R:
        """``submit_and_wait`` on an AsyncClient."""
        task = await client.submit_and_wait(self.queue, payload, timeout=timeout, **self._options(options))
        return await client.get_result(task, self.result_type)  # type: ignore[no-any-return]
