"""Named workloads. A profile fixes the dataset, the seed, and every kind's size; resolving
it fills each kind's defaults so run.json records exactly what ran.

    selftest  mock + synthetic: the suite tests itself in seconds (runs in `make test`)
    smoke     every kind at toy size on the speech set: under 3 minutes per backend on 2 cores
    standard  sizes meant for real comparisons
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from benchmarks.asrbench.kinds import KINDS


class ProfileError(ValueError):
    pass


PROFILES: dict[str, dict[str, Any]] = {
    "selftest": {
        "description": "mock backend on synthetic audio; checks the suite end to end in seconds",
        "dataset": "synthetic",
        "max_clip_s": 30.0,
        "seed": 0,
        "kinds": {
            "cold_start": {"repeats": 1, "timeout_s": 60.0},
            "single": {"warmup": 1, "requests": 6},
            "batch": {"sizes": [1, 3], "repeats": 2, "warmup": 1},
            "throughput": {"requests": 8, "repeats": 3, "warmup": 1},
            "load": {"closed": [1, 2], "open_fractions": [0.5], "requests": 6, "warmup": 1},
            "longform": {"dataset": "longform-synthetic", "warmup": 0, "repeats": 1},
            "streaming": {"modes": ["paced", "unpaced"], "chunk_ms": 100, "count": 2, "sessions": 1,
                          "warmup": 1, "timeout_s": 30.0},
        },
    },
    "smoke": {
        "description": "every kind at toy size on the speech set (minutes per backend on 2 cores)",
        "dataset": "speech",
        "max_clip_s": 12.0,
        "seed": 0,
        "kinds": {
            "cold_start": {"repeats": 1, "timeout_s": 300.0},
            "single": {"warmup": 1, "requests": 4},
            "batch": {"sizes": [1, 4], "repeats": 1, "warmup": 0},
            "throughput": {"requests": 4, "repeats": 2, "warmup": 0},
            "load": {"closed": [1, 2], "open_fractions": [0.5], "requests": 4, "warmup": 0},
            "longform": {"dataset": "longform-speech-short", "warmup": 0, "repeats": 1},
            "streaming": {"modes": ["paced", "unpaced"], "chunk_ms": 200, "count": 1, "sessions": 1,
                          "warmup": 1, "timeout_s": 300.0},
        },
    },
    "standard": {
        "description": "sizes for real comparisons (tens of minutes per backend on 2 cores)",
        "dataset": "speech",
        "max_clip_s": 30.0,
        "seed": 0,
        "kinds": {
            "cold_start": {"repeats": 3, "timeout_s": 300.0},
            "single": {"warmup": 2, "requests": 24},
            "batch": {"sizes": [1, 4, 8, 16], "repeats": 3, "warmup": 1},
            "throughput": {"requests": 48, "repeats": 3, "warmup": 1},
            "load": {"closed": [1, 2, 4, 8], "open_fractions": [0.25, 0.5, 0.75, 0.9], "requests": 24,
                     "warmup": 1},
            "longform": {"dataset": "longform-speech", "warmup": 0, "repeats": 2},
            "streaming": {"modes": ["paced", "unpaced"], "chunk_ms": 200, "count": 8, "sessions": 4,
                          "warmup": 1, "timeout_s": 300.0},
        },
    },
}


def names() -> list[str]:
    return list(PROFILES)


def resolve(name: str, only: list[str] | None = None) -> dict[str, Any]:
    """The profile with every kind's defaults filled in (what run.json records); `only` keeps
    just those kinds (part of the workload hash, so such runs compare only with each other)."""
    if name not in PROFILES:
        raise ProfileError(f"unknown profile {name!r}; known: {names()}")
    profile = copy.deepcopy(PROFILES[name])
    if only:
        missing = set(only) - set(profile["kinds"])
        if missing:
            raise ProfileError(f"profile {name} has no kinds {sorted(missing)}; it has {list(profile['kinds'])}")
        profile["kinds"] = {k: v for k, v in profile["kinds"].items() if k in only}
    kinds = {}
    for kind, overrides in profile["kinds"].items():
        if kind not in KINDS:
            raise ProfileError(f"profile {name}: unknown kind {kind!r}")
        unknown = set(overrides) - set(KINDS[kind][1])
        if unknown:
            raise ProfileError(f"profile {name}: kind {kind} has no settings {sorted(unknown)}")
        kinds[kind] = {**copy.deepcopy(KINDS[kind][1]), **overrides}
    profile["kinds"] = kinds
    profile["name"] = name
    return profile


def workload_hash(profile: dict[str, Any], dataset_ids: dict[str, str]) -> str:
    """Same hash = same audio, same sizes, same seed: the precondition of a compare."""
    payload = {"kinds": profile["kinds"], "seed": profile["seed"], "max_clip_s": profile.get("max_clip_s"),
               "datasets": dict(sorted(dataset_ids.items()))}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
