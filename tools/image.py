"""Build the server image and check it serves: `make image-base`, `make image`, `make image-check`.

    python -m tools.image base    # a Debian bookworm base from debootstrap, imported (no registry)
    python -m tools.image build   # the image, with docker, podman or buildah (the first that works)
    python -m tools.image check   # build, serve inside it, transcribe over HTTP and gRPC, stop

The Dockerfile's default base comes from a registry; where none answers, the base is made here
with `debootstrap --variant=minbase bookworm` and imported as BASE_IMAGE. Its root filesystem
tarball is kept in the cache folder (OASR_IMAGE_CACHE, default ~/.cache/oasr/image), so a later
run, or a fresh clone on the same machine, skips debootstrap. buildah builds with `--layers`
(docker and podman cache layers by default), so a warm build redoes only what changed.

`check` runs the image's server with `buildah run --isolation chroot` on the host's loopback
(`podman run` cannot set rlimits on these machines; docker runs it when a daemon answers).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "localhost/oasr:cpu"
BASE_TAG = "localhost/oasr-base:bookworm-minbase"
REGISTRY_BASE = "docker.io/library/python:3.11.14-slim-bookworm"
"""The Dockerfile's default BASE_IMAGE, tried first."""
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("OASR_DEBIAN_MIRROR", "http://deb.debian.org/debian")
CACHE = Path(os.environ.get("OASR_IMAGE_CACHE", Path.home() / ".cache" / "oasr" / "image"))
TORCH_SPEC = "torch==2.13.0"
BUILD_CERT = "/run/oasr-build-ca.crt"
"""Where the host's CA bundle is mounted during the build's RUN steps (not in any layer)."""
READY_TIMEOUT_S = 300.0
"""The server's start inside the image: imports and the embedded model's load, on a slow CPU."""
DEV_CLIP = Path(os.environ.get("OASR_SPEECH_DATA", ROOT.parent / "shared" / "data" / "speech")) / "jfk_inaugural.flac"
EXPECTED_WORDS = ("ask not what your country can do for you",)


def log(message: str) -> None:
    print(f"[image] {message}", file=sys.stderr, flush=True)


def run(*argv: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    if not quiet:
        log("$ " + " ".join(argv))
    return subprocess.run(argv, check=check, text=True, capture_output=quiet)


@dataclass(frozen=True)
class Tool:
    """The container tool that builds here: docker (a daemon answers), else podman, else buildah."""

    name: str

    @classmethod
    def find(cls) -> Tool:
        if shutil.which("docker") and run("docker", "info", check=False, quiet=True).returncode == 0:
            return cls("docker")
        for name in ("podman", "buildah"):
            if shutil.which(name):
                return cls(name)
        raise SystemExit("no docker daemon, podman or buildah here: install one (Debian: apt-get install buildah)")

    def has_image(self, ref: str) -> bool:
        argv = {"docker": ("image", "inspect"), "podman": ("image", "exists"), "buildah": ("inspect", "--type", "image")}
        return run(self.name, *argv[self.name], ref, check=False, quiet=True).returncode == 0

    def pull(self, ref: str) -> bool:
        return run(self.name, "pull", ref, check=False, quiet=True).returncode == 0

    def import_rootfs(self, tarball: Path, ref: str) -> None:
        if self.name in ("docker", "podman"):
            run(self.name, "import", "--change", "CMD [\"/bin/bash\"]", str(tarball), ref)
            return
        # buildah has no `import`: an empty container, the tarball added (and unpacked) at /
        ctr = run("buildah", "from", "scratch", quiet=True).stdout.strip()
        try:
            run("buildah", "add", ctr, str(tarball), "/")
            run("buildah", "config", "--cmd", "/bin/bash", "--env", "LANG=C.UTF-8", ctr)
            run("buildah", "commit", "--rm", ctr, ref)
        except BaseException:
            run("buildah", "rm", ctr, check=False, quiet=True)
            raise

    def build(self, build_args: dict[str, str], tag: str) -> None:
        argv = [self.name, "build", "-t", tag, "-f", str(ROOT / "Dockerfile")]
        cert = host_pip_cert()
        if cert is not None and self.name in ("buildah", "podman"):  # docker build mounts no host file
            argv += ["--volume", f"{cert}:{BUILD_CERT}:ro"]
            build_args = {**build_args, "PIP_CERT": BUILD_CERT}
        if self.name == "buildah":
            argv += ["--isolation", "chroot", "--layers", "--format", "docker"]  # docker: keeps HEALTHCHECK
        if self.name == "podman":
            argv += ["--isolation", "chroot", "--format", "docker"]
        for key, value in build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        run(*argv, str(ROOT))

    def size_bytes(self, ref: str) -> int:
        fmt = {"docker": "{{.Size}}", "podman": "{{.Size}}", "buildah": "{{.Size}}"}[self.name]
        if self.name == "buildah":
            out = run("buildah", "images", "--format", fmt, "--noheading", ref, quiet=True).stdout
            return parse_size(out.strip().splitlines()[0])
        return int(run(self.name, "image", "inspect", "--format", fmt, ref, quiet=True).stdout.strip())


def host_pip_cert() -> str | None:
    """The CA bundle this machine's pip trusts (PIP_CERT, or pip's `cert` setting), if one is set."""
    cert = os.environ.get("PIP_CERT")
    if not cert:
        got = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.cert"], text=True,
                             capture_output=True)
        cert = got.stdout.strip() if got.returncode == 0 else None
    return cert if cert and os.path.isfile(cert) else None


