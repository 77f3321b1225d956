"""Random-weight checkpoints of realistic size, one per family that has a writer: what the capacity
and speed benchmarks load when no trained checkpoint is at hand (nothing is downloaded here).

Each writer lives in its family's own `testing` module and is imported by name when used, as
`engine/families.py` imports the families: callers name a model here and never a family's
internals. The weights are random, so transcripts are meaningless, but every tensor has its real
shape and every step its real cost.

    ckpt_dir = write_checkpoint("zipformer", "/tmp/zipformer-small")
    ASREngine(EngineConfig(ckpt_dir=ckpt_dir, service_mode="streaming"))
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SyntheticModel:
    family: str
    module: str
    """The family's module whose `write_realistic(ckpt_dir, **kwargs)` writes it."""
    shape: str
    """What it is sized like (shown in benchmark tables)."""
    kwargs: dict[str, Any] = field(default_factory=dict)


SYNTHETIC: dict[str, SyntheticModel] = {
    "nemo": SyntheticModel("nemo", "engine.models.nemo.testing",
                           "cache-aware hybrid FastConformer, d_model 256 x 16 layers, look-aheads 1120/560/160/80 ms"),
    "nemo-buffered": SyntheticModel("nemo", "engine.models.nemo.testing",
                                    "buffered (chunked_limited_with_rc) FastConformer, d_model 256 x 16 layers",
                                    {"buffered": True}),
    "wenet": SyntheticModel("wenet", "engine.models.wenet.testing",
                            "U2++ Conformer-CTC, d 256 x 6 blocks, FFN 1024 (~11 M parameters)"),
    "zipformer": SyntheticModel("zipformer", "engine.models.zipformer.testing",
                                "icefall Zipformer2 'small', causal (~23 M parameters)"),
    "paraformer": SyntheticModel("paraformer", "engine.models.paraformer.testing",
                                 "FunASR paraformer-large (SAN-M 50 + 16 blocks, d 512, vocabulary 8404)"),
    "paraformer-online": SyntheticModel("paraformer", "engine.models.paraformer.testing",
                                        "FunASR paraformer-zh-streaming (SAN-M chunk 50 + 16 blocks, d 512)",
                                        {"online": True}),
}


def write_checkpoint(name: str, ckpt_dir: str) -> str:
    """Write the synthetic model `name` (a key of SYNTHETIC) into `ckpt_dir`; returns the directory
    to give `EngineConfig.ckpt_dir`."""
    if name not in SYNTHETIC:
        raise KeyError(f"no synthetic model {name!r} (known: {', '.join(SYNTHETIC)})")
    model = SYNTHETIC[name]
    os.makedirs(ckpt_dir, exist_ok=True)
    return str(importlib.import_module(model.module).write_realistic(ckpt_dir, **model.kwargs))


__all__ = ["SYNTHETIC", "SyntheticModel", "write_checkpoint"]
