"""The sync Worker's heartbeat: one Heartbeat call extends every running lease and flags the
tasks the broker says are lost or to be cancelled."""

from __future__ import annotations

import datetime
import logging
import time

import grpc

from taskbroker import spec
from taskbroker.client import duration
from taskbroker.context import CANCEL_REQUESTED, TaskContext
from taskbroker.v1 import broker_pb2, broker_pb2_grpc
from taskbroker.worker_settle import _describe

log = logging.getLogger("taskbroker.worker")


def heartbeat(
    broker: broker_pb2_grpc.BrokerServiceStub,
    worker_id: str,
    lease_duration: float,
    interval: float,
    ctxs: list[TaskContext],
) -> None:
    """One Heartbeat for the leases of ``ctxs`` (none is sent for no task)."""
    if not ctxs:
        return
    req = broker_pb2.HeartbeatRequest(
        worker_id=worker_id,
        leases=[broker_pb2.LeaseRef(task_id=c.task_id, lease_token=c.task.lease_token) for c in ctxs],
        extend_by=duration(lease_duration),
    )
    sent = time.monotonic()
    try:
        resp = broker.Heartbeat(req, timeout=min(interval, spec.CALL_TIMEOUT))
    except grpc.RpcError as err:
        # The clock thread cancels the handlers whose leases run out meanwhile.
        log.warning("heartbeat for %d leases failed: %s", len(ctxs), _describe(err))
        return
    for c, status in zip(ctxs, resp.leases):  # statuses come in request order
        if status.lost:
            # Unless the outcome is being reported: then the report settled it (or hears
            # LEASE_LOST itself and says so).
            if not c._settling:
                c._lose("the broker's heartbeat answer says so")
            continue
        if status.cancel_requested:
            c._cancel(CANCEL_REQUESTED)
        expires = (
            status.lease_expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
            if status.HasField("lease_expires_at")
            else None
        )
        c._extended(expires, sent + lease_duration)
