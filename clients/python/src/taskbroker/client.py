"""A channel to the broker with its service stubs (broker, admin, schedules), and how to
connect (token, TLS)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Union

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from taskbroker import spec, tracing
from taskbroker.buckets import BucketCalls
from taskbroker.errors import TaskNotSucceededError, raise_if_failed
from taskbroker.policy import apply_defaults
from taskbroker.serde import DEFAULT_SERIALIZER, Serializer, encode_payload
from taskbroker.spec import Duration, seconds
from taskbroker.tasks import Explanation, TaskInfo, TaskState, list_request
from taskbroker.wait import wait_tasks
from taskbroker.v1 import admin_pb2, admin_pb2_grpc, broker_pb2, broker_pb2_grpc, queue_pb2, schedule_pb2_grpc, worker_pb2

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")

log = logging.getLogger("taskbroker.client")

#: ``on_duplicate_key``: a DuplicateKeyPolicy value, or ``"keep_existing"`` /
#: ``"replace_waiting"``.
DuplicateKey = Union[int, str]
_DUPLICATE_KEY = {
    "keep_existing": broker_pb2.DUPLICATE_KEY_POLICY_KEEP_EXISTING,
    "replace_waiting": broker_pb2.DUPLICATE_KEY_POLICY_REPLACE_WAITING,
}


class SubmitOptions(TypedDict, total=False):
    """The keyword arguments of ``Client.submit`` and ``AsyncClient.submit``: ``task_spec``'s,
    with its defaults (``depends_on_index`` is ``submit_many``'s alone)."""

    key: str
    priority: int
    run_at: datetime.datetime | None
    delay: Duration | None
    deadline: datetime.datetime | None
    retry: broker_pb2.RetryPolicy | None
    metadata: Mapping[str, str] | None
    target: broker_pb2.Target | None
    sticky: broker_pb2.StickyPolicy | None
    fanout: broker_pb2.Fanout | None
    concurrency_key: str
    bucket: str
    checkpoint: bytes | None
    depends_on: Sequence[str]
    run_if_dependency_fails: bool
    depends_on_keys: Sequence[broker_pb2.TaskKey | tuple[str, str]]
    on_duplicate_key: DuplicateKey
    at_most_once: bool


@dataclasses.dataclass(frozen=True)
class TLSConfig:
    """TLS settings, as PEM bytes: the CA to trust (None: the system roots) and, for mTLS,
    the client certificate chain and its private key."""

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None

    @classmethod
    def from_files(cls, ca: str | None = None, cert: str | None = None, key: str | None = None) -> TLSConfig:
        """Reads the PEM files that are given."""
        if (cert is None) != (key is None):
            raise ValueError("pass both cert and key (mTLS), or neither")
        return cls(ca=_read(ca), cert=_read(cert), key=_read(key))

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


@dataclasses.dataclass(frozen=True)
class ConnectOptions:
    """How to reach a broker: ``target`` (host:port), a bearer ``token``, ``tls`` settings
    (``TLSConfig``; ``True`` for the system roots). See ``ConnectOptions.from_env``."""

    target: str
    token: str | None = None
    tls: TLSConfig | bool | None = None

    @classmethod
    def from_env(cls, target: str | None = None) -> ConnectOptions:
        """The standard environment (docs/client-spec.md, point 8): ``TASKBROKER_ADDR``,
        ``TASKBROKER_TOKEN``, ``TASKBROKER_CA`` (turns TLS on), ``TASKBROKER_CLIENT_CERT`` and
        ``TASKBROKER_CLIENT_KEY`` (mTLS)."""
        env = {k: v for k, v in os.environ.items() if k.startswith("TASKBROKER_") and v}
        target = target or env.get("TASKBROKER_ADDR", "127.0.0.1:50051")
        ca, cert, key = env.get("TASKBROKER_CA"), env.get("TASKBROKER_CLIENT_CERT"), env.get("TASKBROKER_CLIENT_KEY")
        tls = TLSConfig.from_files(ca, cert, key) if (ca or cert or key) else None
        return cls(target=target, token=env.get("TASKBROKER_TOKEN"), tls=tls)

    def metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.token}")] if self.token else []

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        if self.tls is None or self.tls is False:
            return None
        if self.tls is True:
            return grpc.ssl_channel_credentials()
        return self.tls.credentials()