def parse_size(text: str) -> int:
    """buildah's human size ('2.31 GB', '512 MB') in bytes (decimal units, as it prints them)."""
    number, unit = text.replace("iB", "B").split()
    scale = {"B": 1, "KB": 10**3, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}[unit]
    return int(float(number) * scale)


# ---------------------------------------------------------------------------- base


def debian_rootfs() -> Path:
    """The cached minbase root filesystem tarball, made by debootstrap when absent."""
    tarball = CACHE / f"debian-{DEBIAN_SUITE}-minbase.tar"
    if tarball.is_file():
        log(f"base root filesystem from the cache: {tarball}")
        return tarball
    if not shutil.which("debootstrap"):
        raise SystemExit("debootstrap is missing: apt-get install debootstrap (or pull a registry base)")
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        rootfs = Path(tmp) / "rootfs"
        started = time.monotonic()
        run("debootstrap", "--variant=minbase", DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR)
        # apt's downloaded packages and lists: the image's own apt-get update fetches fresh ones
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        partial = tarball.with_suffix(".partial")
        with tarfile.open(partial, "w") as tar:
            tar.add(rootfs, arcname=".")
        partial.rename(tarball)
        log(f"debootstrap {DEBIAN_SUITE} in {time.monotonic() - started:.0f} s -> {tarball}")
    return tarball


def base_image(tool: Tool, *, registry: bool = True) -> str:
    """BASE_IMAGE for the build: the registry default when it can be pulled, else the local base."""
    if registry and (tool.has_image(REGISTRY_BASE) or tool.pull(REGISTRY_BASE)):
        return REGISTRY_BASE
    if not tool.has_image(BASE_TAG):
        tool.import_rootfs(debian_rootfs(), BASE_TAG)
    return BASE_TAG


# ---------------------------------------------------------------------------- build


def stage_torch_wheel() -> bool:
    """Copy the pinned torch wheel into wheels/ when pip finds it on local disk (its find-links);
    nothing is downloaded (--no-index). True when wheels/ holds one."""
    wheels = ROOT / "wheels"
    if any(wheels.glob("torch-*.whl")):
        return True
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-index", "--no-deps", "-q", "-d", str(wheels), TORCH_SPEC],
        text=True, capture_output=True,
    )  # fmt: skip
    if result.returncode != 0:
        log("no local torch wheel: the image takes torch from TORCH_INDEX_URL")
    return any(wheels.glob("torch-*.whl"))


def build(tool: Tool, extra: dict[str, str] | None = None) -> None:
    """Build IMAGE; `extra` build args win (a CUDA BASE_IMAGE and TORCH_INDEX_URL make a GPU image)."""
    started = time.monotonic()
    extra = extra or {}
    base = extra.get("BASE_IMAGE") or base_image(tool)
    args = {"BASE_IMAGE": base}
    if "TORCH_INDEX_URL" not in extra and stage_torch_wheel():
        # the wheel in wheels/ (a +cpu build sorts above PyPI's same-numbered one); its dependencies from PyPI
        args.update(TORCH_INDEX_URL="", TORCH_FIND_LINKS="/tmp/wheels")
    tool.build({**args, **extra}, IMAGE)
    log(f"built {IMAGE} on {base} in {time.monotonic() - started:.0f} s, "
        f"{tool.size_bytes(IMAGE) / 10**6:.0f} MB")


