"""Typed payloads and results without a broker: the JSON serializer, handler signatures,
middleware order, the completer's batches and the durations."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, TypedDict

import pydantic
import pytest

from taskbroker import JSONSerializer, PayloadError, RetryableError, TaskContext, Worker, handlers, retry_policy
from taskbroker.completer import MAX_BATCH, MAX_BATCH_BYTES, batch_request, hand_out, take_batch
from taskbroker.serde import decode_payload
from taskbroker.v1 import broker_pb2
from taskbroker.worker import _fail_request

J = JSONSerializer()


@dataclasses.dataclass
class Line:
    sku: str
    qty: int = 1


@dataclasses.dataclass
class Order:
    id: str
    lines: list[Line]
    note: str | None = None


class Point(TypedDict):
    x: int
    y: float


class Model(pydantic.BaseModel):
    name: str
    size: int


def test_dataclasses_round_trip_with_nested_fields_and_defaults() -> None:
    order = Order("o-1", [Line("a", 2), Line("b")])
    data = J.encode(order)
    assert data == b'{"id":"o-1","lines":[{"sku":"a","qty":2},{"sku":"b","qty":1}],"note":null}'
    assert J.decode(data, Order) == order
    assert J.decode(b'{"id": "o-2", "lines": [{"sku": "c"}]}', Order) == Order("o-2", [Line("c", 1)])


def test_typeddicts_dicts_models_and_plain_values_decode_by_type() -> None:
    assert J.decode(b'{"x": 1, "y": 2}', Point) == {"x": 1, "y": 2.0}
    assert J.decode(b'{"a": [1, 2]}', dict[str, list[int]]) == {"a": [1, 2]}
    assert J.decode(J.encode(Model(name="m", size=3)), Model) == Model(name="m", size=3)
    assert J.decode(b'"hi"', str) == "hi" and J.decode(b"[1, 2]", Any) == [1, 2]


@pytest.mark.parametrize(
    ("data", "type_", "says"),
    [
        (b"not json", Order, "Expecting value"),
        (b'{"id": "o", "lines": [], "extra": 1}', Order, "unknown field extra"),
        (b'{"lines": []}', Order, "missing field id"),
        (b'{"id": 7, "lines": []}', Order, "expected str, got number"),
        (b'{"x": 1}', Point, "missing field y"),
        (b'{"name": "m"}', Model, "size"),
        (b"[1]", Point, "expected a JSON object"),
    ],
)
def test_a_payload_that_does_not_decode_is_one_line_naming_the_queue_and_type(data: bytes, type_: Any, says: str) -> None:
    with pytest.raises(PayloadError) as err:
        decode_payload(J, data, type_, "emails")
    text = str(err.value)
    assert text.startswith(f"queue emails: payload is not a valid {type_.__name__}: ")
    assert says in text and "\n" not in text


def test_bytes_pass_through_and_unencodable_values_are_refused() -> None:
    assert decode_payload(J, b"\xff raw", bytes, "q") == b"\xff raw"
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        J.encode({"a": object()})
    with pytest.raises(TypeError, match="dict key of type int"):
        J.encode({1: "a"})
    with pytest.raises(ValueError):
        J.encode(float("nan"))


def test_handler_parameters_are_filled_by_their_annotations() -> None:
    def both(order: Order, ctx: TaskContext) -> None: ...
    def ctx_first(ctx, line: Line) -> None: ...  # type: ignore[no-untyped-def]
    def payload_only(p: Point) -> None: ...
    def untyped(value) -> None: ...  # type: ignore[no-untyped-def]
    def two_payloads(a: Line, b: Line) -> None: ...

    assert handlers.register("q", both, TaskContext).params == ("payload", "ctx")
    assert handlers.register("q", ctx_first, TaskContext).params == ("ctx", "payload")
    assert handlers.register("q", payload_only, TaskContext).payload_type is Point
    assert handlers.register("q", untyped, TaskContext).payload_type is Any
    with pytest.raises(TypeError, match="more than one payload parameter"):
        handlers.register("q", two_payloads, TaskContext)


def test_typed_results_are_encoded_and_the_raw_contract_is_kept() -> None:
    typed = handlers.register("q", lambda: None, TaskContext)
    assert handlers.encode_result(typed, J, Line("a")) == b'{"sku":"a","qty":1}'
    assert handlers.encode_result(typed, J, b"raw") == b"raw" and handlers.encode_result(typed, J, None) == b""
    assert handlers.encode_result(typed, J, "s") == b'"s"'
    with pytest.raises(TypeError, match="handler returned set, which JSONSerializer cannot encode"):
        handlers.encode_result(typed, J, {1, 2})
    raw = handlers.raw("q", lambda ctx: b"")
    assert handlers.encode_result(raw, J, "s") == b"s"
    with pytest.raises(TypeError, match="handler returned dict, not bytes, str or None"):
        handlers.encode_result(raw, J, {"a": 1})


def test_middleware_runs_first_registered_outermost_and_can_replace_the_outcome() -> None:
    order: list[str] = []

    def outer(ctx: Any, call_next: Any) -> Any:
        order.append("outer in")
        try:
            return call_next()
        finally:
            order.append("outer out")

    def inner(ctx: Any, call_next: Any) -> Any:
        order.append("inner in")
        try:
            return call_next()
        except KeyError as err:
            raise ValueError("replaced") from err

    def handler() -> Any:
        order.append("handler")
        raise KeyError("boom")

    with pytest.raises(ValueError, match="replaced"):
        handlers.chain([outer, inner], None, handler)
    assert order == ["outer in", "inner in", "handler", "outer out"]


@dataclasses.dataclass
class _Item:
    request: broker_pb2.CompleteRequest


def _items(n: int, size: int = 0, lease_next: bool = True) -> list[_Item]:
    out = []
    for i in range(n):
        req = broker_pb2.CompleteRequest(task_id=f"t{i}", lease_token="l", result=b"x" * size)
        if lease_next:
            req.lease_next.CopyFrom(broker_pb2.LeaseRequest(worker_id="w", queues=["q"], max_tasks=1))
        out.append(_Item(req))
    return out


def test_a_lone_completion_goes_alone_and_queued_ones_go_together_within_the_limits() -> None:
    import collections

    q = collections.deque(_items(3))
    assert [i.request.task_id for i in take_batch(q, alone=True)] == ["t0"]
    assert [i.request.task_id for i in take_batch(q, alone=False)] == ["t1", "t2"]
    q = collections.deque(_items(MAX_BATCH + 5))
    assert len(take_batch(q, alone=False)) == MAX_BATCH and len(q) == 5
    q = collections.deque(_items(4, size=MAX_BATCH_BYTES // 2))
    assert len(take_batch(q, alone=False)) == 2 and len(q) == 2


def test_a_batch_asks_once_for_every_asking_completion_and_hands_the_tasks_out_in_order() -> None:
    batch = _items(2) + _items(1, lease_next=False) + _items(1)
    req = batch_request(batch)
    assert req.lease_next.max_tasks == 3
    assert not any(c.HasField("lease_next") for c in req.completions)
    resp = broker_pb2.CompleteManyResponse(
        results=[broker_pb2.CompleteResult(task_id=f"t{i}", outcome=broker_pb2.COMPLETE_OUTCOME_COMPLETED) for i in range(3)]
        + [broker_pb2.CompleteResult(task_id="t0", outcome=broker_pb2.COMPLETE_OUTCOME_LEASE_LOST)],
        next_tasks=[broker_pb2.LeasedTask(task_id="n1"), broker_pb2.LeasedTask(task_id="n2")],
    )
    got = [(o, [t.task_id for t in nexts]) for _, o, nexts in hand_out(batch, resp)]
    assert got == [
        ("COMPLETE_OUTCOME_COMPLETED", ["n1"]),
        ("COMPLETE_OUTCOME_COMPLETED", ["n2"]),
        ("COMPLETE_OUTCOME_COMPLETED", []),
        ("COMPLETE_OUTCOME_LEASE_LOST", []),
    ]


def test_durations_take_timedelta_or_seconds() -> None:
    w = Worker(
        "127.0.0.1:1", ["q"], lambda ctx: b"",
        lease_duration=datetime.timedelta(seconds=4), poll_wait=datetime.timedelta(milliseconds=500),
        stop_timeout=datetime.timedelta(minutes=1),
    )
    assert (w.lease_duration, w.poll_wait, w.stop_timeout) == (4.0, 0.5, 60.0)
    policy = retry_policy(5, initial_backoff=datetime.timedelta(seconds=2), max_backoff=60)
    assert policy.max_attempts == 5 and policy.initial_backoff.seconds == 2 and policy.max_backoff.seconds == 60
    ctx = TaskContext(broker_pb2.LeasedTask(task_id="t", lease_token="l"), None, 30)  # type: ignore[arg-type]
    req = _fail_request(ctx, RetryableError("later", retry_after=datetime.timedelta(milliseconds=1500)))
    assert req.retry_after.ToNanoseconds() == 1_500_000_000
    with pytest.raises(TypeError, match="a duration is a timedelta or a number of seconds"):
        Worker("127.0.0.1:1", ["q"], lambda ctx: b"", poll_wait="10")  # type: ignore[arg-type]
