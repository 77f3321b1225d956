"""Kubernetes manifests: render both overlays, validate offline against the Kubernetes
schemas, and cross-check what they reference (ports, probes, settings, metrics, image user)
against the Dockerfile and the app."""

from __future__ import annotations

import importlib.util
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy import kustomize_lite
from tests.deploy.manifests import (
    K8S,
    OVERLAYS,
    ROOT,
    Manifest,
    dockerfile_cmd_option,
    kubectl,
    one,
    render,
    render_with_kubectl,
)

# Oldest Kubernetes we support (gRPC probes are GA since 1.27) and the newest schema bundled.
K8S_VERSIONS = ("1.29", "1.33")


def _container(objects: list[Manifest]) -> dict[str, Any]:
    pod = one(objects, "Deployment", "oasr")["spec"]["template"]["spec"]
    containers: list[dict[str, Any]] = pod["containers"]
    assert len(containers) == 1, "one engine per pod: a single server container"
    return containers[0]


def _config(objects: list[Manifest]) -> dict[str, str]:
    data: dict[str, str] = one(objects, "ConfigMap", "oasr-config")["data"]
    return data


def _container_port(container: dict[str, Any], name: str) -> int:
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    return int(ports[name])


def _settings_fields() -> dict[str, Any]:
    if importlib.util.find_spec("app.settings") is None:
        pytest.skip("app/settings.py is not written yet: OASR_* keys cannot be checked against Settings")
    from app.settings import Settings

    return dict(Settings.model_fields)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_renders_every_kind(overlay: str) -> None:
    kinds = sorted(o["kind"] for o in render(overlay))
    assert kinds == sorted(
        ["ConfigMap", "Deployment", "Service", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"]
    )


@pytest.mark.skipif(kubectl() is None, reason="kubectl not installed: kustomize_lite renders alone")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kustomize_lite_matches_kubectl(overlay: str) -> None:
    directory = K8S / "overlays" / overlay
    by_key = lambda objs: {(o["kind"], o["metadata"]["name"]): o for o in objs}  # noqa: E731
    assert by_key(kustomize_lite.render(directory)) == by_key(render_with_kubectl(directory))


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_manifests_validate_against_kubernetes_schemas(overlay: str, version: str) -> None:
    for obj in render(overlay):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']} invalid for {version}: {exc.message} at {exc.path}"
            )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_use_the_servers_health_endpoints(overlay: str) -> None:
    container = _container(render(overlay))
    http_port = int(dockerfile_cmd_option("--port"))
    assert _container_port(container, "http") == http_port

    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    grpc_probe = container["startupProbe"]["grpc"]
    assert grpc_probe["port"] == _container_port(container, "grpc")
    assert grpc_probe["service"] in ("", "oasr.speech.v1.Speech")
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120, "startup must cover model load"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_grpc_port_matches_the_setting(overlay: str) -> None:
    objects = render(overlay)
    assert int(_config(objects)["OASR_GRPC_PORT"]) == _container_port(_container(objects), "grpc")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_termination_grace_covers_the_whole_shutdown(overlay: str) -> None:
    objects = render(overlay)
    container = _container(objects)
    pod = one(objects, "Deployment", "oasr")["spec"]["template"]["spec"]
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep", "preStop should only wait for endpoints to drain"
    uvicorn_grace = float(dockerfile_cmd_option("--timeout-graceful-shutdown"))
    shutdown_grace = float(_config(objects)["OASR_SHUTDOWN_GRACE_SECS"])
    needed = float(pre_stop[1]) + uvicorn_grace + shutdown_grace
    assert pod["terminationGracePeriodSeconds"] > needed


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_runs_as_the_images_non_root_user(overlay: str) -> None:
    from dockerfile_parse import DockerfileParser

    users = [
        i["value"] for i in DockerfileParser(str(ROOT / "Dockerfile")).structure if i["instruction"] == "USER"
    ]
    uid = int(users[-1].split(":")[0])
    objects = render(overlay)
    pod = one(objects, "Deployment", "oasr")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == uid
    sc = _container(objects)["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    # A read-only root needs a writable /tmp (XDG_CACHE_HOME points there in the image).
    assert any(m["mountPath"] == "/tmp" for m in _container(objects)["volumeMounts"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_selectors_and_targets_line_up(overlay: str) -> None:
    objects = render(overlay)
    deployment = one(objects, "Deployment", "oasr")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    container = _container(objects)
    port_names = {p["name"] for p in container["ports"]}

    def selects(selector: dict[str, str]) -> bool:
        return selector.items() <= pod_labels.items()

    assert selects(deployment["spec"]["selector"]["matchLabels"])
    for service in (o for o in objects if o["kind"] == "Service"):
        assert selects(service["spec"]["selector"])
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names
            assert port.get("appProtocol"), f"service port {port['name']} lacks appProtocol"
    assert selects(one(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"])
    target = one(objects, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "oasr")
    env_from = [e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e]
    assert env_from == ["oasr-config"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_hpa_scales_on_queue_depth_with_cpu_fallback(overlay: str) -> None:
    from app.metrics import METRIC_NAMES

    objects = render(overlay)
    hpa = one(objects, "HorizontalPodAutoscaler")
    pods = {m["pods"]["metric"]["name"]: m["pods"]["target"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"}
    assert set(pods) == {"oasr_engine_waiting", "oasr_engine_queue_delay_seconds"}
    assert set(pods) <= set(METRIC_NAMES)
    # scale out before a pod refuses offline work (at OASR_MAX_QUEUE_DELAY_SECS, 30 s by default)
    assert 0 < float(pods["oasr_engine_queue_delay_seconds"]["averageValue"]) < 30
    resources = [m["resource"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Resource"]
    assert resources == ["cpu"]
    # CPU utilisation is measured against requests: without one the fallback never fires.
    assert _container(objects)["resources"]["requests"]["cpu"]
    pdb = one(objects, "PodDisruptionBudget")["spec"]
    assert hpa["spec"]["minReplicas"] > pdb.get("maxUnavailable", 0), "a drain could take every pod"


def test_gpu_overlay_asks_for_a_gpu_and_uses_it() -> None:
    objects = render("gpu")
    container = _container(objects)
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == 1
    assert _config(objects)["OASR_DEVICE"] == "cuda"
    tolerations = one(objects, "Deployment")["spec"]["template"]["spec"]["tolerations"]
    assert any(t["key"] == "nvidia.com/gpu" for t in tolerations)
    assert container["image"].rpartition(":")[2].endswith("cuda")
    assert "nvidia.com/gpu" not in str(render("cpu"))
    assert _config(render("cpu"))["OASR_DEVICE"] == "cpu"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_pinned(overlay: str) -> None:
    image = _container(render(overlay))["image"]
    name, _, tag = image.rpartition(":")
    assert name and tag and tag != "latest", image


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_configmap_keys_are_real_settings_with_valid_values(
    overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = _settings_fields()
    config = _config(render(overlay))
    for key in config:
        assert key.startswith("OASR_"), key
        assert key.removeprefix("OASR_").lower() in fields, f"{key} is not a setting in app/settings.py"

    env_names = [e["name"] for e in _container(render(overlay))["env"] if e["name"].startswith("OASR_")]
    for name in env_names:
        assert name.removeprefix("OASR_").lower() in fields, f"container env {name} is not a setting"

    from app.settings import Settings

    for key, value in config.items():
        monkeypatch.setenv(key, value)
    settings = Settings()  # pydantic validates every value (types, ranges, enums)
    assert settings.grpc_port == int(config["OASR_GRPC_PORT"])
    assert settings.shutdown_grace_secs == float(config["OASR_SHUTDOWN_GRACE_SECS"])
