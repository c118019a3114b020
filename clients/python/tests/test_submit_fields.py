"""Every TaskSpec field through ``task_spec``, the submit rule for backpressure
(RESOURCE_EXHAUSTED with a RetryInfo) and the typed reader of a dependency's result (pure: no
broker needed)."""

from __future__ import annotations

import dataclasses
import datetime

import grpc
import grpc.aio
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2  # type: ignore[import-untyped]

from taskbroker import PayloadError, TaskContext, spec, task_key, task_spec
from taskbroker.v1 import broker_pb2


def refusal(code: grpc.StatusCode, delay: float | None) -> grpc.aio.AioRpcError:
    status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message="queue q is full")
    if delay is not None:
        d = duration_pb2.Duration()
        d.FromNanoseconds(int(delay * 1e9))
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.RetryInfo(retry_delay=d))
        status.details.append(detail)
    trailers = grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailers, "queue q is full")


def test_submit_retry_delay_follows_retry_info_within_its_bounds() -> None:
    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
    assert spec.submit_retry_delay(refusal(exhausted, 1.5), 0) == 1.5
    assert spec.submit_retry_delay(refusal(exhausted, 60), 2) == spec.SUBMIT_RETRY_MAX_DELAY
    assert spec.submit_retry_delay(refusal(exhausted, 1), spec.SUBMIT_RETRIES) is None
    assert spec.submit_retry_delay(refusal(exhausted, None), 0) is None  # no RetryInfo
    assert spec.submit_retry_delay(refusal(grpc.StatusCode.UNAVAILABLE, 1), 0) is None
    assert spec.submit_retry_delay(ValueError("plain"), 0) is None


def test_task_spec_takes_every_field_by_name() -> None:
    s = task_spec(
        "q",
        b"p",
        concurrency_key="tenant-1",
        depends_on_keys=[task_key("q", "a"), ("other", "b")],
        on_duplicate_key="replace_waiting",
        at_most_once=True,
    )
    assert s.concurrency_key == "tenant-1"
    assert [(k.queue, k.key) for k in s.depends_on_keys] == [("q", "a"), ("other", "b")]
    assert s.on_duplicate_key == broker_pb2.DUPLICATE_KEY_POLICY_REPLACE_WAITING
    assert s.at_most_once
    keep = task_spec("q", on_duplicate_key=broker_pb2.DUPLICATE_KEY_POLICY_KEEP_EXISTING)
    assert keep.on_duplicate_key == broker_pb2.DUPLICATE_KEY_POLICY_KEEP_EXISTING
    with pytest.raises(ValueError, match="on_duplicate_key"):
        task_spec("q", on_duplicate_key="overwrite")


def test_task_spec_checkpoint_is_set_only_when_given() -> None:
    seeded = task_spec("q", checkpoint=b"step=3\xff")
    assert seeded.HasField("checkpoint") and seeded.checkpoint == b"step=3\xff"
    empty = task_spec("q", checkpoint=b"")
    assert empty.HasField("checkpoint") and empty.checkpoint == b""
    assert not task_spec("q").HasField("checkpoint")


@dataclasses.dataclass
class Total:
    n: int


def test_dependency_result_decodes_with_the_serializer() -> None:
    task = broker_pb2.LeasedTask(task_id="b", queue="q", dependency_results={"a": b'{"n": 7}', "raw": b"not json"})
    ctx = TaskContext(task, None, 30)  # type: ignore[arg-type]
    assert ctx.dependency_results == {"a": b'{"n": 7}', "raw": b"not json"}
    assert ctx.dependency_result("a", Total) == Total(7)
    assert ctx.dependency_result("raw", bytes) == b"not json"
    with pytest.raises(PayloadError, match="dependency raw"):
        ctx.dependency_result("raw", Total)
    with pytest.raises(KeyError, match="missing"):
        ctx.dependency_result("missing", Total)


@pytest.mark.parametrize("delay", [datetime.timedelta(minutes=90), 5400, 5400.0])
def test_delay_sets_run_at_to_now_plus_the_delay(delay: datetime.timedelta | float) -> None:
    before = datetime.datetime.now(datetime.timezone.utc)
    s = task_spec("q", b"", delay=delay)
    after = datetime.datetime.now(datetime.timezone.utc)
    run_at = s.run_at.ToDatetime(tzinfo=datetime.timezone.utc)
    ninety = datetime.timedelta(minutes=90)
    # Timestamp keeps microseconds here: the bound is the clock read before and after the call.
    assert before + ninety <= run_at <= after + ninety


def test_run_at_is_sent_as_given_and_excludes_delay() -> None:
    when = datetime.datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=datetime.timezone.utc)
    assert task_spec("q", b"", run_at=when).run_at.ToDatetime(tzinfo=datetime.timezone.utc) == when
    naive = datetime.datetime(2031, 5, 6, 7, 8, 9)
    assert task_spec("q", b"", run_at=naive).run_at.ToDatetime() == naive
    with pytest.raises(ValueError, match="run_at or delay"):
        task_spec("q", b"", run_at=when, delay=60)
    assert not task_spec("q", b"").HasField("run_at")
