"""Regenerate the checked-in Python stubs of every `.proto` under `protos/`.

Run after editing a `.proto`: `python -m protos.generate` (or `make protos`), then
commit the `.proto` together with the regenerated `*_pb2.py`, `*_pb2.pyi` and
`*_pb2_grpc.py`. `tests/app/test_protos.py` fails while they disagree.

Import root, and the one line we rewrite: protoc runs with `-I protos`, so each file
keeps its canonical name (`oasr/speech/v1/speech.proto`, the name gRPC reflection and
clients in other languages see). protoc then makes the `_grpc` module import its
messages as `from oasr.speech.v1 import speech_pb2`, which resolves only when
`protos/` itself is on `sys.path`. We rewrite that import into a relative one
(`from . import speech_pb2`), which works from a checkout, `pip install -e .` and a
wheel alike. (Running protoc with `-I .` instead would bake `protos/` into the
canonical proto name.) The `_pb2` modules import google.protobuf well-known types and
`google.longrunning.operations_pb2`, both absolute imports of installed packages that need
no rewriting.

Imports from googleapis (`google/longrunning/operations.proto` and what it imports) are
compiled against the .proto files the googleapis-common-protos package ships, the same
package whose generated modules the stubs import at run time. It ships the Operations file
as `operations_proto.proto` (under its canonical name in the descriptor), so the include
tree is laid out in a scratch folder with the canonical names.
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

logger = logging.getLogger(__name__)

PROTO_ROOT = Path(__file__).resolve().parent
"""The `-I` root: proto names are relative to this folder."""

_GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


class ProtocError(RuntimeError):
    """protoc rejected a .proto file; its diagnostics went to stderr."""


def proto_files(root: Path = PROTO_ROOT) -> list[Path]:
    """Every .proto under `root`, sorted so generation order is stable."""
    return sorted(root.rglob("*.proto"))


def _well_known_include() -> str:
    """Folder of the google/protobuf/*.proto files bundled with grpcio-tools."""
    return str(resources.files("grpc_tools") / "_proto")


GOOGLEAPIS_PACKAGES = ("api", "longrunning", "rpc")
"""Folders of googleapis-common-protos' `google/` whose .proto files may be imported."""
_RENAMED = {"longrunning/operations_proto.proto": "longrunning/operations.proto"}


def _googleapis_include(scratch: Path) -> str:
    """Lay out googleapis-common-protos' .proto files under their canonical names; return the folder."""
    import google.api  # googleapis-common-protos: a run-time dependency, so it is installed

    source = Path(next(iter(google.api.__path__))).parent
    include = scratch / "googleapis"
    for package in GOOGLEAPIS_PACKAGES:
        for proto in sorted((source / package).glob("*.proto")):
            rel = f"{package}/{proto.name}"
            dest = include / "google" / _RENAMED.get(rel, rel)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(proto, dest)
    return str(include)


def _relative_grpc_import(source: str, proto_name: str) -> str:
    """Rewrite `from oasr.speech.v1 import speech_pb2 as ...` into `from . import speech_pb2 as ...`."""
    package = ".".join(Path(proto_name).parent.parts)
    module = Path(proto_name).stem + "_pb2"
    pattern = re.compile(rf"^from {re.escape(package)} import {re.escape(module)} as ", re.MULTILINE)
    rewritten, count = pattern.subn(f"from . import {module} as ", source)
    if count != 1:
        raise ProtocError(f"expected one import of {package}.{module} in the generated gRPC module, found {count}")
    return rewritten


def generate(out_root: Path = PROTO_ROOT, root: Path = PROTO_ROOT) -> list[Path]:
    """Compile every .proto under `root` into `out_root` (same relative folders); return the written files."""
    from grpc_tools import protoc  # dev-only dependency: import it only when generating

    protos = proto_files(root)
    if not protos:
        raise ProtocError(f"no .proto files under {root}")
    names = [p.relative_to(root).as_posix() for p in protos]
    out_root.mkdir(parents=True, exist_ok=True)
    # Generate into a scratch folder first so a failed run leaves the checked-in stubs untouched.
    with tempfile.TemporaryDirectory(prefix="oasr-protoc-") as scratch:
        args = [
            "grpc_tools.protoc",
            f"-I{root}",
            f"-I{_well_known_include()}",
            f"-I{_googleapis_include(Path(scratch))}",
            f"--python_out={scratch}",
            f"--pyi_out={scratch}",
            f"--grpc_python_out={scratch}",
            *names,
        ]
        status = protoc.main(args)
        if status != 0:
            raise ProtocError(f"protoc failed with status {status} on {', '.join(names)}")
        written = []
        for name in names:
            stem = Path(name).with_suffix("").as_posix()
            for suffix in _GENERATED_SUFFIXES:
                src = Path(scratch) / f"{stem}{suffix}"
                dest = out_root / f"{stem}{suffix}"
                dest.parent.mkdir(parents=True, exist_ok=True)
                if suffix == "_pb2_grpc.py":
                    text = _relative_grpc_import(src.read_text(encoding="utf-8"), name)
                    dest.write_text(text, encoding="utf-8")
                else:
                    shutil.copyfile(src, dest)
                written.append(dest)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m protos.generate", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=PROTO_ROOT,
        help="folder to write the stubs under (default: next to the .proto files, i.e. protos/)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for path in generate(args.out):
        logger.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
