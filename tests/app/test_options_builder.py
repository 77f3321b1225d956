"""Every surface builds `DecodingOptions` through `app/requests.build_options` and normalises a
language with `engine.languages.language_code`: the same parameters mean the same options on
every surface, and a client's default-valued fields ask for nothing."""

from __future__ import annotations

import dataclasses

import pytest

from app.deepgram.params import QueryError, parse_params
from app.google.convert import decoding_options as google_options
from app.realtime.config import TranscriptionConfig
from app.realtime.events import ProtocolError
from app.realtime.options import decoding_options as realtime_options
from app.requests import OPTION_FIELDS, build_options
from engine import DecodingOptions
from engine.errors import InvalidRequestError
from protos.oasr.speech.v1 import speech_pb2 as pb


class Admits:
    """An engine that admits whatever it is given (the capability check has its own tests)."""

    def validate_options(self, decoding: DecodingOptions | None, streaming: bool = False) -> DecodingOptions:
        assert decoding is not None
        return decoding


def realtime(tc: TranscriptionConfig, logprobs: bool = False) -> DecodingOptions:
    return realtime_options(tc, logprobs=logprobs, engine=Admits(), served_model_name=None, param="session")


def deepgram_language(tag: str) -> str | None:
    return parse_params([("language", tag)], default_endpointing_ms=300).language


LANGUAGES = [("en-US", "en"), ("pt_BR", "pt"), ("DE", "de"), ("zh-Hans-CN", "zh"), ("yue", "yue")]


@pytest.mark.parametrize(("tag", "code"), LANGUAGES)
def test_a_language_tag_means_the_same_code_on_every_surface(tag: str, code: str) -> None:
    assert build_options(language=tag).language == code  # OpenAI, Google REST query, the CLI
    assert google_options(pb.RecognitionConfig(language_code=tag)).language == code
    assert realtime(TranscriptionConfig(language=tag)).language == code
    assert realtime(TranscriptionConfig(languages=(tag,))).language == code
    assert deepgram_language(tag) == code


@pytest.mark.parametrize("tag", ["english!", "e1", "-US"])
def test_a_bad_language_is_refused_on_every_surface(tag: str) -> None:
    with pytest.raises(InvalidRequestError, match="BCP-47"):
        build_options(language=tag)
    with pytest.raises(InvalidRequestError, match="language_code"):
        google_options(pb.RecognitionConfig(language_code=tag))
    with pytest.raises(ProtocolError, match="BCP-47"):
        realtime(TranscriptionConfig(language=tag))
    with pytest.raises(QueryError, match="BCP-47"):
        deepgram_language(tag)


def test_default_valued_fields_ask_for_nothing() -> None:
    """What client libraries send unasked (proto3 zero values, empty strings, temperature 0) are
    the engine's defaults, so no capability refusal can fire on them."""
    assert google_options(pb.RecognitionConfig(decoding=pb.DecodingExtensions(), max_alternatives=1)) == DecodingOptions()
    assert build_options(task="", language="", prompt="", temperature=0.0, beam_size=0) == DecodingOptions()
    assert realtime(TranscriptionConfig(model="whisper-1", prompt="")) == DecodingOptions()


def test_google_and_realtime_pass_options_through_by_name() -> None:
    """Their fields named like a DecodingOptions field need no converter line: every
    DecodingExtensions field and every realtime transcription field is an option, or one the
    surface resolves itself (a model name, a list of languages)."""
    assert {f.name for f in pb.DecodingExtensions.DESCRIPTOR.fields} <= OPTION_FIELDS
    assert {f.name for f in dataclasses.fields(TranscriptionConfig)} - OPTION_FIELDS == {"model", "languages"}
    ext = pb.DecodingExtensions(beam_size=4, temperature=0.5, prompt="hi", top_k=5, top_p=0.5, max_new_tokens=9,
                                seed=0, delay="low", task=pb.DecodingExtensions.TRANSLATE,
                                stream_context=pb.StreamContext(left=8, chunk=4, right=2))
    assert google_options(pb.RecognitionConfig(decoding=ext)) == DecodingOptions(
        beam_size=4, temperature=0.5, prompt="hi", top_k=5, top_p=0.5, max_new_tokens=9, seed=0, delay="low",
        task="translate", stream_context=(8, 4, 2))
    tc = TranscriptionConfig(prompt="hi", keywords=("OASR",), delay="high", stream_context=(8, 4, 2))
    assert realtime(tc, logprobs=True) == DecodingOptions(prompt="hi", keywords=("OASR",), delay="high",
                                                          stream_context=(8, 4, 2), logprobs=True)
