"""Prometheus text and health endpoints."""

from __future__ import annotations

import urllib.request

from gangrun._backends.kube.metrics import Metrics, serve


def test_metrics_page_has_every_series() -> None:
    m = Metrics()
    m.tasks.set_all({("Running",): 2})
    m.preemptions.inc("Preempted")
    m.attempts.inc("UserRetry")
    m.readmission_wait.observe(42)
    m.reconcile.observe(0.01)
    text = m.render()
    assert 'gangrun_tasks{phase="Running"} 2' in text
    assert 'gangrun_preemptions_total{cause="Preempted"} 1.0' in text
    assert 'gangrun_attempts_total{outcome="UserRetry"} 1.0' in text
    assert 'gangrun_readmission_wait_seconds_bucket{le="60"} 1' in text
    assert "gangrun_reconcile_seconds_count 1" in text


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
