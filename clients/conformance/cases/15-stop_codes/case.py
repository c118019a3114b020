"""The conformance case ``stop_codes``, for the Python client: README.md beside this file says what
it does and expects."""

from __future__ import annotations

import os
import threading

import grpc

from conformance import Cases
from conformance_spec import CaseFailed, check
from taskbroker import Client, ConnectOptions, Worker, WorkerStoppedError


def stop_codes(self: Cases, q: str) -> None:
    def run_until_stopped(w: Worker) -> BaseException | None:
        out: list[BaseException | None] = [None]

        def target() -> None:
            try:
                w.run(handle_signals=False)
            except BaseException as err:  # noqa: BLE001 -- handed to the case
                out[0] = err

        th = threading.Thread(target=target, daemon=True)
        th.start()
        th.join(20)
        if th.is_alive():
            w.stop(wait=False)
            raise CaseFailed("the worker kept running")
        return out[0]

    err = run_until_stopped(Worker(self.tb, ["has space"], lambda ctx: None, poll_wait=1))
    check(
        isinstance(err, WorkerStoppedError) and err.code == grpc.StatusCode.INVALID_ARGUMENT,
        f"bad queue: stopped with {err!r}, want WorkerStoppedError INVALID_ARGUMENT",
    )
    if os.environ.get("TASKBROKER_TOKEN"):
        o = ConnectOptions.from_env()
        with Client(o.target, token="wrong-token-0123456789", tls=o.tls) as bad:
            err = run_until_stopped(Worker(bad, [q], lambda ctx: None, poll_wait=1))
        check(
            isinstance(err, WorkerStoppedError) and err.code == grpc.StatusCode.UNAUTHENTICATED,
            f"wrong token: stopped with {err!r}, want WorkerStoppedError UNAUTHENTICATED",
        )
