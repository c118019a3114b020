"""The asyncio client (``grpc.aio``): ``AsyncClient``, the channel with both service stubs and
the calls of ``Client``, awaited. ``taskbroker.aio`` re-exports it."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import grpc.aio

from taskbroker import spec, tracing
from taskbroker.buckets import AsyncBucketCalls
from taskbroker.client import (
    ConnectOptions,
    SubmitOptions,
    TLSConfig,
    check_channel_args,
    decode_result,
    log_submit_retry,
    task_spec,
)
from taskbroker.errors import raise_if_failed
from taskbroker.policy import apply_defaults
from taskbroker.serde import DEFAULT_SERIALIZER, Serializer, encode_payload
from taskbroker.spec import Duration, seconds
from taskbroker.tasks import Explanation, TaskInfo, TaskState, list_request
from taskbroker.v1 import admin_pb2, admin_pb2_grpc, broker_pb2, broker_pb2_grpc, queue_pb2, worker_pb2
from taskbroker.wait import wait_tasks_async

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")


class _Token:
    """Adds ``authorization: Bearer TOKEN`` to every call (also on plaintext, inside a mesh)."""

    def __init__(self, metadata: list[tuple[str, str]]) -> None:
        self._metadata = metadata

    def _details(self, d: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        md = grpc.aio.Metadata(*(d.metadata or ()), *self._metadata)
        return grpc.aio.ClientCallDetails(d.method, d.timeout, md, d.credentials, d.wait_for_ready)


# One object per kind of call: grpc.aio files an interceptor under the first kind it
# implements only, so one object for both would leave the streams (WatchTasks) without the token.
class _UnaryUnaryToken(_Token, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return await continuation(self._details(details), request)


class _UnaryStreamToken(_Token, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_stream(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return await continuation(self._details(details), request)


class AsyncClient(AsyncBucketCalls):
    """An asyncio channel to the broker with both service stubs (``broker``, ``admin``);
    ``serializer`` as in ``Client`` (JSON by default). The bucket and cooldown calls are
    ``Client``'s, awaited (``AsyncBucketCalls``)."""

    def __init__(
        self,
        target: str | None = None,
        *,
        channel: grpc.aio.Channel | None = None,
        token: str | None = None,
        tls: TLSConfig | bool | None = None,
        serializer: Serializer | None = None,
    ) -> None:
        check_channel_args(target, channel, token, tls)
        self.serializer: Serializer = serializer or DEFAULT_SERIALIZER
        self._owns_channel = channel is None
        self._options = None if target is None else ConnectOptions(target=target, token=token, tls=tls)
        self._channel: grpc.aio.Channel | None = channel
        self._broker: broker_pb2_grpc.BrokerServiceAsyncStub | None = None
        self._admin: admin_pb2_grpc.AdminServiceAsyncStub | None = None
        #: Retry defaults by queue, declared with handlers (``taskbroker.policy``).
        self.retry_defaults: dict[str, broker_pb2.RetryPolicy] = {}

    @property
    def channel(self) -> grpc.aio.Channel:
        """The channel, made on first use: inside the event loop that runs the calls (a
        grpc.aio channel belongs to the loop it was made in), so an AsyncClient or AsyncWorker
        may be built before ``asyncio.run``."""
        if self._channel is None:
            o = self._options
            assert o is not None
            interceptors: Any = [_UnaryUnaryToken(o.metadata()), _UnaryStreamToken(o.metadata())] if o.token else None
            creds = o.channel_credentials()
            self._channel = (
                grpc.aio.secure_channel(o.target, creds, interceptors=interceptors)
                if creds
                else grpc.aio.insecure_channel(o.target, interceptors=interceptors)
            )
        return self._channel

    @property
    def broker(self) -> broker_pb2_grpc.BrokerServiceAsyncStub:
        if self._broker is None:
            self._broker = broker_pb2_grpc.BrokerServiceStub(self.channel)
        return self._broker

    @property
    def admin(self) -> admin_pb2_grpc.AdminServiceAsyncStub:
        if self._admin is None:
            self._admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        return self._admin

    @classmethod
    def from_env(cls, target: str | None = None, *, serializer: Serializer | None = None) -> AsyncClient:
        """Configured from TASKBROKER_ADDR, _TOKEN, _CA, _CLIENT_CERT, _CLIENT_KEY."""
        o = ConnectOptions.from_env(target)
        return cls(o.target, token=o.token, tls=o.tls, serializer=serializer)

    async def submit(
        self,
        queue: str,
        payload: Any = b"",
        *,
        timeout: Duration = spec.CALL_TIMEOUT,
        **options: Unpack[SubmitOptions],
    ) -> broker_pb2.SubmitResult:
        """Submits one task (with the current OpenTelemetry traceparent in its metadata);
        a payload that is not ``bytes`` is encoded by the serializer; ``target``, ``sticky``,
        ``fanout``, ``depends_on``, ``on_duplicate_key``... and the RESOURCE_EXHAUSTED
        retry as in ``Client.submit``."""
        payload = encode_payload(self.serializer, payload)
        return (await self.submit_many([task_spec(queue, payload, **options)], timeout=timeout))[0]

    async def submit_many(
        self, specs: Sequence[broker_pb2.TaskSpec], *, timeout: Duration = spec.CALL_TIMEOUT
    ) -> list[broker_pb2.SubmitResult]:
        """As ``Client.submit_many``: several ``task_spec``s in one request, results in order."""
        req = broker_pb2.SubmitRequest(tasks=apply_defaults(self.retry_defaults, specs))
        with tracing.send_span(req.tasks) as send:
            headers = list(tracing.current_headers().items()) or None
            retries = 0
            while True:
                try:
                    resp = await self.broker.Submit(req, timeout=seconds(timeout), metadata=headers)
                    return send.sent(list(resp.results))
                except grpc.aio.AioRpcError as err:
                    delay = spec.submit_retry_delay(err, retries)
                    if delay is None:
                        raise
                    retries += 1
                    log_submit_retry(err, delay, retries)
                    await asyncio.sleep(delay)

    async def get_task(self, task_id: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> TaskInfo:
        """As ``Client.get_task``: the task as the broker has it now."""
        return TaskInfo.of((await self.admin.GetTask(admin_pb2.GetTaskRequest(task_id=task_id), timeout=seconds(timeout))).task)

    async def list_tasks(
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
    ) -> AsyncIterator[TaskInfo]:
        """As ``Client.list_tasks``: ``async for t in tb.list_tasks(queue="emails")``."""
        req = list_request(
            queue=queue, states=states, key=key, worker_id=worker_id, fanout_group=fanout_group,
            schedule_id=schedule_id, created_after=created_after, created_before=created_before,
            target_worker=target_worker, target_labels=target_labels, metadata_key=metadata_key,
            metadata_value=metadata_value, page_size=page_size,
        )
        while True:
            resp = await self.admin.ListTasks(req, timeout=seconds(timeout))
            for t in resp.tasks:
                yield TaskInfo.of(t)
            if not resp.next_page_token:
                return
            req.page_token = resp.next_page_token

    async def cancel_task(self, task_id: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> TaskInfo:
        """As ``Client.cancel_task``."""
        return TaskInfo.of((await self.admin.CancelTask(admin_pb2.CancelTaskRequest(task_id=task_id), timeout=seconds(timeout))).task)

    async def requeue_task(self, task_id: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> TaskInfo:
        """As ``Client.requeue_task``."""
        return TaskInfo.of((await self.admin.RequeueTask(admin_pb2.RequeueTaskRequest(task_id=task_id), timeout=seconds(timeout))).task)

    async def explain_task(self, task_id: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> Explanation:
        """As ``Client.explain_task``."""
        return Explanation.of(await self.admin.ExplainTask(queue_pb2.ExplainTaskRequest(task_id=task_id), timeout=seconds(timeout)))

    async def get_result(
        self, task: str | admin_pb2.Task | TaskInfo, type_: type[T], *, timeout: Duration = spec.CALL_TIMEOUT
    ) -> T:
        """As ``Client.get_result``: a SUCCEEDED task's result decoded as ``type_``."""
        t = await self.get_task(task, timeout=timeout) if isinstance(task, str) else task
        return decode_result(self.serializer, t, type_)

    async def wait(self, task_id: str, *, timeout: Duration | None = None) -> TaskInfo:
        """As ``Client.wait``: the SUCCEEDED task, followed on WatchTasks; ``TaskFailedError``
        for one that ended DEAD or CANCELLED; ``WaitTimeout``."""
        return raise_if_failed((await self.wait_all([task_id], timeout=timeout))[0])  # type: ignore[no-any-return]

    async def wait_all(self, task_ids: Iterable[str], *, timeout: Duration | None = None) -> list[TaskInfo]:
        """As ``Client.wait_all``: several tasks on one stream, in the order given, whatever
        their final state."""
        tasks = await wait_tasks_async(self.admin, task_ids, None if timeout is None else seconds(timeout))
        return [TaskInfo.of(t) for t in tasks]

    async def submit_and_wait(
        self, queue: str, payload: Any = b"", *, timeout: Duration | None = None, **submit: Any
    ) -> TaskInfo:
        """``submit`` (same keyword arguments) then ``wait`` up to ``timeout``."""
        task_id = (await self.submit(queue, payload, **submit)).task_id
        return await self.wait(task_id, timeout=timeout)

    async def list_workers(
        self, *, queue: str = "", labels: Mapping[str, str] | None = None, timeout: Duration = spec.CALL_TIMEOUT
    ) -> list[worker_pb2.Worker]:
        """As ``Client.list_workers``: every worker seen within worker_ttl, all pages."""
        req = worker_pb2.ListWorkersRequest(queue=queue, labels=dict(labels or {}), page_size=1000)
        workers: list[worker_pb2.Worker] = []
        while True:
            resp = await self.admin.ListWorkers(req, timeout=seconds(timeout))
            workers.extend(resp.workers)
            if not resp.next_page_token:
                return workers
            req.page_token = resp.next_page_token

    async def get_worker(self, worker_id: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> worker_pb2.GetWorkerResponse:
        """As ``Client.get_worker``: one worker with its current leases."""
        return await self.admin.GetWorker(worker_pb2.GetWorkerRequest(worker_id=worker_id), timeout=seconds(timeout))

    async def close(self) -> None:
        if self._owns_channel and self._channel is not None:
            await self._channel.close(None)
            self._channel = self._broker = self._admin = None

    async def __aenter__(self) -> AsyncClient:  # noqa: PYI034 -- typing.Self needs 3.11
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
