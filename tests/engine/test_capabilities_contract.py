"""Every `DecodingOptions` field is universal or governed by a capability a family declares, and
admission refuses a value only a model with that capability would serve (engine/capabilities.py).

The field lists come from the dataclasses themselves, so a new option that is not classified (in
`UNIVERSAL` or `OPTION_CAPABILITY`) and given a sample value below fails here instead of being
ignored silently by the families that never read it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engine.capabilities import OPTION_CAPABILITY, SERVED_WITHOUT, UNIVERSAL, Capabilities, check_capabilities
from engine.errors import UnsupportedError
from engine.types import DecodingOptions

FIELDS = [f.name for f in dataclasses.fields(DecodingOptions)]

ASKING: dict[str, dict[str, Any]] = {
    "beam_size": {"beam_size": 2},
    "n_best": {"beam_size": 2, "n_best": 2},
    "temperature": {"temperature": 0.5},
    "temperature_fallback": {},  # served at both values everywhere (SERVED_WITHOUT)
    "best_of": {"best_of": 2},
    "top_k": {"top_k": 5},
    "top_p": {"top_p": 0.9},
    "seed": {"seed": 0},
    "language": {"language": "fr"},
    "task": {"task": "translate"},
    "prompt": {"prompt": "hello"},
    "word_timestamps": {"word_timestamps": True},
    "max_new_tokens": {"max_new_tokens": 8},
    "no_speech_threshold": {"no_speech_threshold": 0.3},
    "condition_on_previous_text": {},  # served at both values everywhere (SERVED_WITHOUT)
    "keywords": {"keywords": ("Kubernetes",)},
    "logprobs": {"logprobs": True},
    "delay": {"delay": "low"},
    "stream_context": {"stream_context": (8, 4, 2)},
}
"""For each field, options that ask for its capability ({}: no value can, see SERVED_WITHOUT)."""

FULL = Capabilities(max_beam_size=30, max_n_best=30, **{
    f.name: True for f in dataclasses.fields(Capabilities) if f.type == "bool"})
"""A model that can do everything."""


def check(caps: Capabilities, options: DecodingOptions) -> None:
    options.validate()
    check_capabilities(caps, family="test", model="m", languages=("en",), options=options)


def test_every_field_is_universal_or_governed_by_one_capability() -> None:
    unclassified = [name for name in FIELDS if name not in UNIVERSAL and name not in OPTION_CAPABILITY]
    assert not unclassified, f"classify in engine/capabilities.py (UNIVERSAL or OPTION_CAPABILITY): {unclassified}"
    assert not UNIVERSAL & OPTION_CAPABILITY.keys()
    assert set(OPTION_CAPABILITY) | UNIVERSAL == set(FIELDS)  # no stale names either
    capabilities = {f.name for f in dataclasses.fields(Capabilities)}
    assert set(OPTION_CAPABILITY.values()) == capabilities  # each names a flag, and no flag governs nothing
    assert set(SERVED_WITHOUT) <= set(OPTION_CAPABILITY)


def test_every_field_has_a_sample_here() -> None:
    assert set(ASKING) == set(FIELDS), "give the new option a value that asks for its capability in ASKING"


@pytest.mark.parametrize("name", [n for n in FIELDS if n in OPTION_CAPABILITY and ASKING[n]])
def test_a_model_without_the_capability_refuses_the_option_by_name(name: str) -> None:
    options = DecodingOptions(**ASKING[name])
    check(FULL, options)
    lacking = dataclasses.replace(FULL, **{OPTION_CAPABILITY[name]: 1 if name in ("beam_size", "n_best") else False})
    if name == "n_best":  # the beam it needs is there, the alternatives are not
        lacking = dataclasses.replace(lacking, max_beam_size=2)
    with pytest.raises(UnsupportedError, match=r"is not supported by the test model 'm': ") as refused:
        check(lacking, options)
    assert str(refused.value).startswith(name if name not in ("language", "task") else ("language", "task="))


def test_defaults_and_values_a_model_does_anyway_are_served_by_the_most_restrictive_model() -> None:
    check(Capabilities(), DecodingOptions())
    for name, values in SERVED_WITHOUT.items():
        for value in values:
            check(Capabilities(), DecodingOptions(**{name: value}))
    # what clients send without choosing: their own defaults, and the model's one language
    check(Capabilities(), DecodingOptions(temperature_fallback=True, condition_on_previous_text=True, best_of=5,
                                          no_speech_threshold=0.6, language="en", task="transcribe"))


def test_the_first_refused_option_is_named_in_the_tables_order() -> None:
    with pytest.raises(UnsupportedError, match=r"^temperature is"):
        check(Capabilities(), DecodingOptions(temperature=0.5, delay="low", max_new_tokens=8))
    with pytest.raises(UnsupportedError, match=r"^max_new_tokens is"):
        check(Capabilities(), DecodingOptions(delay="low", max_new_tokens=8))
