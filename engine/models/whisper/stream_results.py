"""How a live Whisper pass's result is read (streaming.py): whether it heard silence or looped,
its words (aligned over its window, punctuation alone dropped), and which of them are new rather
than committed words the window still holds, heard again.

    silent_pass(result, no_speech_threshold, prompted)   -> the pass heard silence
    looping(tokenizer, tokens)                           -> the pass wrote a few words over and over
    pass_words(parts, job, result, ...)                  -> its words, in stream seconds
    drop_reheard(words, inside)                          -> the words after the re-heard ones

Pure functions of the pass's result and the stream's committed words; what the stream then
commits, trims or decodes again is the stream's (`StreamingTranscription.on_window_done`).
"""

from __future__ import annotations

from engine.models.whisper.alignment import align_words
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.stream_output import attach_word_logprobs
from engine.models.whisper.tokenizer import WhisperTokenizer
from engine.models.whisper.transcript import COMPRESSION_RATIO_THRESHOLD, compression_ratio, is_silence
from engine.models.whisper.window import WindowJob, WindowResult
from engine.streaming.local_agreement import normalize_word
from engine.types import DecodingOptions, Word

REHEARD_TOLERANCE_S = 0.6  # a re-heard committed word ends this close to where it ended before


def silent_pass(result: WindowResult, no_speech_threshold: float, prompted: bool) -> bool:
    """Whisper's no-speech probability alone decides for a live pass (`prompted`: the stream has
    committed text, its prompt). Offline decoding also asks for a low log-probability, but a
    short window left after a committed sentence makes the model repeat its prompt fluently
    (measured: no-speech 0.9+, confident text)."""
    return is_silence(result, no_speech_threshold) or (prompted and result.no_speech_prob > no_speech_threshold)


def looping(tokenizer: WhisperTokenizer, tokens: list[int]) -> bool:
    """The pass wrote the same few words over and over (Whisper's own repetition test)."""
    text = tokenizer.decode([t for t in tokens if t < tokenizer.eot])
    return compression_ratio(text) > COMPRESSION_RATIO_THRESHOLD


def pass_words(parts: WhisperParts, job: WindowJob, result: WindowResult, options: DecodingOptions,
               language: str | None, window_start: float, forced_words: list[Word]) -> list[Word]:
    """The words `result` wrote, aligned over the pass's window (which starts at `window_start`,
    stream seconds), with their log-probabilities when `options` asks for them (`forced_words`:
    the words the pass was forced with, in order, whose values come from the passes that chose
    them)."""
    tok = parts.tokenizer
    text_tokens = [t for t in result.tokens if t < tok.eot]
    if not text_tokens or job.audio_features is None:
        return []
    sot = tok.sot_sequence(language, options.task, timestamps=False)
    words = align_words(parts.model.decoder, tok, parts.alignment_heads, sot[:-1], text_tokens,
                        job.audio_features, job.frames, window_start, job.audio_positions,
                        parts.silence_kv([job]), confidence=options.word_timestamps, cross=job.cross_kv)
    if options.logprobs:
        attach_word_logprobs(words, result, tok, forced_words)
    # punctuation alone is what tiny.en says over a pause: committing it prints ". . . ."
    return [w for w in words if any(ch.isalnum() for ch in w.word)]


def drop_reheard(words: list[Word], inside: list[Word]) -> list[Word]:
    """The words of a pass not forced with the committed words the window still holds (`inside`):
    the hypothesis after its match of the last of them (matched by text near its time), or,
    without a match, the words whose middle comes after it ends. A forced pass drops them by
    count instead (`StreamingTranscription._drop_reheard`)."""
    if not inside or not words:
        return words
    last = inside[-1]
    key = normalize_word(last.word)
    # the occurrence nearest in time: "five five" re-heard must drop only the first "five"
    matches = [(abs(w.end - last.end), i) for i, w in enumerate(words)
               if normalize_word(w.word) == key and abs(w.end - last.end) <= REHEARD_TOLERANCE_S]
    if matches:
        return words[min(matches)[1] + 1 :]
    return [w for w in words if (w.start + w.end) / 2 > last.end]
