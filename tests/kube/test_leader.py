"""Leader election on a Lease: one leader at a time, takeover after expiry, release on shutdown."""

from __future__ import annotations

from datetime import timedelta

from gangrun._backends.kube.client import LEASES
from gangrun._backends.kube.leader import LeaderElector
from tests.harness.kube_builders import T0
from tests.harness.kube_fake import FakeApi


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self):
        return self.now


def pair() -> tuple[FakeApi, Clock, LeaderElector, LeaderElector]:
    api, clock = FakeApi(), Clock()
    a = LeaderElector(api, namespace="gangrun-system", identity="a", clock=clock)
    b = LeaderElector(api, namespace="gangrun-system", identity="b", clock=clock)
    return api, clock, a, b


def test_only_one_replica_leads() -> None:
    api, _, a, b = pair()
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    assert api.obj(LEASES, "gangrun-system", "gangrun-controller")["spec"]["holderIdentity"] == "a"


def test_a_standby_takes_over_once_the_lease_expires() -> None:
    api, clock, a, b = pair()
    a.try_acquire_or_renew()
    clock.now += timedelta(seconds=10)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()  # renewed in time
    clock.now += timedelta(seconds=16)
    assert b.try_acquire_or_renew()
    lease = api.obj(LEASES, "gangrun-system", "gangrun-controller")["spec"]
    assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()


def test_release_hands_over_at_once() -> None:
    _, _, a, b = pair()
    a.try_acquire_or_renew()
    a.release()
    assert b.try_acquire_or_renew()


def test_a_lost_race_on_the_lease_is_not_leadership() -> None:
    api, _, a, _ = pair()
    api.fail("create", "leases", 409)
    assert not a.try_acquire_or_renew()
    api.fail("get", "leases", 500)
    assert not a.try_acquire_or_renew()
    assert a.try_acquire_or_renew()
