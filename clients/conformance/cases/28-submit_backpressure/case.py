"""The conformance case ``submit_backpressure``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

import concurrent.futures
import logging

import grpc
from google.protobuf import field_mask_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from conformance import Cases
from conformance_results import CaseFailed, _Refusals, check
from taskbroker.client import duration
from taskbroker.v1 import admin_pb2, broker_pb2, queue_pb2


def submit_backpressure(self: Cases, q: str) -> None:
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