class _TokenInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds ``authorization: Bearer TOKEN`` to every call. An interceptor rather than call
    credentials, so the token also works on a plaintext channel inside a mesh."""

    def __init__(self, metadata: list[tuple[str, str]]) -> None:
        self._metadata = metadata

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _CallDetails(
            details.method,
            details.timeout,
            list(details.metadata or []) + self._metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), request)


class _CallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression):  # type: ignore[no-untyped-def]
        self.method = method
        self.timeout = timeout
        self.metadata = metadata
        self.credentials = credentials
        self.wait_for_ready = wait_for_ready
        self.compression = compression


def check_channel_args(target: str | None, channel: object, token: str | None, tls: TLSConfig | bool | None) -> None:
    """Raises ValueError unless a client gets a target (with its token and TLS) or a channel."""
    if (target is None) == (channel is None):
        raise ValueError("pass exactly one of target (host:port) or channel")
    if channel is not None and (token or tls):
        raise ValueError("token and tls apply to a target; a channel brings its own")


def open_channel(options: ConnectOptions) -> grpc.Channel:
    """A sync channel with the options' TLS settings and token."""
    creds = options.channel_credentials()
    channel = grpc.secure_channel(options.target, creds) if creds else grpc.insecure_channel(options.target)
    if options.token:
        channel = grpc.intercept_channel(channel, _TokenInterceptor(options.metadata()))
    return channel


