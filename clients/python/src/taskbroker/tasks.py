"""Tasks as the operator calls of ``Client`` answer them (``get_task``, ``list_tasks``,
``cancel_task``, ``requeue_task``, ``explain_task``): states, gate kinds and lease paths by
name, times as aware ``datetime``s. The message each came from stays on ``.proto``.

Owns no calls (see client.py and aio.py): only the conversions.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import timestamp_pb2

from taskbroker.v1 import admin_pb2, broker_pb2, event_pb2, queue_pb2


class TaskState(enum.IntEnum):
    """A task's state. Prints as its name (``SUCCEEDED``) and compares equal to the protobuf
    value (``TaskState.SUCCEEDED == broker_pb2.TASK_STATE_SUCCEEDED``)."""

    UNSPECIFIED = broker_pb2.TASK_STATE_UNSPECIFIED
    SCHEDULED = broker_pb2.TASK_STATE_SCHEDULED
    READY = broker_pb2.TASK_STATE_READY
    LEASED = broker_pb2.TASK_STATE_LEASED
    SUCCEEDED = broker_pb2.TASK_STATE_SUCCEEDED
    DEAD = broker_pb2.TASK_STATE_DEAD
    CANCELLED = broker_pb2.TASK_STATE_CANCELLED
    BLOCKED = broker_pb2.TASK_STATE_BLOCKED

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

    @classmethod
    def of(cls, value: TaskState | str | int) -> TaskState:
        """A state from its name (``"DEAD"``, any case) or value; ``ValueError`` naming it otherwise."""
        if isinstance(value, str):
            try:
                return cls[value.upper().removeprefix("TASK_STATE_")]
            except KeyError:
                names = ", ".join(s.name for s in cls if s is not cls.UNSPECIFIED)
                raise ValueError(f"unknown task state {value!r} (one of {names})") from None
        return cls(value)


def _time(msg: Any, field: str) -> datetime.datetime | None:
    if not msg.HasField(field):
        return None
    ts: timestamp_pb2.Timestamp = getattr(msg, field)
    return ts.ToDatetime(tzinfo=datetime.timezone.utc)


def _name(enum_type: Any, value: int, prefix: str) -> str:
    """The enum value's name without its prefix; "" for UNSPECIFIED."""
    return "" if value == 0 else str(enum_type.Name(value)).removeprefix(prefix)


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """A task as the broker has it; times not set are None. Other fields of the message read
    through to it (``task.depends_on``, ``task.fencing_token``)."""

    id: str
    queue: str
    key: str
    state: TaskState
    attempt: int
    max_attempts: int
    priority: int
    payload: bytes
    result: bytes
    last_error: str
    metadata: dict[str, str]
    run_at: datetime.datetime | None
    deadline: datetime.datetime | None
    created_at: datetime.datetime | None
    updated_at: datetime.datetime | None
    finished_at: datetime.datetime | None
    leased_by: str
    lease_expires_at: datetime.datetime | None
    cancel_requested: bool
    #: "OPERATOR" or "DEPENDENCY_FAILED" for a CANCELLED task, "" otherwise.
    cancel_reason: str
    proto: admin_pb2.Task = dataclasses.field(repr=False, compare=False)

    @classmethod
    def of(cls, t: admin_pb2.Task) -> TaskInfo:
        return cls(
            id=t.id,
            queue=t.queue,
            key=t.key,
            state=TaskState(t.state),
            attempt=t.attempt,
            max_attempts=t.max_attempts,
            priority=t.priority,
            payload=t.payload,
            result=t.result,
            last_error=t.last_error,
            metadata=dict(t.metadata),
            run_at=_time(t, "run_at"),
            deadline=_time(t, "deadline"),
            created_at=_time(t, "created_at"),
            updated_at=_time(t, "updated_at"),
            finished_at=_time(t, "finished_at"),
            leased_by=t.leased_by,
            lease_expires_at=_time(t, "lease_expires_at"),
            cancel_requested=t.cancel_requested,
            cancel_reason=_name(event_pb2.CancelReason, t.cancel_reason, "CANCEL_REASON_"),
            proto=t,
        )

    def __getattr__(self, name: str) -> Any:
        # Only called for names that are not fields: the message's other fields.
        if name == "proto" or name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.proto, name)


@dataclasses.dataclass(frozen=True)
class Gate:
    """One reason a waiting task is not leased now; kind ``NONE``: nothing holds it."""

    kind: str
    detail: str
    until: datetime.datetime | None
    holder_task_ids: list[str]
    ahead: int


@dataclasses.dataclass(frozen=True)
class Explanation:
    """What holds a task (ExplainTask). ``gates`` is empty when the task is not waiting (leased
    or finished); ``lease_path`` is ``PLAIN``, ``ROUTED`` or ``GATED`` for a waiting task, ""
    otherwise."""

    task_id: str
    state: TaskState
    gates: list[Gate]
    lease_path: str
    proto: queue_pb2.ExplainTaskResponse = dataclasses.field(repr=False, compare=False)

    @classmethod
    def of(cls, r: queue_pb2.ExplainTaskResponse) -> Explanation:
        gates = [
            Gate(
                kind=_name(queue_pb2.GateKind, g.kind, "GATE_KIND_"),
                detail=g.detail,
                until=_time(g, "until"),
                holder_task_ids=list(g.holder_task_ids),
                ahead=g.ahead,
            )
            for g in r.gates
        ]
        return cls(
            task_id=r.task_id,
            state=TaskState(r.state),
            gates=gates,
            lease_path=_name(queue_pb2.LeasePath, r.lease_path, "LEASE_PATH_"),
            proto=r,
        )


def list_request(
    *,
    queue: str = "",
    states: Iterable[TaskState | str] = (),
    key: str = "",
    worker_id: str = "",
    fanout_group: str = "",
    schedule_id: str = "",
    created_after: datetime.datetime | None = None,
    created_before: datetime.datetime | None = None,
    target_worker: str = "",
    target_labels: Mapping[str, str] | None = None,
    metadata_key: str = "",
    metadata_value: str = "",
    page_size: int = 0,
) -> admin_pb2.ListTasksRequest:
    """The ListTasksRequest of ``list_tasks``'s filter; ``ValueError`` naming ``states`` for an
    unknown state. The broker checks the target and metadata filters (``metadata_value``
    without ``metadata_key`` is INVALID_ARGUMENT)."""
    try:
        values = [broker_pb2.TaskState.ValueType(TaskState.of(s)) for s in states]
    except ValueError as err:
        raise ValueError(f"states: {err}") from None
    req = admin_pb2.ListTasksRequest(
        queue=queue, states=values, key=key, worker_id=worker_id, fanout_group=fanout_group,
        schedule_id=schedule_id, target_worker_id=target_worker, target_labels=target_labels or {},
        metadata_key=metadata_key, metadata_value=metadata_value, page_size=page_size,
    )
    for field, when in (("created_after", created_after), ("created_before", created_before)):
        if when is not None:
            if when.tzinfo is None:
                when = when.replace(tzinfo=datetime.timezone.utc)
            getattr(req, field).FromDatetime(when)
    return req
