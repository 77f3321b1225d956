"""English-only WeNet checkpoints declare English (from units.txt), so a request naming `en`
(which many clients always send) is served."""

from __future__ import annotations

import pytest

from engine import ASREngine, EngineConfig
from engine.errors import UnsupportedError
from engine.languages import vocabulary_language
from engine.models.wenet.testing import units_list
from engine.types import DecodingOptions


def test_a_vocabulary_spelled_with_the_english_alphabet_is_english() -> None:
    assert vocabulary_language(units_list()) == "en"
    assert vocabulary_language(["<blank>", "<unk>", *[f"▁{c}" for c in "abcdefghijklmnopqrstuvwxyz"], "'"]) == "en"
    assert vocabulary_language([*units_list(), "▁é"]) is None  # accents: another language
    assert vocabulary_language([*units_list(), "你"]) is None
    assert vocabulary_language(["▁a", "b", "<unk>"]) is None  # a toy vocabulary says nothing


def test_a_wenet_checkpoint_of_english_units_serves_language_en(wenet_ckpt: str) -> None:
    engine = ASREngine(EngineConfig(ckpt_dir=wenet_ckpt))
    try:
        assert engine.model_info.languages == ("en",)
        assert engine.validate_options(DecodingOptions(language="en")).language == "en"
        with pytest.raises(UnsupportedError, match="language 'fr'"):
            engine.validate_options(DecodingOptions(language="fr"))
    finally:
        engine.shutdown()



def test_the_reference_designs_decode_method_names_are_aliases(wenet_ckpt: str) -> None:
    engine = ASREngine(EngineConfig(ckpt_dir=wenet_ckpt, decode_method="ctc_aed_rescoring"))
    try:
        assert engine.model_info.decode_method == "attention_rescoring"
    finally:
        engine.shutdown()
    assert EngineConfig(decode_method="aed").decode_method == "autoregressive"
    assert EngineConfig(decode_method="llm").decode_method == "greedy_or_beam"
