"""The conformance case ``spec_defaults``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

import grpc

from conformance import Cases
from conformance_spec import check
from taskbroker import Worker, spec


def spec_defaults(self: Cases, q: str) -> None:
    w = Worker(self.tb, [q], lambda ctx: None)
    got = (w.concurrency, w.poll_wait, w.lease_duration, w.heartbeat_interval, w.stop_timeout)
    check(got == (4, 10.0, 30.0, 10.0, 30.0), f"defaults {got}, want (4, 10, 30, 10, 30)")
    check(spec.backoff_ceiling(0) == 0.2, f"backoff ceiling(0) {spec.backoff_ceiling(0)}, want 0.2")
    check(spec.backoff_ceiling(10) == 10.0, f"backoff ceiling(10) {spec.backoff_ceiling(10)}, want 10")
    draws = [spec.backoff(3) for _ in range(50)]
    check(all(0.16 <= d <= 1.6 for d in draws), f"backoff(3) out of [0.16, 1.6]: {min(draws)}..{max(draws)}")
    check(len(set(draws)) > 1, "backoff(3) has no jitter")
    check(
        spec.STOP_CODES
        == {
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.PERMISSION_DENIED,
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.UNIMPLEMENTED,
        },
        f"stop codes {sorted(c.name for c in spec.STOP_CODES)}",
    )
