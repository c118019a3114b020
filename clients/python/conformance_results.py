"""The cases of clients/conformance/SCENARIO.md on the results of dependencies, on keys and on
backpressure: `dependency_results` (a Worker's handler reads its dependency's result on its
context), `keys_and_replace` (the client's submit with a dependency on a key and a replace by
key) and `submit_backpressure` (a queue's max_pending refuses a Submit with
RESOURCE_EXHAUSTED, RetryInfo and QuotaFailure; the client's submit waits the hinted delay) and
`dead_result` (waiting for a task whose handler failed for good raises TaskFailedError)."""

from __future__ import annotations

import concurrent.futures
import datetime
import logging
import threading

import grpc
from google.protobuf import field_mask_pb2
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from taskbroker import Client, PermanentError, TaskContext, TaskFailedError, Worker
from taskbroker.client import duration
from taskbroker.v1 import admin_pb2, broker_pb2, queue_pb2

State = broker_pb2.TaskState
RESULTS_CASES = ["dependency_results", "keys_and_replace", "submit_backpressure", "dead_result"]


class CaseFailed(Exception):
    pass


def check(cond: bool, reason: str) -> None:
    if not cond:
        raise CaseFailed(reason)


class _Refusals(logging.Handler):
    """Sets ``refused`` when the client logs that it will send a refused Submit again."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.refused = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("submit refused (RESOURCE_EXHAUSTED"):
            self.refused.set()


class ResultsCases:
    tb: Client

    def dependency_results(self, q: str) -> None:
        a = self.tb.submit(q, b"a").task_id
        b = self.tb.submit(q, b"b", depends_on=[a]).task_id
        seen: dict[str, dict[str, bytes]] = {}

        def handle(ctx: TaskContext) -> bytes:
            if ctx.task_id == a:
                return b"a-result"
            seen[ctx.task_id] = ctx.dependency_results
            return ctx.dependency_result(a, bytes)

        with Worker(self.tb, queues=[q], handler=handle, poll_wait=1, worker_id="conf-python"):
            self.tb.wait(b, timeout=20)
        check(seen.get(b) == {a: b"a-result"}, f"b's handler saw dependency_results {seen.get(b)}, want {{{a}: a-result}}")
        tb = self.tb.get_task(b)
        check(
            tb.state == State.TASK_STATE_SUCCEEDED and tb.result == b"a-result",
            f"b is {State.Name(tb.state)} with result {tb.result!r}, want SUCCEEDED with a-result",
        )

    def _lease(self, q: str, wait: float) -> list[broker_pb2.LeasedTask]:
        return list(
            self.tb.broker.Lease(
                broker_pb2.LeaseRequest(
                    worker_id="conf-python",
                    queues=[q],
                    max_tasks=10,
                    lease_duration=duration(30),
                    wait=duration(wait),
                ),
                timeout=wait + 10,
            ).tasks
        )

    def _complete(self, t: broker_pb2.LeasedTask, result: bytes = b"") -> None:
        self.tb.broker.Complete(
            broker_pb2.CompleteRequest(task_id=t.task_id, lease_token=t.lease_token, result=result), timeout=10
        )

    def keys_and_replace(self, q: str) -> None:
        b = self.tb.submit(q, b"b", depends_on_keys=[(q, "k-a")]).task_id
        tb = self.tb.get_task(b)
        check(tb.state == State.TASK_STATE_BLOCKED, f"b is {State.Name(tb.state)}, want BLOCKED")
        now = datetime.datetime.now(datetime.timezone.utc)
        first = self.tb.submit(q, b"v1", key="digest", run_at=now + datetime.timedelta(hours=1))
        second = self.tb.submit(q, b"v2", key="digest", run_at=now, on_duplicate_key="replace_waiting")
        check(
            second.task_id == first.task_id and second.deduplicated and second.replaced,
            f"the second submit of digest answered {second.task_id} (deduplicated {second.deduplicated}, "
            f"replaced {second.replaced}), want {first.task_id} with both true",
        )
        d = first.task_id
        a = self.tb.submit(q, b"a", key="k-a").task_id
        got = self._lease(q, 0)
        ids = sorted(t.task_id for t in got)
        check(ids == sorted([a, d]), f"the first Lease returned {ids}, want exactly a {a} and d {d}")
        for t in got:
            if t.task_id == d:
                check(t.payload == b"v2", f"d was leased with payload {t.payload!r}, want v2")
                self._complete(t)
            else:
                self._complete(t, b"a-result")
        tb = self.tb.get_task(b)
        check(tb.state == State.TASK_STATE_READY, f"after a's Complete b is {State.Name(tb.state)}, want READY")
        got = self._lease(q, 5)
        check(
            len(got) == 1 and got[0].task_id == b,
            f"the second Lease returned {[t.task_id for t in got]}, want exactly b {b}",
        )
        results = dict(got[0].dependency_results)
        check(
            results == {a: b"a-result"},
            f"b was leased with dependency_results {results}, want {{{a}: a-result}}",
        )
        self._complete(got[0])

    def submit_backpressure(self, q: str) -> None:
        self.tb.admin.UpdateQueue(
            queue_pb2.UpdateQueueRequest(
                name=q,
                config=queue_pb2.QueueConfig(max_pending=1),
                update_mask=field_mask_pb2.FieldMask(paths=["max_pending"]),
            ),
            timeout=10,
        )
        self.tb.submit(q, b"1")
        try:
            self.tb.broker.Submit(broker_pb2.SubmitRequest(tasks=[broker_pb2.TaskSpec(queue=q, payload=b"2")]), timeout=10)
            raise CaseFailed("Submit 2 over max_pending answered OK, want RESOURCE_EXHAUSTED")
        except grpc.RpcError as err:
            check(
                err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED,  # type: ignore[attr-defined]
                f"Submit 2 over max_pending answered {err.code().name}, want RESOURCE_EXHAUSTED",  # type: ignore[attr-defined]
            )
            status = rpc_status.from_call(err)  # type: ignore[arg-type]
            details = list(status.details) if status else []
            retry = any(d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in details)
            quota = any(d.Is(error_details_pb2.QuotaFailure.DESCRIPTOR) for d in details)
            check(retry and quota, f"RESOURCE_EXHAUSTED details: RetryInfo {retry}, QuotaFailure {quota}; want both")
        listed = self.tb.admin.ListTasks(admin_pb2.ListTasksRequest(queue=q), timeout=10).tasks
        check(len(listed) == 1, f"the refused Submit left {len(listed)} tasks, want 1")

        watch = _Refusals()
        logger = logging.getLogger("taskbroker.client")
        level = logger.level
        logger.addHandler(watch)
        logger.setLevel(logging.INFO)
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                submitted = pool.submit(self.tb.submit, q, b"2")
                check(watch.refused.wait(10), "the client's submit was not refused within 10 s")
                check(not submitted.done(), "the client's submit returned before it was let in")
                got = self.tb.broker.Lease(
                    broker_pb2.LeaseRequest(
                        worker_id="conf-python",
                        queues=[q],
                        max_tasks=1,
                        lease_duration=duration(30),
                        wait=duration(0),
                    ),
                    timeout=10,
                ).tasks
                check(len(got) == 1 and got[0].payload == b"1", f"Lease returned {len(got)} tasks, want task 1")
                self.tb.broker.Complete(
                    broker_pb2.CompleteRequest(task_id=got[0].task_id, lease_token=got[0].lease_token), timeout=10
                )
                second = submitted.result(timeout=30)
        finally:
            logger.removeHandler(watch)
            logger.setLevel(level)
        t2 = self.tb.get_task(second.task_id)
        check(t2.payload == b"2", f"task 2 has payload {t2.payload!r}")

    def dead_result(self, q: str) -> None:
        d = self.tb.submit(q, b"order-7").task_id

        def handle(ctx: TaskContext) -> bytes:
            raise PermanentError("no such order")

        with Worker(self.tb, queues=[q], handler=handle, poll_wait=1, worker_id="conf-python"):
            try:
                self.tb.wait(d, timeout=20)
            except TaskFailedError as err:
                waited: TaskFailedError | None = err
            else:
                waited = None
        check(waited is not None, "wait returned, want a TaskFailedError")
        assert waited is not None
        try:
            self.tb.get_result(d, dict)
        except TaskFailedError as err:
            read: TaskFailedError | None = err
        else:
            read = None
        check(read is not None, "get_result returned, want a TaskFailedError")
        assert read is not None
        for what, e in (("wait", waited), ("get_result", read)):
            check(
                (e.task_id, e.state, e.last_error) == (d, State.TASK_STATE_DEAD, "no such order"),
                f"{what}: TaskFailedError({e.task_id}, {e.state_name}, {e.last_error!r}), want ({d}, DEAD, 'no such order')",
            )
