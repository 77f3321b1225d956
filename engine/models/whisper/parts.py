"""The loaded model's parts, as one value: what window owners, the planner and the runner need
(model, tokenizer, dims, logit rules, device), passed down instead of a pointer to the runner."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from engine.config import EngineConfig
from engine.device import resolve_device, resolve_dtype
from engine.errors import InvalidRequestError, UnsupportedError
from engine.log_mel import LogMelExtractor
from engine.models.whisper.build import build_model
from engine.models.whisper.context import ContextEncoder
from engine.models.whisper.decoding import TokenRules
from engine.models.whisper.describe import WhisperSize
from engine.models.whisper.model import Whisper, WhisperDims
from engine.models.whisper.tokenizer import WhisperTokenizer
from engine.models.whisper.window import WindowJob
from engine.types import DecodingOptions


@dataclass(frozen=True)
class WhisperParts:
    model: Whisper
    tokenizer: WhisperTokenizer
    dims: WhisperDims
    rules: TokenRules
    device: torch.device
    dtype: torch.dtype
    alignment_heads: tuple[tuple[int, int], ...]
    """(decoder layer, head) pairs whose cross-attention aligns words with audio."""
    features: LogMelExtractor
    context: ContextEncoder
    checkpoint_format: str
    quantization: str
    """What the weights run as: 'int8_w8a8', or the float type's quantization setting ('none', 'fp16', 'bf16')."""
    quantization_reason: str
    """Why (engine/quantization.py `decide_quantization`): shown in /v1/models beside the scheme."""

    @classmethod
    def load(cls, config: EngineConfig) -> WhisperParts:
        device = resolve_device(config)
        dtype = resolve_dtype(config, device)
        model, ckpt, decision = build_model(config.resolved_ckpt_dir(), config, device, dtype)
        assert ckpt.tokenizer_file is not None  # load_checkpoint refuses a directory without one
        dims = ckpt.dims
        size = WhisperSize(dims.n_audio_state, dims.n_vocab)
        tokenizer = WhisperTokenizer(ckpt.tokenizer_file, dims.n_vocab, size.languages, size.multilingual)
        # without a table, every head of the upper half of the decoder (openai's default)
        heads = ckpt.alignment_heads or [(layer, head) for layer in range(dims.n_text_layer // 2, dims.n_text_layer)
                                         for head in range(dims.n_text_head)]
        rules = TokenRules.for_tokenizer(tokenizer, dims.n_vocab, ckpt.suppress_ids, ckpt.suppress_ids_begin, device)
        return cls(model=model, tokenizer=tokenizer, dims=dims, rules=rules, device=device, dtype=dtype,
                   alignment_heads=tuple(heads), features=LogMelExtractor(dims.n_mels, device),
                   context=ContextEncoder(model.encoder, model.decoder), checkpoint_format=ckpt.format,
                   quantization=decision.scheme, quantization_reason=decision.reason)

    @property
    def multilingual(self) -> bool:
        return self.size.multilingual

    @property
    def size(self) -> WhisperSize:
        return WhisperSize(self.dims.n_audio_state, self.dims.n_vocab)

    @property
    def model_name(self) -> str:
        return self.size.model_name

    def silence_kv(self, jobs: Sequence[WindowJob]) -> tuple[list[Tensor], list[Tensor]] | None:
        """The decoder's cross K/V of encoded silence, once any job holds a short ('fit') context."""
        if all(j.audio_positions >= self.dims.n_audio_ctx for j in jobs):
            return None
        return self.context.silence_kv(jobs[0].mel)

    def check_options(self, options: DecodingOptions) -> None:
        """Raise for options this checkpoint cannot serve (translation or another language on an
        English-only model, an unknown language, a prompt over half the text context)."""
        if options.task == "translate" and not self.multilingual:
            raise UnsupportedError(
                f"model {self.model_name} is English-only: task='translate' needs a multilingual checkpoint"
            )
        if options.language is not None:
            lang = options.language.lower()
            if not self.multilingual and lang != "en":
                raise UnsupportedError(
                    f"model {self.model_name} is English-only: language {options.language!r} is not supported "
                    "(use 'en' or a multilingual checkpoint)"
                )
            if self.multilingual and lang not in self.tokenizer.language_tokens:
                raise InvalidRequestError(f"unknown language {options.language!r}")
        half_ctx = self.dims.n_text_ctx // 2
        if options.prompt is not None and len(self.tokenizer.encode(options.prompt)) > half_ctx:
            raise InvalidRequestError(f"prompt is longer than {half_ctx} tokens")
        keywords = len(self.tokenizer.keyword_tokens(options.keywords))
        if keywords > half_ctx // 2:  # they head every window's prompt: leave room for the text
            raise InvalidRequestError(f"keywords take {keywords} tokens; at most {half_ctx // 2} fit Whisper's prompt")

    def detect_languages(self, audio_features: list[Tensor]) -> list[str]:
        """The most likely language code of each window (S, C), from the decoder's first step."""
        if not audio_features:
            return []
        decoder = self.model.decoder
        cache = decoder.new_cache(torch.stack(audio_features), capacity=1)
        tok = torch.full((len(audio_features), 1), self.tokenizer.sot, device=self.device)
        logits = decoder(tok, torch.zeros_like(tok), cache)[:, 0]
        lang_ids = torch.tensor(list(self.tokenizer.language_tokens.values()), device=self.device)
        codes = list(self.tokenizer.language_tokens)
        return [codes[b] for b in logits[:, lang_ids].argmax(dim=-1).tolist()]
