"""The conformance case ``targeted_task``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

from conformance import WORKER_ID, Cases, check, payloads
from taskbroker import routing


def targeted_task(self: Cases, q: str) -> None:
    elsewhere = f"{WORKER_ID}-elsewhere"
    self.tb.submit(q, b"a", target=routing.target(labels={"gpu": "a100"}))
    self.tb.submit(q, b"b", target=routing.target(worker_id=elsewhere))
    got = self.lease_as(q, WORKER_ID)
    check(not got, f"a worker without labels leased {payloads(got)}")
    carrying = {"gpu": "a100", "region": "eu"}
    got = self.lease_as(q, WORKER_ID, carrying)
    check(payloads(got) == ["a"], f"the labelled worker leased {payloads(got)}, want ['a']")
    self.complete(got[0])
    got = self.lease_as(q, WORKER_ID, carrying)
    check(not got, f"the labelled worker leased {payloads(got)}, a task targeted at another worker")
    got = self.lease_as(q, elsewhere)
    check(payloads(got) == ["b"], f"{elsewhere} leased {payloads(got)}, want ['b']")
    self.complete(got[0])