class Client(BucketCalls):
    """Holds a gRPC channel and the BrokerService, AdminService and ScheduleService stubs on it.

    >>> with Client("127.0.0.1:50051") as tb:
    ...     task_id = tb.submit("emails", b"hello").task_id
    >>> Client("broker:50051", token=os.environ["TASKBROKER_TOKEN"],
    ...        tls=TLSConfig.from_files(ca="ca.pem", cert="client.pem", key="client.key"))
    >>> Client.from_env()  # TASKBROKER_ADDR, _TOKEN, _CA, _CLIENT_CERT, _CLIENT_KEY

    ``serializer`` (default JSON) encodes what ``submit`` gets that is not bytes, and decodes
    results in ``get_result``; workers on this client use it for payloads and results too.

    Limit buckets and cooldowns (``get_bucket``, ``list_buckets``, ``update_bucket``,
    ``delete_bucket``, ``list_cooldowns``, ``lift_cooldown``) come from ``BucketCalls``.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        channel: grpc.Channel | None = None,
        token: str | None = None,
        tls: TLSConfig | bool | None = None,
        serializer: Serializer | None = None,
    ) -> None:
        check_channel_args(target, channel, token, tls)
        self.serializer: Serializer = serializer or DEFAULT_SERIALIZER
        self._owns_channel = channel is None
        if channel is None:
            channel = open_channel(ConnectOptions(target=target, token=token, tls=tls))  # type: ignore[arg-type]
        self.channel: grpc.Channel = channel
        self.broker = broker_pb2_grpc.BrokerServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        self.schedules = schedule_pb2_grpc.ScheduleServiceStub(self.channel)
        #: Retry defaults by queue, declared with handlers (``taskbroker.policy``).
        self.retry_defaults: dict[str, broker_pb2.RetryPolicy] = {}

    @classmethod
    def from_env(cls, target: str | None = None, *, serializer: Serializer | None = None) -> Client:
        """A client configured from the standard environment; see ``ConnectOptions.from_env``."""
        o = ConnectOptions.from_env(target)
        return cls(o.target, token=o.token, tls=o.tls, serializer=serializer)

    def submit(
        self,
        queue: str,
        payload: Any = b"",
        *,
        timeout: Duration = spec.CALL_TIMEOUT,
        **options: Unpack[SubmitOptions],
    ) -> broker_pb2.SubmitResult:
        """Submits one task and returns its SubmitResult (task_id, deduplicated, ``replaced``,
        and with ``fanout`` every copy's id in ``copy_task_ids``). Every TaskSpec field is a
        keyword argument (see ``task_spec``).

        ``delay=timedelta(minutes=5)`` (or seconds: ``delay=300``) keeps the task SCHEDULED
        for that long from now (this machine's clock); ``run_at=datetime(...)`` until an
        absolute time (naive is UTC).

        ``payload`` is sent as it is when it is ``bytes``; anything else (a dataclass, a dict,
        a pydantic model, a str...) is encoded by the client's serializer (JSON by default):
        ``tb.submit("emails", Email(to="ada@example.com"))``.

        ``target``, ``sticky`` and ``fanout`` route the task (``taskbroker.routing`` builds
        them: ``target(labels={"gpu": "a100"})``, ``sticky("soft", timeout=60)``,
        ``fanout(6, distinct_workers=True)``).

        ``depends_on`` (task ids) keeps the task BLOCKED until those tasks SUCCEEDED; when one
        ends DEAD or CANCELLED this one is CANCELLED (reason DEPENDENCY_FAILED) unless
        ``run_if_dependency_fails``. For tasks depending on each other within one request,
        see ``submit_many``; ``depends_on_keys`` names dependencies by ``(queue, key)``, which
        may be submitted later.

        ``on_duplicate_key="replace_waiting"`` makes a submission whose ``key`` is taken by a
        task that still waits replace that task's payload, run_at, priority and metadata
        (``replaced`` is then true). ``at_most_once`` gives the task one attempt only.

        A Submit refused with RESOURCE_EXHAUSTED and a RetryInfo (the queue's ``max_pending``)
        is sent again after the hinted delay (at most 10 s), up to 5 tries in all, then raised.

        The current OpenTelemetry context's ``traceparent`` goes into the task's metadata
        (unless ``metadata`` has one) and into the call's headers.
        """
        payload = encode_payload(self.serializer, payload)
        return self.submit_many([task_spec(queue, payload, **options)], timeout=timeout)[0]

    def submit_many(
        self, specs: Sequence[broker_pb2.TaskSpec], *, timeout: Duration = spec.CALL_TIMEOUT
    ) -> list[broker_pb2.SubmitResult]:
        """Submits several tasks in one request (atomically) and returns their results in
        order. Build them with ``task_spec``; ``depends_on_index=[0]`` makes a task wait for
        the first one of the same request.

        >>> a, b = tb.submit_many([task_spec("etl", b"extract"),
        ...                        task_spec("etl", b"load", depends_on_index=[0])])
        """
        req = broker_pb2.SubmitRequest(tasks=apply_defaults(self.retry_defaults, specs))
        with tracing.send_span(req.tasks) as send:
            headers = tuple(tracing.current_headers().items())
            retries = 0
            while True:
                try:
                    resp = self.broker.Submit(req, timeout=seconds(timeout), metadata=headers or None)
                    return send.sent(list(resp.results))
                except grpc.RpcError as err:
                    delay = spec.submit_retry_delay(err, retries)
                    if delay is None:
                        raise
                    retries += 1
                    log_submit_retry(err, delay, retries)
                    time.sleep(delay)

    def get_task(self, task_id: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> TaskInfo:
        """The task as the broker has it now (AdminService.GetTask): ``.state`` (a ``TaskState``,
        printed as ``SUCCEEDED``), ``.result``, ``.run_at`` (a datetime)... and ``.proto``."""
        return TaskInfo.of(self.admin.GetTask(admin_pb2.GetTaskRequest(task_id=task_id), timeout=seconds(timeout)).task)

    def list_tasks(
        self,
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
        timeout: Duration = spec.CALL_TIMEOUT,
    ) -> Iterator[TaskInfo]:
        """Every task matching the filter (all of them when empty), newest first, read a page at
        a time as the loop goes: ``for t in tb.list_tasks(queue="emails", states=["DEAD"])``.
        ``states`` takes ``TaskState`` values or names; an unknown one is a ``ValueError``.
        ``target_worker`` keeps the tasks targeted at that worker, ``target_labels`` those whose
        target labels include every pair, ``metadata_key`` those whose metadata has that key
        (mapped to ``metadata_value`` when given; a value without a key is INVALID_ARGUMENT)."""
        req = list_request(
            queue=queue, states=states, key=key, worker_id=worker_id, fanout_group=fanout_group,
            schedule_id=schedule_id, created_after=created_after, created_before=created_before,
            target_worker=target_worker, target_labels=target_labels, metadata_key=metadata_key,
            metadata_value=metadata_value, page_size=page_size,
        )

        def pages() -> Iterator[TaskInfo]:
            while True:
                resp = self.admin.ListTasks(req, timeout=seconds(timeout))
                yield from (TaskInfo.of(t) for t in resp.tasks)
                if not resp.next_page_token:
                    return
                req.page_token = resp.next_page_token

        return pages()

    def cancel_task(self, task_id: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> TaskInfo:
        """SCHEDULED, READY or BLOCKED: CANCELLED at once. LEASED: ``cancel_requested``, and
        its worker is told on its next heartbeat."""
        return TaskInfo.of(self.admin.CancelTask(admin_pb2.CancelTaskRequest(task_id=task_id), timeout=seconds(timeout)).task)

    def requeue_task(self, task_id: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> TaskInfo:
        """DEAD or CANCELLED: READY again, with a fresh budget of attempts."""
        return TaskInfo.of(self.admin.RequeueTask(admin_pb2.RequeueTaskRequest(task_id=task_id), timeout=seconds(timeout)).task)

    def explain_task(self, task_id: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> Explanation:
        """Which gates hold a task that is not running (``.gates[i].kind``: ``RUN_AT_IN_FUTURE``,
        ``QUEUE_PAUSED``..., ``NONE`` when a worker asking now would get it)."""
        return Explanation.of(self.admin.ExplainTask(queue_pb2.ExplainTaskRequest(task_id=task_id), timeout=seconds(timeout)))

    def get_result(self, task: str | admin_pb2.Task | TaskInfo, type_: type[T], *, timeout: Duration = spec.CALL_TIMEOUT) -> T:
        """A SUCCEEDED task's result decoded as ``type_`` by the client's serializer (``bytes``:
        as it is). ``task`` is a task id (read now) or a task already read (``wait``'s answer).
        Raises ``TaskFailedError`` when the task ended DEAD or CANCELLED and
        ``TaskNotSucceededError`` when it has not finished."""
        t = self.get_task(task, timeout=timeout) if isinstance(task, str) else task
        return decode_result(self.serializer, t, type_)

    def wait(self, task_id: str, *, timeout: Duration | None = None) -> TaskInfo:
        """Blocks until the task is SUCCEEDED and returns it (``.state``, ``.result``),
        following it on WatchTasks rather than polling. A task that ends DEAD or CANCELLED
        raises ``TaskFailedError`` (``.task_id``, ``.state``, ``.last_error``, ``.task``).
        Raises ``WaitTimeout`` (a ``TimeoutError``) after ``timeout`` seconds; the task
        carries on."""
        return raise_if_failed(self.wait_all([task_id], timeout=timeout)[0])  # type: ignore[no-any-return]

    def wait_all(self, task_ids: Iterable[str], *, timeout: Duration | None = None) -> list[TaskInfo]:
        """Waits for several tasks (up to 1000) on one stream and returns them in the order
        given, whatever their final state (read each one's ``.state``; no TaskFailedError)."""
        return [TaskInfo.of(t) for t in wait_tasks(self.admin, task_ids, None if timeout is None else seconds(timeout))]

    def submit_and_wait(
        self, queue: str, payload: Any = b"", *, timeout: Duration | None = None, **submit: Any
    ) -> TaskInfo:
        """``submit`` (with the same keyword arguments) then ``wait`` up to ``timeout``
        (``TaskFailedError`` for a task that ends DEAD or CANCELLED)."""
        task_id = self.submit(queue, payload, **submit).task_id
        return self.wait(task_id, timeout=timeout)

    def list_workers(
        self, *, queue: str = "", labels: Mapping[str, str] | None = None, timeout: Duration = 10.0
    ) -> list[worker_pb2.Worker]:
        """Every worker any broker replica saw within its worker_ttl (AdminService.ListWorkers,
        all pages), by worker id; only those leasing from ``queue`` and carrying every pair of
        ``labels`` when given."""
        req = worker_pb2.ListWorkersRequest(queue=queue, labels=dict(labels or {}), page_size=1000)
        workers: list[worker_pb2.Worker] = []
        while True:
            resp = self.admin.ListWorkers(req, timeout=seconds(timeout))
            workers.extend(resp.workers)
            if not resp.next_page_token:
                return workers
            req.page_token = resp.next_page_token

    def get_worker(self, worker_id: str, *, timeout: Duration = 10.0) -> worker_pb2.GetWorkerResponse:
        """One worker (``.worker``) with the leases it holds now (``.leases``); NOT_FOUND when
        no replica saw it within worker_ttl."""
        return self.admin.GetWorker(worker_pb2.GetWorkerRequest(worker_id=worker_id), timeout=seconds(timeout))

    def close(self) -> None:
        if self._owns_channel:
            self.channel.close()

    def __enter__(self) -> Client:  # noqa: PYI034 -- typing.Self needs 3.11
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def decode_result(serializer: Serializer, task: admin_pb2.Task | TaskInfo, type_: type[T]) -> T:
    """A SUCCEEDED task's result as ``type_``; TaskFailedError for a task that ended DEAD or
    CANCELLED, TaskNotSucceededError for one not finished."""
    raise_if_failed(task)
    if task.state != broker_pb2.TASK_STATE_SUCCEEDED:
        state = TaskState(task.state).name
        why = f": {task.last_error}" if task.last_error else ""
        raise TaskNotSucceededError(f"task {task.id} is {state}, not SUCCEEDED{why}", task)
    if type_ is bytes:
        return task.result  # type: ignore[return-value]
    return serializer.decode(task.result, type_)  # type: ignore[no-any-return]


def retry_policy(
    max_attempts: int = 0,
    *,
    initial_backoff: Duration | None = None,
    backoff_multiplier: float = 0.0,
    max_backoff: Duration | None = None,
    jitter: float | None = None,
    schedule: Sequence[Duration] | None = None,
) -> broker_pb2.RetryPolicy:
    """A RetryPolicy for ``submit(retry=...)``, durations as ``timedelta`` or seconds; what is
    left unset takes the broker's default (3 attempts, 10 s initial backoff, x2, 1 h max).

    ``schedule`` lists the delay before each retry (``[60, 300, 1200]``: 1 min, 5 min, then
    20 min for every later retry); when given it overrides the backoff settings, at most 32
    entries."""
    policy = broker_pb2.RetryPolicy(max_attempts=max_attempts, backoff_multiplier=backoff_multiplier)
    if initial_backoff is not None:
        policy.initial_backoff.CopyFrom(duration(initial_backoff))
    if max_backoff is not None:
        policy.max_backoff.CopyFrom(duration(max_backoff))
    if jitter is not None:
        policy.jitter = jitter
    for delay in schedule or ():
        policy.schedule.append(duration(delay))
    return policy


def log_submit_retry(err: grpc.RpcError, delay: float, retries: int) -> None:
    """One INFO line per resent Submit (the broker's backpressure is not a failure yet)."""
    log.info(
        "submit refused (%s: %s); sending it again in %.2fs (retry %d of %d)",
        err.code().name,  # type: ignore[attr-defined]
        err.details(),  # type: ignore[attr-defined]
        delay,
        retries,
        spec.SUBMIT_RETRIES,
    )


def task_key(queue: str, key: str) -> broker_pb2.TaskKey:
    """Names a task by its queue and key, for ``depends_on_keys``."""
    return broker_pb2.TaskKey(queue=queue, key=key)


def duplicate_key_policy(value: DuplicateKey) -> int:
    """A DuplicateKeyPolicy from its value or its name (``"replace_waiting"``...)."""
    if isinstance(value, str):
        try:
            return _DUPLICATE_KEY[value.lower()]
        except KeyError:
            raise ValueError(f"on_duplicate_key must be one of {sorted(_DUPLICATE_KEY)}, not {value!r}") from None
    return int(value)


def task_spec(
    queue: str,
    payload: Any = b"",
    *,
    key: str = "",
    priority: int = 0,
    run_at: datetime.datetime | None = None,
    delay: Duration | None = None,
    deadline: datetime.datetime | None = None,
    retry: broker_pb2.RetryPolicy | None = None,
    metadata: Mapping[str, str] | None = None,
    target: broker_pb2.Target | None = None,
    sticky: broker_pb2.StickyPolicy | None = None,
    fanout: broker_pb2.Fanout | None = None,
    depends_on: Sequence[str] = (),
    depends_on_index: Sequence[int] = (),
    run_if_dependency_fails: bool = False,
    concurrency_key: str = "",
    bucket: str = "",
    checkpoint: bytes | None = None,
    depends_on_keys: Sequence[broker_pb2.TaskKey | tuple[str, str]] = (),
    on_duplicate_key: DuplicateKey = 0,
    at_most_once: bool = False,
    serializer: Serializer | None = None,
) -> broker_pb2.TaskSpec:
    """A TaskSpec for ``Client.submit_many``, with the current OpenTelemetry ``traceparent``
    in its metadata; every TaskSpec field by name. ``depends_on_index`` names earlier tasks of
    the same request; ``depends_on_keys`` takes ``task_key(queue, key)`` or ``(queue, key)``
    pairs; ``on_duplicate_key`` a DuplicateKeyPolicy or ``"keep_existing"`` /
    ``"replace_waiting"``. ``bucket`` names the limit bucket the task counts against, in any
    queue (unset: its queue's bucket, if any). ``checkpoint`` (bytes, even empty) is the
    checkpoint the first attempt starts from (``ctx.last_checkpoint``), as if an earlier attempt had
    saved it; None: none. A payload that is not ``bytes`` is encoded by ``serializer`` (JSON by
    default).

    ``run_at`` (a datetime; naive is UTC) keeps the task SCHEDULED until then; ``delay`` (a
    ``timedelta`` or seconds) does so for that long: its run_at is this machine's clock, read
    here, plus ``delay`` (the broker compares run_at with its own clock). Pass one of them, not
    both."""
    if run_at is not None and delay is not None:
        raise ValueError("pass run_at or delay, not both")
    if delay is not None:
        if not isinstance(delay, datetime.timedelta):
            delay = datetime.timedelta(seconds=seconds(delay))
        run_at = datetime.datetime.now(datetime.timezone.utc) + delay
    payload = encode_payload(serializer or DEFAULT_SERIALIZER, payload)
    meta = dict(metadata or {})
    tracing.inject(meta)
    spec = broker_pb2.TaskSpec(
        queue=queue,
        payload=payload,
        key=key,
        priority=priority,
        retry=retry,
        metadata=meta,
        target=target,
        sticky=sticky,
        fanout=fanout,
        depends_on=list(depends_on),
        depends_on_index=list(depends_on_index),
        run_if_dependency_fails=run_if_dependency_fails,
        concurrency_key=concurrency_key,
        bucket=bucket,
        depends_on_keys=[k if isinstance(k, broker_pb2.TaskKey) else task_key(*k) for k in depends_on_keys],
        on_duplicate_key=duplicate_key_policy(on_duplicate_key),  # type: ignore[arg-type]
        at_most_once=at_most_once,
        checkpoint=checkpoint,
    )
    if run_at is not None:
        spec.run_at.CopyFrom(timestamp(run_at))
    if deadline is not None:
        spec.deadline.CopyFrom(timestamp(deadline))
    return spec


def timestamp(when: datetime.datetime) -> timestamp_pb2.Timestamp:
    """A protobuf Timestamp; naive datetimes are taken as UTC."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(when)
    return ts


def duration(value: Duration) -> duration_pb2.Duration:
    """A protobuf Duration from a ``timedelta`` or seconds."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds(value) * 1e9))
    return d
