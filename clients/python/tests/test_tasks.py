"""The operator calls of ``Client`` and ``AsyncClient`` (get_task, list_tasks, cancel_task,
requeue_task, explain_task) against a live broker at $TASKBROKER_ADDR (skipped without one):
states and gate kinds by name, times as datetimes."""

from __future__ import annotations

import asyncio
import datetime
import os
import random

import grpc
import pytest

from taskbroker import AsyncClient, Client, TaskState, Worker
from taskbroker.routing import target
from taskbroker.v1 import broker_pb2

ADDR = os.environ.get("TASKBROKER_ADDR")
live = pytest.mark.skipif(not ADDR, reason="TASKBROKER_ADDR is not set; needs a live broker")


def test_a_state_prints_as_its_name_and_equals_its_protobuf_value() -> None:
    assert str(TaskState(broker_pb2.TASK_STATE_SUCCEEDED)) == "SUCCEEDED"
    assert f"{TaskState.DEAD}" == "DEAD"
    assert TaskState.SUCCEEDED == broker_pb2.TASK_STATE_SUCCEEDED
    assert TaskState.of("dead") is TaskState.DEAD
    with pytest.raises(ValueError, match="unknown task state 'FINISHED'"):
        TaskState.of("FINISHED")


@live
def test_get_list_cancel_requeue_and_explain_a_task() -> None:
    queue = f"test.python.tasks.{random.getrandbits(32):08x}"
    with Client.from_env(ADDR) as tb:
        task_id = tb.submit(queue, {"to": "ada"}, delay=datetime.timedelta(hours=1)).task_id

        t = tb.get_task(task_id)
        assert (str(t.state), t.queue, t.payload) == ("SCHEDULED", queue, b'{"to":"ada"}')
        assert t.run_at is not None
        assert t.run_at > datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=50)
        assert t.fencing_token == t.proto.fencing_token  # other fields read through to the message

        why = tb.explain_task(task_id)
        assert why.state is TaskState.SCHEDULED
        assert [g.kind for g in why.gates] == ["RUN_AT_IN_FUTURE"]
        assert why.gates[0].until is not None

        listed = [(x.id, str(x.state)) for x in tb.list_tasks(queue=queue, states=["SCHEDULED"])]
        assert listed == [(task_id, "SCHEDULED")]
        assert list(tb.list_tasks(queue=queue, states=[TaskState.DEAD])) == []
        with pytest.raises(ValueError, match="states: unknown task state 'FINISHED'"):
            tb.list_tasks(states=["FINISHED"])

        assert tb.cancel_task(task_id).state is TaskState.CANCELLED
        assert tb.requeue_task(task_id).state is TaskState.READY
        assert [g.kind for g in tb.explain_task(task_id).gates] == ["NONE"]

        worker = Worker(tb, poll_wait=1.0)
        worker.handle(queue, lambda email: f"sent to {email['to']}")
        with worker:
            done = tb.wait(task_id, timeout=30)
        assert tb.get_result(tb.get_task(task_id), str) == "sent to ada"
        finished = tb.get_task(task_id)
        assert finished.state is TaskState.SUCCEEDED and finished.finished_at is not None
        assert (done.id, str(done.state), done.result) == (task_id, "SUCCEEDED", b'"sent to ada"')


@live
def test_list_tasks_filters_by_target_and_metadata() -> None:
    queue = f"test.python.tasks.filters.{random.getrandbits(32):08x}"
    with Client.from_env(ADDR) as tb:
        def submit(**options: object) -> str:
            return tb.submit(queue, b"x", delay=3600, **options).task_id  # type: ignore[arg-type]

        for_a = submit(target=target(worker_id="w-a"))
        gpu_eu = submit(target=target(labels={"gpu": "a100", "zone": "eu"}))
        gpu = submit(target=target(labels={"gpu": "a100"}))
        acme = submit(metadata={"tenant.id": "acme"})
        globex = submit(metadata={"tenant.id": "globex", "tier": "gold"})
        plain = submit()

        def ids(**filters: object) -> set[str]:
            return {t.id for t in tb.list_tasks(queue=queue, **filters)}  # type: ignore[arg-type]

        assert ids() == {for_a, gpu_eu, gpu, acme, globex, plain}
        assert ids(target_worker="w-a") == {for_a}
        assert ids(target_worker="w-b") == set()
        assert ids(target_labels={"gpu": "a100"}) == {gpu_eu, gpu}
        assert ids(target_labels={"gpu": "a100", "zone": "eu"}) == {gpu_eu}
        assert ids(metadata_key="tenant.id") == {acme, globex}
        assert ids(metadata_key="tenant.id", metadata_value="acme") == {acme}
        assert ids(metadata_key="tier", target_worker="w-a") == set()

        with pytest.raises(grpc.RpcError) as err:
            list(tb.list_tasks(queue=queue, metadata_value="acme"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]


@live
def test_the_async_client_answers_the_same() -> None:
    async def main() -> None:
        queue = f"test.python.tasks.aio.{random.getrandbits(32):08x}"
        async with AsyncClient.from_env(ADDR) as tb:
            task_id = (await tb.submit(queue, b"x", delay=3600)).task_id
            assert (await tb.get_task(task_id)).state is TaskState.SCHEDULED
            assert [t.id async for t in tb.list_tasks(queue=queue)] == [task_id]
            targeted = (await tb.submit(queue, b"y", delay=3600, target=target(worker_id="w-a"))).task_id
            assert [t.id async for t in tb.list_tasks(queue=queue, target_worker="w-a")] == [targeted]
            assert [t.id async for t in tb.list_tasks(queue=queue, metadata_key="tenant")] == []
            assert [g.kind for g in (await tb.explain_task(task_id)).gates] == ["RUN_AT_IN_FUTURE"]
            assert (await tb.cancel_task(task_id)).state is TaskState.CANCELLED
            assert (await tb.requeue_task(task_id)).state is TaskState.READY

    asyncio.run(main())
