import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_SCHEDULED: _ClassVar[TaskState]
    TASK_STATE_READY: _ClassVar[TaskState]
    TASK_STATE_LEASED: _ClassVar[TaskState]
    TASK_STATE_SUCCEEDED: _ClassVar[TaskState]
    TASK_STATE_DEAD: _ClassVar[TaskState]
    TASK_STATE_CANCELLED: _ClassVar[TaskState]

class CompleteOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPLETE_OUTCOME_UNSPECIFIED: _ClassVar[CompleteOutcome]
    COMPLETE_OUTCOME_COMPLETED: _ClassVar[CompleteOutcome]
    COMPLETE_OUTCOME_LEASE_LOST: _ClassVar[CompleteOutcome]
    COMPLETE_OUTCOME_NOT_FOUND: _ClassVar[CompleteOutcome]
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_SCHEDULED: TaskState
TASK_STATE_READY: TaskState
TASK_STATE_LEASED: TaskState
TASK_STATE_SUCCEEDED: TaskState
TASK_STATE_DEAD: TaskState
TASK_STATE_CANCELLED: TaskState
COMPLETE_OUTCOME_UNSPECIFIED: CompleteOutcome
COMPLETE_OUTCOME_COMPLETED: CompleteOutcome
COMPLETE_OUTCOME_LEASE_LOST: CompleteOutcome
COMPLETE_OUTCOME_NOT_FOUND: CompleteOutcome

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff", "backoff_multiplier", "max_backoff", "jitter")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff: _duration_pb2.Duration
    backoff_multiplier: float
    max_backoff: _duration_pb2.Duration
    jitter: float
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., backoff_multiplier: _Optional[float] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., jitter: _Optional[float] = ...) -> None: ...

class TaskSpec(_message.Message):
    __slots__ = ("queue", "payload", "key", "priority", "run_at", "deadline", "retry", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    queue: str
    payload: bytes
    key: str
    priority: int
    run_at: _timestamp_pb2.Timestamp
    deadline: _timestamp_pb2.Timestamp
    retry: RetryPolicy
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, queue: _Optional[str] = ..., payload: _Optional[bytes] = ..., key: _Optional[str] = ..., priority: _Optional[int] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSpec]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskSpec, _Mapping]]] = ...) -> None: ...

class SubmitResult(_message.Message):
    __slots__ = ("task_id", "deduplicated")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    deduplicated: bool
    def __init__(self, task_id: _Optional[str] = ..., deduplicated: _Optional[bool] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SubmitResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SubmitResult, _Mapping]]] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ("worker_id", "queues", "max_tasks", "lease_duration", "wait")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    max_tasks: int
    lease_duration: _duration_pb2.Duration
    wait: _duration_pb2.Duration
    def __init__(self, worker_id: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., max_tasks: _Optional[int] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class LeasedTask(_message.Message):
    __slots__ = ("task_id", "queue", "payload", "key", "priority", "deadline", "metadata", "attempt", "lease_token", "fencing_token", "lease_expires_at", "checkpoint", "has_checkpoint", "max_attempts", "created_at")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    HAS_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    queue: str
    payload: bytes
    key: str
    priority: int
    deadline: _timestamp_pb2.Timestamp
    metadata: _containers.ScalarMap[str, str]
    attempt: int
    lease_token: str
    fencing_token: int
    lease_expires_at: _timestamp_pb2.Timestamp
    checkpoint: bytes
    has_checkpoint: bool
    max_attempts: int
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, task_id: _Optional[str] = ..., queue: _Optional[str] = ..., payload: _Optional[bytes] = ..., key: _Optional[str] = ..., priority: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., attempt: _Optional[int] = ..., lease_token: _Optional[str] = ..., fencing_token: _Optional[int] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., checkpoint: _Optional[bytes] = ..., has_checkpoint: _Optional[bool] = ..., max_attempts: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[LeasedTask]
    def __init__(self, tasks: _Optional[_Iterable[_Union[LeasedTask, _Mapping]]] = ...) -> None: ...

class LeaseRef(_message.Message):
    __slots__ = ("task_id", "lease_token")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_token: str
    def __init__(self, task_id: _Optional[str] = ..., lease_token: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "leases", "extend_by")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    EXTEND_BY_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    extend_by: _duration_pb2.Duration
    def __init__(self, worker_id: _Optional[str] = ..., leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ..., extend_by: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class LeaseStatus(_message.Message):
    __slots__ = ("task_id", "lost", "lease_expires_at", "cancel_requested")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lost: bool
    lease_expires_at: _timestamp_pb2.Timestamp
    cancel_requested: bool
    def __init__(self, task_id: _Optional[str] = ..., lost: _Optional[bool] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cancel_requested: _Optional[bool] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseStatus]
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseStatus, _Mapping]]] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("task_id", "lease_token", "checkpoint", "extend_by")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    EXTEND_BY_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_token: str
    checkpoint: bytes
    extend_by: _duration_pb2.Duration
    def __init__(self, task_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., checkpoint: _Optional[bytes] = ..., extend_by: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("lease_expires_at", "cancel_requested")
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    lease_expires_at: _timestamp_pb2.Timestamp
    cancel_requested: bool
    def __init__(self, lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cancel_requested: _Optional[bool] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("task_id", "lease_token", "result")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_token: str
    result: bytes
    def __init__(self, task_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., result: _Optional[bytes] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CompleteManyRequest(_message.Message):
    __slots__ = ("completions",)
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    completions: _containers.RepeatedCompositeFieldContainer[CompleteRequest]
    def __init__(self, completions: _Optional[_Iterable[_Union[CompleteRequest, _Mapping]]] = ...) -> None: ...

class CompleteResult(_message.Message):
    __slots__ = ("task_id", "outcome")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    outcome: CompleteOutcome
    def __init__(self, task_id: _Optional[str] = ..., outcome: _Optional[_Union[CompleteOutcome, str]] = ...) -> None: ...

class CompleteManyResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CompleteResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CompleteResult, _Mapping]]] = ...) -> None: ...

class FailRequest(_message.Message):
    __slots__ = ("task_id", "lease_token", "error_message", "non_retryable", "retry_after")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NON_RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_token: str
    error_message: str
    non_retryable: bool
    retry_after: _duration_pb2.Duration
    def __init__(self, task_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., error_message: _Optional[str] = ..., non_retryable: _Optional[bool] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class FailResponse(_message.Message):
    __slots__ = ("state", "next_run_at")
    STATE_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_AT_FIELD_NUMBER: _ClassVar[int]
    state: TaskState
    next_run_at: _timestamp_pb2.Timestamp
    def __init__(self, state: _Optional[_Union[TaskState, str]] = ..., next_run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
