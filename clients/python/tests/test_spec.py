"""docs/client-spec.md's numbers and rules (pure: no broker needed)."""

from __future__ import annotations

import grpc

from taskbroker import Worker, spec


def test_backoff_doubles_from_200ms_to_a_10s_ceiling_with_jitter() -> None:
    assert [spec.backoff_ceiling(n) for n in (0, 1, 3, 10, 1000)] == [0.2, 0.4, 1.6, 10.0, 10.0]
    draws = [spec.backoff(3) for _ in range(200)]
    assert all(0.16 <= d <= 1.6 for d in draws)
    assert len(set(draws)) > 1


def test_only_the_four_unfixable_codes_stop_a_worker() -> None:
    assert spec.STOP_CODES == {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNIMPLEMENTED,
    }


def test_worker_defaults_are_the_specs() -> None:
    w = Worker(grpc.insecure_channel("127.0.0.1:1"), ["q"], lambda ctx: None)
    assert (w.concurrency, w.poll_wait, w.lease_duration, w.heartbeat_interval, w.stop_timeout) == (
        4,
        10.0,
        30.0,
        10.0,
        30.0,
    )


def test_a_retry_policy_takes_a_delay_list() -> None:
    import datetime

    from taskbroker import retry_policy

    p = retry_policy(5, schedule=[1, datetime.timedelta(minutes=5), 0.25])
    assert p.max_attempts == 5
    assert [(d.seconds, d.nanos) for d in p.schedule] == [(1, 0), (300, 0), (0, 250_000_000)]
    assert not retry_policy(3).schedule
