"""The conformance case ``schedule_every``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

import grpc

from conformance import CaseFailed, Cases, check
from taskbroker.client import duration
from taskbroker.v1 import schedule_pb2


def schedule_every(self: Cases, q: str) -> None:
    sc = schedule_pb2
    created = self.tb.schedules.CreateSchedule(
        sc.CreateScheduleRequest(
            schedule=sc.Schedule(
                schedule_id=q,
                spec=sc.ScheduleSpec(every=duration(1)),
                task=sc.TaskTemplate(queue=q, payload=b"tick"),
                overlap=sc.OVERLAP_POLICY_ALLOW,
            )
        ),
        timeout=10,
    ).schedule
    check(
        created.state == sc.SCHEDULE_STATE_ACTIVE,
        f"state {sc.ScheduleState.Name(created.state)}, want ACTIVE",
    )
    for _ in range(2):
        tasks = self.lease(q, 1, wait=10)
        check(len(tasks) == 1, "no scheduled task within 10s")
        t = tasks[0]
        check(t.payload == b"tick", f"payload {t.payload!r}")
        check(t.metadata.get("taskbroker.schedule_id") == q, f"metadata {dict(t.metadata)} lacks the schedule id")
        self.complete(t)
    got = self.tb.schedules.GetSchedule(sc.GetScheduleRequest(schedule_id=q), timeout=10).schedule
    check(got.runs >= 2, f"runs {got.runs}, want >= 2")
    self.tb.schedules.DeleteSchedule(sc.DeleteScheduleRequest(schedule_id=q), timeout=10)
    try:
        self.tb.schedules.GetSchedule(sc.GetScheduleRequest(schedule_id=q), timeout=10)
        raise CaseFailed("GetSchedule after delete: OK, want NOT_FOUND")
    except grpc.RpcError as err:
        check(err.code() == grpc.StatusCode.NOT_FOUND, f"after delete: {err.code().name}, want NOT_FOUND")
