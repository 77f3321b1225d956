"""The deployment files against a running server: the probes the manifests and the
Dockerfile use answer, gRPC health is SERVING, every metric the rules, dashboard, adapter
and HPA query is in the live /metrics, and SIGTERM shuts down cleanly within the grace
the pod allows. Tests run in file order; the last one stops the server.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from dockerfile_parse import DockerfileParser
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from app.metrics import Metrics
from app.settings import Settings
from tests.deploy import promql
from tests.deploy.live_server import LiveServer, start_server
from tests.deploy.manifests import ROOT, dockerfile_cmd_option, one, render


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    log = tmp_path_factory.mktemp("live") / "server.log"
    grace = int(float(dockerfile_cmd_option("--timeout-graceful-shutdown")))
    live = start_server(log, {"OASR_DEMO": "true"}, graceful_s=grace)
    yield live
    live.stop()


def _container() -> dict[str, Any]:
    pod = one(render("cpu"), "Deployment", "oasr")["spec"]["template"]["spec"]
    container: dict[str, Any] = pod["containers"][0]
    return container


def test_http_probes_of_the_manifests_answer(server: LiveServer) -> None:
    container = _container()
    for probe in ("livenessProbe", "readinessProbe"):
        path = container[probe]["httpGet"]["path"]
        response = httpx.get(server.url + path, timeout=5)
        assert response.status_code == 200, f"{probe} {path}: {response.status_code} {response.text}"


def test_grpc_health_probe_is_serving(server: LiveServer) -> None:
    service = _container()["startupProbe"]["grpc"]["service"]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in ("", service):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, name


def test_docker_healthcheck_command_passes(server: LiveServer) -> None:
    checks = [
        i["value"]
        for i in DockerfileParser(str(ROOT / "Dockerfile")).structure
        if i["instruction"] == "HEALTHCHECK"
    ]
    argv = json.loads(checks[-1].partition("CMD")[2].strip())
    image_port = dockerfile_cmd_option("--port")
    script = argv[-1].replace(f"127.0.0.1:{image_port}", f"127.0.0.1:{server.http_port}")
    result = subprocess.run([sys.executable, *argv[1:-1], script], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_every_metric_the_deployment_queries_is_exported(server: LiveServer) -> None:
    # One request first, so the scrape is what a working server exposes.
    httpx.get(server.url + "/v1/models", timeout=10)
    response = httpx.get(server.url + "/metrics", timeout=10)
    assert response.status_code == 200
    exported = {"up"}  # written by Prometheus itself for every target
    for family in text_string_to_metric_families(response.text):
        exported |= promql.sample_names(family.name, family.type)
    metrics = Metrics()
    metrics.declare_gpu()
    gpu_only = {n for spec in metrics.specs if spec.section == "GPU" for n in promql.sample_names(spec.name, spec.kind)}
    for where, expr in promql.all_expressions().items():
        for selector in promql.selectors(expr, where):
            if selector.name in gpu_only:
                continue  # this server runs on the CPU (OASR_DEVICE=cpu): no GPU series
            assert selector.name in exported, f"{where}: {selector.name} not in the live /metrics"


def test_demo_page_is_served_with_its_scripts(server: LiveServer) -> None:
    page = httpx.get(server.url + "/demo/", timeout=10, follow_redirects=True)
    assert page.status_code == 200 and "OASR demo" in page.text
    for name in [*re.findall(r'src="([\w.-]+\.js)"', page.text), "pcm-worklet.js"]:
        script = httpx.get(f"{server.url}/demo/{name}", timeout=10)
        assert script.status_code == 200, name
        assert script.text == (ROOT / "examples" / "web" / name).read_text()


def test_sigterm_shuts_down_cleanly_within_the_pods_grace(server: LiveServer) -> None:
    """Last: stops the module's server as Kubernetes would, idle, and times it."""
    pod = one(render("cpu"), "Deployment", "oasr")["spec"]["template"]["spec"]
    started = time.monotonic()
    code = server.stop(timeout_s=pod["terminationGracePeriodSeconds"])
    took = time.monotonic() - started
    assert code == 0, f"exit code {code} after SIGTERM:\n{server.log()}"
    # Idle, nothing waits for the drain's grace period (what a loaded machine adds is far less)
    assert took < Settings().shutdown_grace_secs, f"idle shutdown took {took:.1f} s: it waited for the grace period"
    assert "Traceback" not in server.log(), server.log()
