"""The quantization object: which scheme a model's GEMMs run in, and which layers keep full precision.

`EngineConfig.quantization` takes a scheme name ('int8_w8a8') or the object of the reference
design, `{"scheme": ..., "ignore": "glob,...", "module_types": "linear,pointwise_conv",
"kv_cache": ...}`, with every value allowed as a string (the server's repeatable
`--quantization-option key=value` folds into it). `QuantizationConfig.parse` is the one place
either form is read and checked.

`ignore` names module paths kept in full precision, as globs over the names PyTorch gives the
modules (`decoder.*`, `encoder.blocks.0.*`); a glob that matches no quantizable layer of the
loaded model is refused at load, so a typo cannot silently quantize everything.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from engine.cpu_facts import INT8_DOT_PRODUCT_FLAGS, CpuFacts
from engine.errors import InvalidRequestError, UnsupportedError

QuantizationScheme = Literal["auto", "none", "int8_w8a8", "fp16", "bf16"]
SCHEMES: tuple[str, ...] = typing.get_args(QuantizationScheme)
ONLINE_SCHEMES = ("auto", "int8_w8a8")
"""Schemes that quantize layer by layer at load ('auto' may pick int8_w8a8): `ignore` and
`module_types` select among those layers. fp16/bf16 cast the whole model, 'none' nothing."""
MODULE_TYPES = ("linear", "pointwise_conv")
"""Layer kinds online quantization handles (a pointwise conv is a GEMM over channels)."""
CALIBRATED_MODULE_TYPES = ("conv1d", "conv2d")
"""Layer kinds that need activation scales calibrated offline (`oasr quantize`), not served here."""
OBJECT_KEYS = ("scheme", "ignore", "module_types", "kv_cache")


def _names(value: object, key: str) -> tuple[str, ...]:
    """A comma-separated string or a sequence of strings, as a tuple of non-empty names."""
    if isinstance(value, str):
        items: Iterable[object] = value.split(",")
    elif isinstance(value, Sequence):
        items = value
    else:
        raise InvalidRequestError(f"quantization {key} must be a comma-separated string or a list, got {value!r}")
    names = tuple(str(v).strip() for v in items)
    return tuple(n for n in names if n)


@dataclass(frozen=True)
class QuantizationConfig:
    scheme: QuantizationScheme = "auto"
    """'int8_w8a8' (int8 GEMMs, CPU), 'fp16'/'bf16' (CUDA float types), 'none', or 'auto' (the
    engine's per-device default; see EngineConfig.quantization)."""
    ignore: tuple[str, ...] = ()
    """Module-path globs kept in full precision (e.g. 'decoder.*')."""
    module_types: tuple[str, ...] = MODULE_TYPES
    """Layer kinds to quantize, among MODULE_TYPES."""
    kv_cache: str | None = None
    """KV cache storage type; None keeps the model's float type (fp8 caches are not implemented)."""

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise InvalidRequestError(f"unknown quantization scheme {self.scheme!r} (known: {', '.join(SCHEMES)})")
        selects_layers = self.ignore or tuple(self.module_types) != MODULE_TYPES
        if selects_layers and self.scheme not in ONLINE_SCHEMES:
            raise InvalidRequestError(
                f"quantization ignore and module_types select the layers int8_w8a8 quantizes; scheme "
                f"{self.scheme!r} has no layers to select")
        calibrated = [t for t in self.module_types if t in CALIBRATED_MODULE_TYPES]
        if calibrated:
            raise UnsupportedError(
                f"quantization module_types {', '.join(calibrated)} need activation scales calibrated offline "
                f"(a checkpoint written by `oasr quantize`); online quantization takes {', '.join(MODULE_TYPES)}")
        unknown = [t for t in self.module_types if t not in MODULE_TYPES]
        if unknown or not self.module_types:
            raise InvalidRequestError(
                f"quantization module_types must be among {', '.join(MODULE_TYPES)}, got {list(self.module_types)}")
        if self.kv_cache is not None:
            raise UnsupportedError(
                f"quantization kv_cache={self.kv_cache!r} is not implemented by this engine: KV caches are "
                "stored in the model's float type")

    @classmethod
    def parse(cls, value: object) -> QuantizationConfig:
        """A scheme name, the quantization object as a mapping (values may be strings), an
        instance, or None (the engine's default, 'auto')."""
        if value is None:
            return cls()
        if isinstance(value, QuantizationConfig):
            return value
        if isinstance(value, str):
            return cls(scheme=value)  # type: ignore[arg-type]  # checked in __post_init__
        if not isinstance(value, Mapping):
            raise InvalidRequestError(f"quantization must be a scheme name or an object, got {type(value).__name__}")
        unknown = sorted(set(value) - set(OBJECT_KEYS))
        if unknown:
            raise InvalidRequestError(
                f"unknown quantization key(s) {', '.join(map(repr, unknown))} (known: {', '.join(OBJECT_KEYS)})")
        if "scheme" not in value and ("ignore" in value or "module_types" in value):
            raise InvalidRequestError("quantization ignore and module_types select layers to quantize: give a scheme")
        kv_cache = value.get("kv_cache")
        return cls(
            scheme=str(value.get("scheme", "auto")),  # type: ignore[arg-type]
            ignore=_names(value.get("ignore", ()), "ignore"),
            module_types=_names(value.get("module_types", MODULE_TYPES), "module_types"),
            kv_cache=None if kv_cache in (None, "", "none", "auto") else str(kv_cache),
        )

    def quantizes(self, module_path: str, module_type: str) -> bool:
        """Whether the layer at `module_path`, of kind `module_type`, is quantized (when the scheme is)."""
        return module_type in self.module_types and not any(fnmatchcase(module_path, g) for g in self.ignore)

    def check_ignore_matches(self, module_paths: Iterable[str]) -> None:
        """Raise for an `ignore` glob that matches none of `module_paths` (the quantizable layers)."""
        paths = list(module_paths)
        for glob in self.ignore:
            if not any(fnmatchcase(p, glob) for p in paths):
                examples = ", ".join(paths[:3])
                raise InvalidRequestError(
                    f"quantization ignore glob {glob!r} matches no quantizable layer of this model "
                    f"(layers are named like {examples})")


@dataclass(frozen=True)
class QuantizationDecision:
    """Which layer scheme a model's GEMMs run in, and why (logged at load, shown in /v1/models)."""

    asked: str
    """The configured scheme ('auto' or an explicit one)."""
    scheme: str
    """What runs: 'int8_w8a8', or the float type's setting ('none', 'fp16', 'bf16')."""
    reason: str


def decide_quantization(asked: str, device_type: str, cpu: CpuFacts, int8_exact: bool) -> QuantizationDecision:
    """The scheme `asked` resolves to on this device, as a pure function of what the machine is:
    an explicit scheme always wins; 'auto' is int8_w8a8 on a CPU that has an int8 dot-product
    instruction set (cpu_facts.INT8_DOT_PRODUCT_FLAGS) and whose int8 GEMM sums full-range 8-bit
    products exactly (`int8_exact`, a correctness probe: the same answer on every start), else
    the float type. Never a timing: the same config on the same machine gives the same numbers."""
    if asked != "auto":
        return QuantizationDecision(asked, asked, "set explicitly")
    if device_type != "cpu":
        return QuantizationDecision(asked, "none", f"'auto' on {device_type} keeps the float type (see dtype)")
    isa = cpu.int8_dot_product
    if isa is None:
        return QuantizationDecision(asked, "none", f"{cpu.model_name} has none of {', '.join(INT8_DOT_PRODUCT_FLAGS)}: "
                                                   "its int8 GEMM takes a generic path, slower than float32")
    if not int8_exact:
        return QuantizationDecision(asked, "none", f"{cpu.model_name} has {isa}, but the int8 GEMM saturates "
                                                   "full-range 8-bit products (oneDNN limited below VNNI?)")
    return QuantizationDecision(asked, "int8_w8a8", f"{cpu.model_name} has {isa} and its int8 GEMM sums 8-bit "
                                                    "products exactly")


__all__ = ["MODULE_TYPES", "SCHEMES", "QuantizationConfig", "QuantizationDecision", "QuantizationScheme",
           "decide_quantization"]
