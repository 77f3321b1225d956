"""The quantization object (engine/quantization.py): the reference design's `{"scheme", "ignore",
"module_types", "kv_cache"}` read from a scheme name or a mapping of strings, and every option
the engine cannot serve refused with a reason."""

from __future__ import annotations

import re

import pytest

from engine import EngineConfig
from engine.errors import InvalidRequestError, UnsupportedError
from engine.quantization import MODULE_TYPES, QuantizationConfig


def test_a_scheme_name_and_none_are_objects() -> None:
    assert QuantizationConfig.parse("int8_w8a8") == QuantizationConfig(scheme="int8_w8a8")
    assert QuantizationConfig.parse(None) == QuantizationConfig(scheme="auto")
    assert EngineConfig().quantization_config() == QuantizationConfig()


def test_the_object_takes_strings_as_the_server_sends_them() -> None:
    q = QuantizationConfig.parse({"scheme": "int8_w8a8", "ignore": "ctc.*, decoder.*", "module_types": "linear",
                                  "kv_cache": "none"})
    assert q == QuantizationConfig(scheme="int8_w8a8", ignore=("ctc.*", "decoder.*"), module_types=("linear",))
    assert QuantizationConfig.parse({"scheme": "auto", "ignore": ["decoder.*"]}).ignore == ("decoder.*",)


def test_ignore_globs_keep_module_paths_in_full_precision() -> None:
    q = QuantizationConfig(scheme="int8_w8a8", ignore=("decoder.*", "encoder.blocks.0.*"))
    assert not q.quantizes("decoder.blocks.1.attn.query", "linear")
    assert not q.quantizes("decoder.output_projection", "linear")
    assert not q.quantizes("encoder.blocks.0.mlp.0", "linear")
    assert q.quantizes("encoder.blocks.1.mlp.0", "linear")
    assert not QuantizationConfig(scheme="int8_w8a8", module_types=("pointwise_conv",)).quantizes("a.b", "linear")
    assert QuantizationConfig().module_types == MODULE_TYPES


def test_an_ignore_glob_that_matches_nothing_is_refused() -> None:
    q = QuantizationConfig(scheme="int8_w8a8", ignore=("decodr.*",))
    with pytest.raises(InvalidRequestError, match=re.escape("'decodr.*' matches no quantizable layer")):
        q.check_ignore_matches(["encoder.blocks.0.attn.query", "decoder.blocks.0.attn.query"])
    QuantizationConfig(scheme="int8_w8a8", ignore=("decoder.*",)).check_ignore_matches(["decoder.blocks.0.mlp.0"])


@pytest.mark.parametrize(("value", "error", "match"), [
    ("int4", InvalidRequestError, "unknown quantization scheme 'int4'"),
    ({"scheme": "int8_w8a8", "group_size": "128"}, InvalidRequestError, "unknown quantization key"),
    ({"ignore": "decoder.*"}, InvalidRequestError, "give a scheme"),
    ({"scheme": "fp16", "ignore": "decoder.*"}, InvalidRequestError, "has no layers to select"),
    ({"scheme": "none", "module_types": "linear"}, InvalidRequestError, "has no layers to select"),
    ({"scheme": "int8_w8a8", "module_types": "conv1d"}, UnsupportedError, "calibrated offline"),
    ({"scheme": "int8_w8a8", "module_types": "attention"}, InvalidRequestError, "must be among"),
    ({"scheme": "int8_w8a8", "kv_cache": "fp8_e4m3"}, UnsupportedError, "kv_cache='fp8_e4m3' is not implemented"),
    (8, InvalidRequestError, "scheme name or an object"),
])
def test_options_the_engine_cannot_serve_are_refused_at_validation(value: object, error: type[Exception],
                                                                   match: str) -> None:
    with pytest.raises(error, match=match):
        EngineConfig(quantization=value).validate()  # type: ignore[arg-type]
