"""The request's chat: what the speech-LLM is asked, rendered as its chat template renders it.

Two layouts, both ChatML (system turn, user turn, open assistant turn), rendered without a
template engine: the layout is fixed, only the text varies.
- Qwen2-Audio (instruct): a default system turn; the user turn holds the audio, then context
  lines (`prompt` as previous text, `keywords`) and an instruction naming the `language`.
- Qwen3-ASR: the system turn holds the request's context and is always there (empty without
  context): the published template renders `<|im_start|>system\n{context}<|im_end|>\n` whatever the
  chat holds, and the `qwen-asr` package always sends a system message (`context or ""`). The
  request's `prompt` is that context as given (the reference design's per-request prompt override,
  `qwen-asr`'s `context`); `keywords` follow it on a line of their own. The user turn is the audio
  alone; a `language` is forced by opening the assistant turn with `language <Name><asr_text>` (the
  model writes that header itself otherwise).
tools/speechllm_fixtures.py renders the same messages with the published Jinja templates through
Transformers' processors, and the parity tests compare the token ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.types import DecodingOptions

SYSTEM_PROMPT = "You are a helpful assistant."
"""The templates' default system turn (used when the request brings none)."""
AUDIO_BOS = "<|audio_bos|>"
AUDIO_EOS = "<|audio_eos|>"
AUDIO_PAD = "<|AUDIO|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
QWEN3_AUDIO_START = "<|audio_start|>"
QWEN3_AUDIO_END = "<|audio_end|>"
QWEN3_AUDIO_PAD = "<|audio_pad|>"
ASR_TEXT = "<asr_text>"
"""Qwen3-ASR: ends the `language <Name>` header; the transcript follows."""

LANGUAGE_NAMES = {
    "ar": "Arabic", "yue": "Cantonese", "zh": "Chinese", "cs": "Czech", "da": "Danish", "nl": "Dutch",
    "en": "English", "fil": "Filipino", "fi": "Finnish", "fr": "French", "de": "German", "el": "Greek",
    "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "mk": "Macedonian", "ms": "Malay", "fa": "Persian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "es": "Spanish", "sv": "Swedish", "th": "Thai", "tr": "Turkish", "vi": "Vietnamese",
}  # fmt: skip
"""Languages a request may name (ISO 639 code -> the name the prompt uses): Qwen3-ASR's forced-
language names (its processor's table)."""


def context_lines(options: DecodingOptions) -> list[str]:
    """`prompt` (previous text) and `keywords` as context for the model."""
    lines = []
    if options.prompt:
        lines.append(f"Previous text: {options.prompt}")
    if options.keywords:
        lines.append(f"Keywords: {', '.join(options.keywords)}")
    return lines


def user_instruction(options: DecodingOptions) -> str:
    """Qwen2-Audio: the user turn's text after the audio."""
    language = LANGUAGE_NAMES.get(options.language or "")
    instruction = f"Transcribe the audio in {language}." if language else "Transcribe the audio."
    return "\n".join([*context_lines(options), instruction])


@dataclass(frozen=True)
class Qwen3ASRPrompt:
    """One Qwen3-ASR request's chat: the context system turn, the audio, a forced language."""

    context: str
    """The system turn's text ("" without context: the turn is rendered empty, never left out)."""
    language: str | None
    """The language's name (forced), or None (the model names it)."""

    @classmethod
    def from_options(cls, options: DecodingOptions) -> Qwen3ASRPrompt:
        lines = [options.prompt] if options.prompt else []
        if options.keywords:
            lines.append(", ".join(options.keywords))
        return cls("\n".join(lines), LANGUAGE_NAMES.get(options.language or ""))

    def render(self) -> tuple[str, str]:
        before = f"{IM_START}system\n{self.context}{IM_END}\n{IM_START}user\n{QWEN3_AUDIO_START}"
        header = f"language {self.language}{ASR_TEXT}" if self.language else ""
        return before, f"{QWEN3_AUDIO_END}{IM_END}\n{IM_START}assistant\n{header}"


@dataclass(frozen=True)
class PromptSpec:
    """One request's chat: a system turn and a user turn holding one audio clip and text."""

    instruction: str
    system: str = SYSTEM_PROMPT

    @classmethod
    def from_options(cls, options: DecodingOptions) -> PromptSpec:
        return cls(user_instruction(options))

    def messages(self) -> list[dict[str, Any]]:
        """The chat as Transformers' `apply_chat_template` takes it (for fixtures)."""
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": self.instruction}]},
        ]

    def render(self) -> tuple[str, str]:
        """ChatML text before and after the audio placeholder (which the audio's embeddings replace)."""
        before = (f"{IM_START}system\n{self.system}{IM_END}\n"
                  f"{IM_START}user\nAudio 1: {AUDIO_BOS}")
        after = f"{AUDIO_EOS}\n{self.instruction}{IM_END}\n{IM_START}assistant\n"
        return before, after
