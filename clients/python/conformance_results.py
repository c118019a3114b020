"""The cases of clients/conformance/cases/ on the results of dependencies, on keys and on
backpressure: `dependency_results` (a Worker's handler reads its dependency's result on its
context), `keys_and_replace` (the client's submit with a dependency on a key and a replace by
key) and `submit_backpressure` (a queue's max_pending refuses a Submit with
RESOURCE_EXHAUSTED, RetryInfo and QuotaFailure; the client's submit waits the hinted delay) and
`dead_result` (waiting for a task whose handler failed for good raises TaskFailedError).

The code of each case is its folder's case.py; this module holds what they share.
"""

from __future__ import annotations

import logging
import threading

from taskbroker import Client
from taskbroker.client import duration
from taskbroker.v1 import broker_pb2

State = broker_pb2.TaskState


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
