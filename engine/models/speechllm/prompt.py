"""The request's chat: what the speech-LLM is asked, rendered as its chat template renders it.

A request's options become one user turn: the audio, then an instruction in text. `prompt`
(previous text) and `keywords` go in as context lines before the instruction; `language` names
the language to transcribe in. The turn is rendered in ChatML, the layout of the Qwen audio
models' chat templates (system turn, user turn, open assistant turn), without a template engine:
the layout is fixed, only the text varies. tools/speechllm_fixtures.py renders the same messages
with the checkpoint's own Jinja template and the parity test compares the token ids.
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

LANGUAGE_NAMES = {
    "en": "English", "zh": "Chinese", "yue": "Cantonese", "de": "German", "fr": "French", "es": "Spanish",
    "it": "Italian", "pt": "Portuguese", "ru": "Russian", "ja": "Japanese", "ko": "Korean", "ar": "Arabic",
    "nl": "Dutch", "tr": "Turkish", "vi": "Vietnamese", "th": "Thai", "id": "Indonesian", "hi": "Hindi",
}  # fmt: skip
"""Languages a request may name (ISO 639 code -> the name the instruction uses)."""


def user_instruction(options: DecodingOptions) -> str:
    """The user turn's text after the audio."""
    lines = []
    if options.prompt:
        lines.append(f"Previous text: {options.prompt}")
    if options.keywords:
        lines.append(f"Keywords: {', '.join(options.keywords)}")
    language = LANGUAGE_NAMES.get(options.language or "")
    lines.append(f"Transcribe the audio in {language}." if language else "Transcribe the audio.")
    return "\n".join(lines)


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
