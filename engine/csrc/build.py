"""Builds `engine._C` in place (engine/_C*.so) against the torch installed in this environment.

    python -m engine.csrc.build               # CPU kernels; CUDA kernels too on a CUDA torch with nvcc
    python -m engine.csrc.build --strict      # exit 1 when the build fails (default: warn, exit 0)
    python -m engine.csrc.build --cuda-check  # compile every .cu file to an object file with nvcc
    python -m engine.csrc.build --cuda-check --if-nvcc   # the same, a no-op without nvcc (make test)

Why a build step of our own instead of compiling inside `pip install`: pip's build isolation
would install a fresh torch into a throw-away environment to compile against, and the torch
PyPI resolves to is a multi-GB CUDA build. Here the compiler sees the installed torch's headers
and libraries (the ABI the engine loads into), `pip install -e .` stays pure Python, and a
failing compile never fails the install: the engine logs it and runs the Python reference
(`engine.ops`). `make install` runs this after pip; ninja, when present, compiles the
translation units in parallel and rebuilds only what changed (build/ext keeps its state).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

logger = logging.getLogger("engine.csrc.build")

CSRC = Path(__file__).resolve().parent
ROOT = CSRC.parents[1]
BUILD_TEMP = ROOT / "build" / "ext"
CUDA_CHECK_DIR = ROOT / "build" / "cuda-check"
EXTENSION = "engine._C"
CXX_FLAGS = ["-O3", "-g0", "-fopenmp", "-ffp-contract=off", "-Wall", "-Wno-unknown-pragmas", "-Wno-psabi"]
"""-g0: no debug info (Python's default -g doubles compile time and the library's size).
-ffp-contract=off: a product and a sum stay two roundings (no fused multiply-add), as torch's
elementwise ops round them: kernels that promise bitwise-equal results (int8_rows.cpp) keep it.
-Wno-psabi: the ABI note on 64-byte vectors (always inlined, never passed across targets).
-fopenmp: at::parallel_for runs the batch loops on torch's own OpenMP pool (the wheel ships
libgomp.so.1, so the extension binds to the already loaded runtime, not a second one)."""
NVCC_FLAGS = ["-O3", "--expt-relaxed-constexpr", "-lineinfo"]
CUDA_CHECK_ARCH = "sm_90"
"""cuda-check compiles for one architecture (H100/H200); the real CUDA build follows
TORCH_CUDA_ARCH_LIST like any torch extension."""


def _sources(suffix: str) -> list[str]:
    return sorted(str(p) for p in CSRC.glob(f"*{suffix}"))


def _nvcc() -> str | None:
    from torch.utils.cpp_extension import CUDA_HOME

    candidates = [os.path.join(CUDA_HOME, "bin", "nvcc")] if CUDA_HOME else []
    candidates.append(shutil.which("nvcc") or "")
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def _with_cuda() -> tuple[bool, str]:
    import torch

    if os.environ.get("OASR_BUILD_CUDA", "1") == "0":
        return False, "OASR_BUILD_CUDA=0"
    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} is a CPU build"
    if _nvcc() is None:
        return False, "nvcc not found (set CUDA_HOME)"
    return True, f"torch CUDA {torch.version.cuda}"


def _put_tools_on_path() -> None:
    """The ninja wheel installs its binary next to this interpreter, which make does not put on PATH."""
    bindir = os.path.dirname(sys.executable)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 1))


def build(strict: bool) -> int:
    import setuptools
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension, is_ninja_available

    _put_tools_on_path()
    cuda, why = _with_cuda()
    sources = _sources(".cpp") + (_sources(".cu") if cuda else [])
    kind = "CPU + CUDA" if cuda else "CPU"
    logger.info("building %s (%s kernels: %s; ninja: %s) from %d sources",
                EXTENSION, kind, why, "yes" if is_ninja_available() else "no", len(sources))  # fmt: skip
    make = CUDAExtension if cuda else CppExtension
    ext = make(
        EXTENSION,
        sources,
        include_dirs=[str(CSRC)],
        define_macros=[("OASR_WITH_CUDA", "1" if cuda else "0")],
        extra_compile_args={"cxx": CXX_FLAGS, "nvcc": NVCC_FLAGS},
        extra_link_args=["-fopenmp"],
    )
    start = time.monotonic()
    cwd = os.getcwd()
    lib_dir = BUILD_TEMP / "lib"
    BUILD_TEMP.mkdir(parents=True, exist_ok=True)
    log_path = BUILD_TEMP / "build.log"
    try:
        # Outside the project root: setuptools would otherwise read (and validate) pyproject.toml.
        os.chdir(BUILD_TEMP)
        with _output_to(log_path):  # compiler command lines and warnings: the log, shown on failure
            setuptools.setup(
                name="oasr-extension",
                ext_modules=[ext],
                cmdclass={"build_ext": BuildExtension},
                script_args=["build_ext", "--build-lib", str(lib_dir), "--build-temp", str(BUILD_TEMP / "obj")],
            )
        built = next((lib_dir / "engine").glob("_C*.so"))
        for stale in (ROOT / "engine").glob("_C*.so"):
            stale.unlink()
        shutil.copy2(built, ROOT / "engine" / built.name)
    except (Exception, SystemExit) as exc:  # setuptools reports compiler errors as SystemExit
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-60:]) if log_path.exists() else ""
        logger.error("building %s failed after %.0f s: %s\n%s\nThe engine will use the Python reference "
                     "(engine.ops); full log: %s", EXTENSION, time.monotonic() - start, exc, tail, log_path)  # fmt: skip
        return 1 if strict else 0
    finally:
        os.chdir(cwd)
    logger.info("built %s (%s kernels) in %.0f s (log: %s)", EXTENSION, kind, time.monotonic() - start, log_path)
    return 0


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Send this process's stdout/stderr file descriptors (so the compilers' too) to `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _cuda_check_command(nvcc: str, source: Path, obj: Path) -> list[str]:
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS, include_paths

    includes = [f"-I{p}" for p in [*include_paths(), str(CSRC)]]
    return [
        nvcc, "-c", str(source), "-o", str(obj), "-std=c++20", f"-arch={CUDA_CHECK_ARCH}",
        "-Xcompiler", "-fPIC", "-DOASR_WITH_CUDA=1",
        # The CPU wheel ships the c10/ATen CUDA headers but not CMake's generated
        # c10/cuda/impl/cuda_cmake_macros.h, whose only content is C10_CUDA_BUILD_SHARED_LIBS
        # (meaningful on Windows). c10 documents this switch for builds without the file.
        "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE",
        "-D_GLIBCXX_USE_CXX11_ABI=1", *COMMON_NVCC_FLAGS, *NVCC_FLAGS, *includes,
    ]  # fmt: skip


def cuda_check(if_nvcc: bool) -> int:
    """Compile the .cu files with nvcc, in one translation unit per CPU core: each unit parses
    the ATen headers once (~40 s of the ~45 s a file takes), so four files on two cores take one
    minute instead of two. A source whose stamp is newer than it and every header is skipped."""
    nvcc = _nvcc()
    if nvcc is None:
        if if_nvcc:
            logger.info("cuda-check skipped: no nvcc on this machine")
            return 0
        logger.error("cuda-check: nvcc not found (set CUDA_HOME or put nvcc on PATH)")
        return 1
    CUDA_CHECK_DIR.mkdir(parents=True, exist_ok=True)
    headers = [p for p in CSRC.iterdir() if p.suffix in (".h", ".cuh")] + [Path(__file__)]
    newest_header = max(p.stat().st_mtime for p in headers)
    todo = []
    for name in _sources(".cu"):
        source = Path(name)
        stamp = _cuda_stamp(source)
        if stamp.exists() and stamp.stat().st_mtime > max(newest_header, source.stat().st_mtime):
            logger.info("cuda-check: %s is up to date", source.name)
            continue
        todo.append(source)
    cores = os.cpu_count() or 1
    groups = [todo[i::cores] for i in range(min(len(todo), cores))]

    def compile_group(index: int) -> tuple[list[Path], subprocess.CompletedProcess[str], float]:
        unit = CUDA_CHECK_DIR / f"unit{index}.cu"
        unit.write_text("".join(f'#include "{source}"\n' for source in groups[index]))
        start = time.monotonic()
        proc = subprocess.run(_cuda_check_command(nvcc, unit, unit.with_suffix(".o")), capture_output=True, text=True)
        return groups[index], proc, time.monotonic() - start

    failed = 0
    with ThreadPoolExecutor(max_workers=max(1, len(groups))) as pool:
        for sources, proc, seconds in pool.map(compile_group, range(len(groups))):
            names = ", ".join(s.name for s in sources)
            if proc.returncode != 0:
                failed += 1
                logger.error("cuda-check: the unit of %s does not compile:\n%s", names, proc.stderr[-6000:])
                continue
            logger.info("cuda-check: %s compiled (%.0f s)", names, seconds)
            for source in sources:
                _cuda_stamp(source).touch()
    return 1 if failed else 0


def _cuda_stamp(source: Path) -> Path:
    """Touched when `source` last compiled (its object is the unit's it was compiled in)."""
    return CUDA_CHECK_DIR / f"{source.stem}.ok"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strict", action="store_true", help="exit 1 when the build fails")
    parser.add_argument("--cuda-check", action="store_true", help="compile every .cu file with nvcc")
    parser.add_argument("--if-nvcc", action="store_true", help="--cuda-check: succeed quietly without nvcc")
    args = parser.parse_args(argv)
    # Our own handler: setuptools reconfigures the root logger while it builds.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return cuda_check(args.if_nvcc) if args.cuda_check else build(args.strict)


if __name__ == "__main__":
    sys.exit(main())