# ---------------------------------------------------------------------------- check


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_argv(tool: Tool, http_port: int, grpc_port: int) -> list[str]:
    env = {"OASR_GRPC_PORT": str(grpc_port), "OASR_HOST": "127.0.0.1"}
    server = ["uvicorn", "--factory", "app.main:create_app", "--host", "127.0.0.1", "--port", str(http_port),
              "--timeout-graceful-shutdown", "20"]
    env_args = [a for k, v in env.items() for a in ("--env", f"{k}={v}")]
    if tool.name == "docker":
        return ["docker", "run", "--rm", "--network", "host", "--read-only", "--tmpfs", "/tmp", *env_args,
                IMAGE, *server]
    return ["buildah", "run", "--isolation", "chroot", *env_args, "{ctr}", "--", *server]


def check(tool: Tool, extra: dict[str, str] | None = None) -> None:
    import httpx

    if not DEV_CLIP.is_file():  # before a long build, not after it
        raise SystemExit(f"no dev clip at {DEV_CLIP}: set OASR_SPEECH_DATA to the shared speech folder")
    build(tool, extra)
    http_port, grpc_port = free_port(), free_port()
    ctr = None
    argv = serve_argv(tool, http_port, grpc_port)
    if "{ctr}" in argv:
        ctr = run("buildah", "from", IMAGE, quiet=True).stdout.strip()
        argv = [ctr if a == "{ctr}" else a for a in argv]
        uid = run("buildah", "run", "--isolation", "chroot", ctr, "--", "id", "-u", quiet=True).stdout.strip()
        if uid == "0":
            raise SystemExit("the image's server runs as root")
        log(f"the server runs as uid {uid}")
    log("$ " + " ".join(argv))
    started = time.monotonic()
    server = subprocess.Popen(argv, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{http_port}"
        while True:
            if server.poll() is not None:
                raise SystemExit(f"the server inside the image exited with {server.returncode} before /readyz")
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - started > READY_TIMEOUT_S:
                raise SystemExit(f"no /readyz within {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.5)
        log(f"ready in {time.monotonic() - started:.1f} s (start inside the image: imports + model load)")
        audio = DEV_CLIP.read_bytes()
        response = httpx.post(f"{url}/v1/audio/transcriptions", timeout=120,
                              files={"file": (DEV_CLIP.name, audio)}, data={"model": "tiny.en"})
        response.raise_for_status()
        expect("HTTP /v1/audio/transcriptions", response.json()["text"])
        expect("gRPC Recognize", grpc_recognize(grpc_port, audio))
    finally:
        code = stop(server)
        if ctr is not None:
            run("buildah", "rm", ctr, check=False, quiet=True)
    if code != 0:
        raise SystemExit(f"the server inside the image did not stop cleanly on SIGTERM (exit {code})")
    log("image-check passed: served, transcribed over HTTP and gRPC, stopped on SIGTERM (exit 0)")


def stop(server: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM to uvicorn itself, as a container runtime sends it to PID 1 (it drains, then the
    lifespan stops the engine); `buildah run` exits with its status. SIGKILL after a minute."""
    import psutil

    try:
        children = psutil.Process(server.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    # the server itself, not buildah's chroot helpers whose command lines name it too
    servers = [p for p in children if "uvicorn" in " ".join(argv := p.cmdline()) and not argv[0].startswith("buildah")]
    for proc in servers or [psutil.Process(server.pid)]:  # docker run: the client forwards it
        proc.send_signal(signal.SIGTERM)
    try:
        return server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        return None


def grpc_recognize(port: int, audio: bytes) -> str:
    import grpc

    from protos.oasr.speech.v1 import speech_pb2 as pb
    from protos.oasr.speech.v1 import speech_pb2_grpc as pb_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        response = pb_grpc.SpeechStub(channel).Recognize(
            pb.RecognizeRequest(config=pb.RecognitionConfig(), audio=pb.RecognitionAudio(content=audio)), timeout=120)
    return " ".join(r.alternatives[0].transcript for r in response.results if r.alternatives)


def expect(surface: str, text: str) -> None:
    words = " ".join("".join(c for c in text.lower() if c.isalnum() or c.isspace()).split())
    log(f"{surface}: {text!r}")
    if not all(w in words for w in EXPECTED_WORDS):
        raise SystemExit(f"{surface}: transcript {text!r} lacks {EXPECTED_WORDS}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.image", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("base", "build", "check"))
    parser.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="a Dockerfile build argument, passed as is (BASE_IMAGE here skips the base's choice)")
    args = parser.parse_args(argv)
    extra = dict(a.split("=", 1) for a in args.build_arg)
    tool = Tool.find()
    log(f"container tool: {tool.name}")
    if args.command == "base":
        log(f"base image: {base_image(tool, registry=False)}")
    elif args.command == "build":
        build(tool, extra)
    else:
        check(tool, extra)


if __name__ == "__main__":
    main()
