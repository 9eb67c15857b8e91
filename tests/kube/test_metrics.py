"""Prometheus series (prometheus-client) and the health endpoints."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from gangrun._backends.kube.metrics import Metrics, serve


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, parsed by prometheus-client's own parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_page_has_every_series() -> None:
    m = Metrics()
    m.tasks.set_all({("Running",): 2})
    m.preemptions.inc("Preempted")
    m.attempts.inc("UserRetry")
    m.errors.inc()
    m.readmission_wait.observe(42)
    m.reconcile.observe(0.01)
    got = samples(m.render())
    assert got[("gangrun_tasks", (("phase", "Running"),))] == 2
    assert got[("gangrun_preemptions_total", (("cause", "Preempted"),))] == 1
    assert got[("gangrun_attempts_total", (("outcome", "UserRetry"),))] == 1
    assert got[("gangrun_reconcile_errors_total", ())] == 1
    assert got[("gangrun_readmission_wait_seconds_bucket", (("le", "60.0"),))] == 1
    assert got[("gangrun_readmission_wait_seconds_bucket", (("le", "30.0"),))] == 0
    assert got[("gangrun_reconcile_seconds_count", ())] == 1
    assert (m.preemptions.value("Preempted"), m.errors.value(), m.readmission_wait.count) == (1, 1, 1)


def test_gauges_come_from_the_views_and_forget_what_is_gone() -> None:
    m = Metrics()
    m.observe_views([
        {"name": "a", "phase": "Running", "queue": "default", "accounting": {"goodput": 0.9}},
        {"name": "b", "phase": "Running", "queue": "default", "eviction": {"reason": "Preempted"}},  # waiting (S5)
        {"name": "c", "phase": "WaitingForResources", "queue": "team"},
        {"name": "d", "phase": "Succeeded", "queue": "team", "accounting": {"goodput": 0.5}},
    ])
    got = samples(m.render())
    assert got[("gangrun_tasks", (("phase", "Running"),))] == 2
    assert got[("gangrun_queue_pending_gangs", (("queue", "default"),))] == 1
    assert got[("gangrun_queue_pending_gangs", (("queue", "team"),))] == 1
    assert got[("gangrun_task_goodput_ratio", (("task", "a"),))] == 0.9
    m.observe_views([{"name": "d", "phase": "Succeeded", "queue": "team"}])
    got = samples(m.render())
    assert ("gangrun_tasks", (("phase", "Running"),)) not in got and ("gangrun_queue_pending_gangs", (("queue", "team"),)) not in got


def test_two_registries_in_one_process_do_not_collide() -> None:
    a, b = Metrics(), Metrics()
    a.preemptions.inc("Preempted")
    assert b.preemptions.value("Preempted") == 0


def test_health_endpoints_answer_on_loopback() -> None:
    server = serve(0, {"/healthz": lambda: (200, "ok\n"), "/readyz": lambda: (503, "not yet\n")})
    port = server.server_address[1]
    try:
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read() == b"ok\n"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
            raise AssertionError("expected 503")
        except urllib.error.HTTPError as e:
            assert e.code == 503
    finally:
        server.shutdown()
        server.server_close()
