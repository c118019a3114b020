"""The SDK case of clients/conformance/cases/, `typed_handlers` (docs/client-spec.md
points 12 to 15): one Worker with a typed handler on each of two queues, a middleware, and its
metrics read from the OpenTelemetry SDK's in-memory reader.

The code of each case is its folder's case.py; this module holds what they share.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from taskbroker import Client
from taskbroker.v1 import broker_pb2

State = broker_pb2.TaskState


class CaseFailed(Exception):
    pass


def check(cond: bool, reason: str) -> None:
    if not cond:
        raise CaseFailed(reason)


@dataclasses.dataclass
class Email:
    to: str
    n: int


@dataclasses.dataclass
class Count:
    n: int


@dataclasses.dataclass
class Done:
    ok: bool
    n: int


def counter_points(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
    """Every data point of the metric ``name``: its sorted attributes -> its value."""
    out: dict[tuple[tuple[str, Any], ...], float] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    for p in m.data.data_points:
                        out[tuple(sorted((p.attributes or {}).items()))] = getattr(p, "value", getattr(p, "count", 0))
    return out


class TypedCases:
    tb: Client
