"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it.

Only the holder of the Lease reconciles, so several controller replicas are safe. Every write is an
update with the Lease's resourceVersion: two candidates racing for an expired Lease cannot both win
(the loser gets 409 and tries again later). A leader that cannot renew within `renew_deadline`
stops leading; the caller exits, as controller-runtime does, rather than risk two leaders.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from gangrun._backends.clock import Clock, system_clock
from gangrun._backends.kube.client import LEASES, KubeApi
from gangrun._backends.kube.fields import parse_time
from gangrun._backends.kube.permissions import LEADER_ELECTION, Scoped
from gangrun._errors import ApiError, NotFound

log = logging.getLogger(__name__)
LEASE_NAME = "gangrun-controller"
LEASE_DURATION = 15.0  # seconds a standby waits after the leader's last renewal, unless it gives the Lease up


def _micro(t: datetime) -> str:  # MicroTime
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, api: KubeApi, *, namespace: str, identity: str, name: str = LEASE_NAME,
                 lease_duration: float = LEASE_DURATION, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 clock: Clock = system_clock) -> None:
        self.api: KubeApi = Scoped(api, LEADER_ELECTION)  # the Role in its own namespace, and nothing else
        self.namespace, self.identity, self.name = namespace, identity, name
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.clock = clock
        self.is_leader = False

    def try_acquire_or_renew(self) -> bool:
        """One attempt. Returns whether this identity holds the Lease afterwards. Never raises ApiError."""
        now = self.clock()
        try:
            lease = self.api.get(LEASES, self.namespace, self.name)
        except NotFound:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now, acquire=now, transitions=0)}
            try:
                self.api.create(LEASES, self.namespace, body)
            except ApiError as e:
                log.info("could not create lease %s/%s: %s", self.namespace, self.name, e)
                return self._set(False)
            return self._set(True)
        except ApiError as e:
            log.warning("could not read lease %s/%s: %s", self.namespace, self.name, e)
            return self._set(False)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        held_by_other = holder and holder != self.identity and renewed is not None and \
            now < renewed + timedelta(seconds=duration)
        if held_by_other:
            return self._set(False)
        transitions = int(spec.get("leaseTransitions") or 0)
        acquire = parse_time(spec.get("acquireTime")) if holder == self.identity else now
        if holder != self.identity:
            transitions += 1
        lease["spec"] = self._spec(now, acquire=acquire or now, transitions=transitions)
        try:
            self.api.replace(LEASES, self.namespace, self.name, lease)  # carries resourceVersion
        except ApiError as e:
            log.info("could not update lease %s/%s: %s", self.namespace, self.name, e)
            return self._set(False)
        return self._set(True)

    def _spec(self, now: datetime, *, acquire: datetime, transitions: int) -> dict[str, Any]:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration),
                "acquireTime": _micro(acquire), "renewTime": _micro(now), "leaseTransitions": transitions}

    def _set(self, leader: bool) -> bool:
        if leader != self.is_leader:
            log.info("%s leadership of %s/%s", "acquired" if leader else "lost", self.namespace, self.name)
        self.is_leader = leader
        return leader

    def release(self) -> None:
        """Give the Lease up on a clean shutdown so a standby takes over at once."""
        if not self.is_leader:
            return
        try:
            lease = self.api.get(LEASES, self.namespace, self.name)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                self.api.replace(LEASES, self.namespace, self.name, lease)
        except ApiError as e:
            log.info("could not release lease: %s", e)
        self.is_leader = False

    def acquire(self, stop: threading.Event) -> bool:
        """Block until leading (True) or `stop` is set (False)."""
        while not stop.is_set():
            if self.try_acquire_or_renew():
                return True
            stop.wait(self.retry_period)
        return False

    def keep_renewing(self, stop: threading.Event, on_lost: Callable[[], None]) -> None:
        """Renew every retry period; call `on_lost` once renewals fail for `renew_deadline`."""
        last_ok = self.clock()
        while not stop.wait(self.retry_period):
            if self.try_acquire_or_renew():
                last_ok = self.clock()
            elif (self.clock() - last_ok).total_seconds() >= self.renew_deadline or self._taken():
                on_lost()
                return

    def _taken(self) -> bool:
        try:
            lease = self.api.get(LEASES, self.namespace, self.name)
        except ApiError:
            return False
        holder = (lease.get("spec") or {}).get("holderIdentity") or ""
        return bool(holder) and holder != self.identity
