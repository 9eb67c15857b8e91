"""Serve a `FakeApi` over HTTP on loopback, so `gangrun controller --kubeconfig X` runs as a real
subprocess against it: the official client's REST layer, bearer-token auth, URL building, merge
patches and streamed watches all get exercised without a cluster."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from gangrun._backends.kube import client
from gangrun._errors import ApiError
from tests.harness.kube_fake import FakeApi

RESOURCES = {r.plural: r for r in (client.TASKS, client.JOBSETS, client.WORKLOADS, client.LOCAL_QUEUES,
                                   client.CLUSTER_QUEUES, client.PODS, client.EVENTS, client.LEASES,
                                   client.NODES)}
TOKEN = "test-token"


def _route(path: str) -> tuple[client.Resource, str | None, str | None, str | None]:
    parts = path.strip("/").split("/")
    parts = parts[2:] if parts[0] == "api" else parts[3:]  # drop api/v1 or apis/<group>/<version>
    namespace = None
    if parts and parts[0] == "namespaces" and len(parts) >= 3:
        namespace, parts = parts[1], parts[2:]
    res = RESOURCES[parts[0]]
    return res, namespace, (parts[1] if len(parts) > 1 else None), (parts[2] if len(parts) > 2 else None)


def serve(api: FakeApi) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, status: int, doc: Any) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> Any:
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n)) if n else None

        def _handle(self, method: str) -> None:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._reply(401, {"kind": "Status", "code": 401, "message": "Unauthorized"})
                return
            url = urlparse(self.path)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            try:
                res, ns, name, sub = _route(url.path)
                if method == "GET" and q.get("watch"):
                    return self._watch(res, ns, q)
                if method == "GET":
                    doc = api.get(res, ns, name) if name else api.list(
                        res, ns, label_selector=q.get("labelSelector", ""), field_selector=q.get("fieldSelector", ""))
                elif method == "POST" and sub == client.EVICTION and name:
                    api.evict(ns or "", name)
                    doc = {"kind": "Status", "status": "Success"}
                elif method == "POST":
                    doc = api.create(res, ns, self._body(), dry_run=q.get("dryRun") == "All")
                elif method == "PUT":
                    doc = api.replace(res, ns, name, self._body())
                elif method == "PATCH":
                    assert self.headers.get("Content-Type") == "application/merge-patch+json"
                    doc = api.patch(res, ns, name, self._body(), subresource=sub)
                else:
                    api.delete(res, ns, name)
                    doc = {"kind": "Status", "status": "Success"}
                self._reply(201 if method == "POST" else 200, doc)
            except ApiError as e:
                self._reply(e.status, {"kind": "Status", "code": e.status, "message": str(e)})

        def _watch(self, res: client.Resource, ns: str | None, q: dict[str, str]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            rv = int(q.get("resourceVersion") or 0)
            deadline = time.monotonic() + min(float(q.get("timeoutSeconds") or 1), 1.0)
            try:
                while time.monotonic() < deadline:
                    for event in api.watch(res, ns, resource_version=str(rv),
                                           label_selector=q.get("labelSelector", "")):
                        rv = max(rv, int(event["object"]["metadata"]["resourceVersion"]))
                        self.wfile.write(json.dumps(event).encode() + b"\n")
                        self.wfile.flush()
            except ApiError as e:
                status = {"kind": "Status", "code": e.status, "message": str(e)}
                self.wfile.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PUT(self) -> None:
            self._handle("PUT")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        def do_DELETE(self) -> None:
            self._handle("DELETE")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def kubeconfig(path: Path, server: ThreadingHTTPServer, *, namespace: str = "ml") -> Path:
    host, port = server.server_address[:2]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": f"http://{host}:{port}"}}],
        "users": [{"name": "test", "user": {"token": TOKEN}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
    }))
    return path
