"""A channel to the broker with its service stubs (broker, admin, schedules)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from taskbroker.v1 import admin_pb2_grpc, broker_pb2, broker_pb2_grpc, schedule_pb2_grpc


class Client:
    """Holds a gRPC channel and the BrokerService, AdminService and ScheduleService stubs on it.

    >>> with Client("127.0.0.1:50051") as tb:
    ...     task_id = tb.submit("emails", b"hello").task_id
    """

    def __init__(self, target: str | None = None, *, channel: grpc.Channel | None = None) -> None:
        if (target is None) == (channel is None):
            raise ValueError("pass exactly one of target (host:port, plaintext) or channel")
        self._owns_channel = channel is None
        self.channel: grpc.Channel = channel or grpc.insecure_channel(target)  # type: ignore[arg-type]
        self.broker = broker_pb2_grpc.BrokerServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        self.schedules = schedule_pb2_grpc.ScheduleServiceStub(self.channel)

    def submit(
        self,
        queue: str,
        payload: bytes = b"",
        *,
        key: str = "",
        priority: int = 0,
        run_at: datetime.datetime | None = None,
        deadline: datetime.datetime | None = None,
        retry: broker_pb2.RetryPolicy | None = None,
        metadata: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> broker_pb2.SubmitResult:
        """Submits one task and returns its SubmitResult (task_id, deduplicated)."""
        spec = broker_pb2.TaskSpec(
            queue=queue,
            payload=payload,
            key=key,
            priority=priority,
            retry=retry,
            metadata=dict(metadata or {}),
        )
        if run_at is not None:
            spec.run_at.CopyFrom(timestamp(run_at))
        if deadline is not None:
            spec.deadline.CopyFrom(timestamp(deadline))
        resp = self.broker.Submit(broker_pb2.SubmitRequest(tasks=[spec]), timeout=timeout)
        return resp.results[0]

    def close(self) -> None:
        if self._owns_channel:
            self.channel.close()

    def __enter__(self) -> Client:  # noqa: PYI034 -- typing.Self needs 3.11
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def timestamp(when: datetime.datetime) -> timestamp_pb2.Timestamp:
    """A protobuf Timestamp; naive datetimes are taken as UTC."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(when)
    return ts


def duration(seconds: float) -> duration_pb2.Duration:
    """A protobuf Duration from seconds."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d
