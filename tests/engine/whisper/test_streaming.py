"""Whisper live streaming in the engine, on the embedded tiny.en and real clips.

- The 'fit' encoder context (context.py) and the decoder's shared-silence cross-attention are
  exact rewrites of "encode the window, fill the rest of 30 s with encoded silence": checked
  against the dense computation.
- Streams fed at simulated real-time pace (500 ms of audio, then every pass that audio
  triggers runs to completion: a machine that keeps up) end with transcripts close to the
  offline ones, commit text that never changes, and do not repeat their prompt.
- Streams fed in uneven blocks (a loaded server runs a pass every 0.5-2.5 s of audio) lose no
  speech where their windows are trimmed, and a final pass starts from what earlier passes heard.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from tests.conftest import NUMERIC_PATHS, Clip, wer

logger = logging.getLogger(__name__)

pytestmark = pytest.mark.slow  # ~2 min: every dev clip streamed pass by pass, in one module

STEP_SAMPLES = 8000  # 500 ms, the default WhisperOptions.stream_step_ms
MAX_CLIP_S = 15.0  # the long-form recordings are left to the benchmark (a minute of passes each)
WER_SLACK = 4.5
"""Points over offline. Measured (see the test's docstring) 1.5 on these clips for float32 and for
int8 with float32 cross K/V; but tiny.en's live passes over "word, word, word" flip on the last
bit: multiplying the cross K/V by (1 + 1e-5 * N(0, 1)) gave live 16.42 % and 14.43 % (two seeds,
int8, offline unmoved at 12.44 %), float16 cross K/V (the int8 path's) 15.92 %: one clip's extra
"word"s are six of these 201 words. The failures the bound is for cost tens of points."""


def _live_engine(quantization: str) -> Any:
    from engine import ASREngine, EngineConfig

    return ASREngine(EngineConfig(service_mode="streaming", max_batch_size=1, quantization=quantization))


@pytest.fixture(scope="module")
def live_engine() -> Any:
    """The module's live engine, float32; the live-vs-offline bound also runs on int8."""
    eng = _live_engine("none")
    yield eng
    eng.shutdown()


def stream_at_pace(
    engine: Any, audio: np.ndarray, blocks: list[int] | None = None,
    after_block: Callable[[str, int], None] | None = None,
) -> list[Any]:
    """Every output of one stream fed 500 ms at a time (or in the given block sizes), each
    block's passes run to completion (then `after_block(request_id, samples fed)`, if given)."""
    rid = engine.add_streaming_request()
    outputs: list[Any] = []
    sizes = iter(blocks or [])
    off = 0
    while off < audio.size:
        n = next(sizes, STEP_SAMPLES)
        engine.feed_chunk(rid, audio[off : off + n], is_last=off + n >= audio.size)
        off += n
        while engine.has_work():
            outputs.extend(o for o in engine.step() if o.request_id == rid)
        if after_block is not None:
            after_block(rid, off)
    assert outputs and outputs[-1].finished, "the stream did not end"
    return outputs


@pytest.fixture(scope="module")
def live_outputs(live_engine: Any, clips: list[Clip]) -> dict[str, list[Any]]:
    return {c.id: stream_at_pace(live_engine, c.audio) for c in clips if c.text and c.duration <= MAX_CLIP_S}


def test_fit_context_is_the_silence_filled_encoding_with_pooled_silence_keys(live_engine: Any, clips: list[Clip]) -> None:
    from engine.models.whisper.context import fit_frames
    from engine.models.whisper.model import AttentionContext

    runner = live_engine.runner
    encoder = runner.model.encoder
    context = runner.context_encoder
    torch.manual_seed(0)
    speech = next(c for c in clips if c.text and 3.0 <= c.duration <= 8.0)
    mel = runner.parts.features([speech.audio])[0]
    short = torch.zeros(runner.dims.n_mels, fit_frames(mel.shape[1] - 1))
    short[:, : mel.shape[1] - 1] = mel[:, :-1]
    other = torch.randn(runner.dims.n_mels, fit_frames(700)) * 0.5
    positions = short.shape[1] // 2
    with torch.inference_mode():
        alone = context.encode([short])[0]
        together = context.encode([other, short])[1]
        silence = context.silence(short)
        pooled = context.silence_after(short, positions)
        own = encoder(short[None], pooled)[0]
        dense = [AttentionContext(k[:, positions:], v[:, positions:]) for k, v in context.silence_layers(short)]
        exact = encoder(short[None], dense)[0]
        # a window of padding attends to the rest of the padding as a 30 s window of padding does
        padding = encoder(torch.zeros_like(short)[None], pooled)[0]
        padding_exact = encoder(torch.zeros_like(short)[None], dense)[0]
        truncated = encoder(short[None])[0]  # whisper.cpp's audio_ctx: no silence after the window
    assert alone.shape == silence.shape == (runner.dims.n_audio_ctx, runner.dims.n_audio_state)
    torch.testing.assert_close(alone[:positions], own)
    torch.testing.assert_close(alone[positions:], silence[positions:])
    assert torch.equal(alone, together), "a window's encoding must not depend on its batchmates"
    assert sum(c.k.shape[1] for c in pooled) < sum(c.k.shape[1] for c in dense) / 5
    # pooled silence keys move the encoding a little; leaving the silence out moves it far
    moved = float((own - exact).norm() / exact.norm())
    assert moved < 0.1
    assert moved < float((truncated - exact).norm() / exact.norm()) / 2
    # all but the last position: there the convolution sees the window's edge, not more padding
    scale = float(silence.abs().max())
    assert float((padding_exact[:-1] - silence[: positions - 1]).abs().max()) <= 1e-4 * scale
    assert float((padding[:-1] - silence[: positions - 1]).norm() / silence[: positions - 1].norm()) < 0.1


@pytest.mark.parametrize("queries", [1, 6], ids=["step", "prefill"])
@pytest.mark.parametrize("shared_silence", [True, False], ids=["live", "offline"])
def test_shared_silence_cross_attention_matches_dense_attention(live_engine: Any, queries: int,
                                                               shared_silence: bool) -> None:
    """Windows holding only their own positions and attending to the one shared copy of the
    silence attend as if each held its whole 30 s context: live rows in one batched softmax for a
    step, every path in calls per window length for a prefill and offline. Compared on the
    cross-attention itself: the int8 layers after it round activations per row, so a difference
    in the last float bit can move a logit by a quantization step."""
    from engine.models.whisper.cross_attention import cross_runs

    runner = live_engine.runner
    decoder = runner.model.decoder
    block = decoder.blocks[2]
    torch.manual_seed(1)
    n_ctx, width = runner.dims.n_audio_ctx, runner.dims.n_audio_state
    with torch.inference_mode():
        silence = runner.context_encoder.silence(torch.zeros(runner.dims.n_mels, 10))
        shared = decoder.silence_kv(silence)
        positions = [100, 350, n_ctx]  # two short windows and one full (offline) row
        feats = []
        for p in positions:
            f = silence.clone()
            f[:p] = torch.randn(p, width)
            feats.append(f)
        feats_t = torch.stack(feats)
        states = torch.randn(3, queries, width)

        def attend(cache: Any, rows: int) -> torch.Tensor:
            return decoder._cross_attention(block, 2, states[:rows], cache, cross_runs(cache, queries))

        dense = attend(decoder.new_cache(feats_t, capacity=8), 3)
        split_cache = decoder.new_cache(feats_t, capacity=8, audio_positions=positions, silence=shared,
                                        shared_silence=shared_silence)
        assert split_cache.cross_capacity == n_ctx and split_cache.held == positions
        split = attend(split_cache, 3)
        short_only = decoder.new_cache(feats_t[:2], capacity=8, audio_positions=positions[:2], silence=shared,
                                       shared_silence=shared_silence)
        assert short_only.cross_capacity == 350, "a batch of short windows holds only their own positions"
        short = attend(short_only, 2)
    torch.testing.assert_close(split, dense, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(short, dense[:2], atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module", params=NUMERIC_PATHS)
def tracked(request: pytest.FixtureRequest, clips: list[Clip]) -> Any:
    """(engine, live outputs) on each numeric path: float32 reuses the module's engine and streams."""
    if request.param == "none":
        yield request.getfixturevalue("live_engine"), request.getfixturevalue("live_outputs")
        return
    eng = _live_engine(request.param)
    try:
        yield eng, {c.id: stream_at_pace(eng, c.audio) for c in clips if c.text and c.duration <= MAX_CLIP_S}
    finally:
        eng.shutdown()


def test_live_transcripts_track_offline_ones(tracked: tuple[Any, dict[str, list[Any]]], clips: list[Clip]) -> None:
    """Live passes have no temperature fallback (streaming.py: it would stall every other stream),
    so the offline side decodes without it too: a fallback window's sampled draw moves the offline
    WER by points either way (float32 on the dev set: 12.44 % greedy, 10.45 % with the fallback's
    draws), which says nothing about streaming. Measured with 500 ms steps and the 'fit' context on
    the 25 dev clips <= 15 s: live 13.93 % WER (float32; 14.43 % before the drafts) vs offline
    12.44 %. The gap comes from commits made when two passes agree on part of a sentence that
    offline decoding would still revise. The bound fails on prompt repeats, lost endings or
    looping passes, which cost tens of points."""
    from engine.types import DecodingOptions

    live_engine, live_outputs = tracked
    scored = [c for c in clips if c.id in live_outputs]
    assert len(scored) >= 15
    refs = [c.text or "" for c in scored]
    live = [live_outputs[c.id][-1].text for c in scored]
    greedy = DecodingOptions(temperature_fallback=False)
    offline = [o.text for o in live_engine.transcribe_outputs([c.audio for c in scored], decoding=greedy)]
    live_wer, offline_wer = wer(refs, live), wer(refs, offline)
    logger.info("live WER %.2f%% vs offline %.2f%% on %d clips", live_wer, offline_wer, len(scored))
    assert live_wer <= offline_wer + WER_SLACK, (live_wer, offline_wer, list(zip(live, offline)))


def test_committed_text_only_grows_and_prompts_are_not_repeated(live_outputs: dict[str, list[Any]]) -> None:
    for clip_id, outputs in live_outputs.items():
        committed = ""
        for out in outputs:
            assert out.committed.startswith(committed), (clip_id, committed, out.committed)
            committed = out.committed
        final = outputs[-1].text.strip()
        sentences = [s.strip() for s in final.replace("?", ".").replace("!", ".").split(".") if len(s.split()) >= 3]
        assert len(sentences) == len(set(sentences)), f"{clip_id}: a sentence was said twice: {final!r}"


def test_a_final_drops_the_interim_pass_it_supersedes(live_engine: Any, clips: list[Clip]) -> None:
    clip = next(c for c in clips if c.id == "libri_61-70968-0000")
    audio = clip.audio
    rid = live_engine.add_streaming_request()
    live_engine.feed_chunk(rid, audio[: audio.size // 2])
    live_engine.step()  # starts an interim pass over the first half
    stream = live_engine.runner.streams[rid]
    assert stream.in_flight and stream.current_job is not None and not stream.current_job.final
    live_engine.feed_chunk(rid, audio[audio.size // 2 :], is_last=True)
    outputs: list[Any] = []
    while live_engine.has_work():
        outputs.extend(o for o in live_engine.step() if o.request_id == rid)
    finals = [o for o in outputs if o.finished]
    assert len(finals) == 1 and finals[0].finish_reason == "stop"
    assert wer([clip.text or ""], [finals[0].text]) <= 10.0, finals[0].text


def test_uneven_passes_lose_no_speech_where_windows_are_trimmed(live_engine: Any, clips: list[Clip]) -> None:
    """A loaded server runs a stream's passes every 0.5-2.5 s of audio. Cutting its window at a
    committed word's aligned end (which often lies inside the next word) made tiny.en invent a
    word for the half it heard ("my sentence" for "my antecedents"), then skip a whole clause
    ("... nor of the circumstances which led me to leave my native country"): 36 % WER with one
    of these schedules. Windows are now cut only in pauses."""
    clip = next(c for c in clips if c.id == "libri_2412-153948-0000")
    for seed in (1, 2, 3, 4):
        rng = random.Random(seed)
        blocks = [int(rng.uniform(0.5, 2.5) * 16000) for _ in range(clip.audio.size // 8000 + 1)]
        final = stream_at_pace(live_engine, clip.audio, blocks)[-1]
        assert wer([clip.text or ""], [final.text]) <= 10.0, (seed, final.text)


def test_a_pass_cut_inside_a_sentence_commits_no_sentence_end_the_offline_transcript_lacks(
    live_engine: Any, clips: list[Clip]
) -> None:
    """A loaded engine's passes end wherever the audio had got to. With passes ending at 4.05 s
    and 4.55 s (the 16-bit clip, a 550 ms first block, then 500 ms), both wrote "my
    antecedents." where their audio stopped (the second heard "nor" clipped, as "No."), the
    period was committed, the window cut right before "nor", and the next pass, prompted with
    a sentence end and nothing forced, wrote "No, or of the circumstances": two words more than
    offline ("antecedents, nor of"). Live may differ from offline by one word (as the realtime
    tests allow)."""
    clip = next(c for c in clips if c.id == "libri_2412-153948-0000")
    audio = (np.clip(clip.audio, -1.0, 1.0) * 32767).astype(np.int16).astype(np.float32) / 32768
    offline = live_engine.transcribe(audio)
    blocks = [STEP_SAMPLES + 800] + [STEP_SAMPLES] * (audio.size // STEP_SAMPLES)
    final = stream_at_pace(live_engine, audio, blocks)[-1]
    assert wer([offline], [final.text]) <= 100.0 * 1.5 / len(offline.split()), (final.text, offline)  # one word


def test_a_final_pass_starts_from_what_earlier_passes_heard(live_engine: Any, clips: list[Clip]) -> None:
    clip = next(c for c in clips if c.id == "libri_2412-153948-0000")
    audio, cut = clip.audio, clip.audio.size - STEP_SAMPLES
    rid = live_engine.add_streaming_request()
    outputs: list[Any] = []
    for off in range(0, cut, STEP_SAMPLES):
        live_engine.feed_chunk(rid, audio[off : min(off + STEP_SAMPLES, cut)])
        while live_engine.has_work():
            outputs.extend(o for o in live_engine.step() if o.request_id == rid)
    stream = live_engine.runner.streams[rid]
    jobs: list[Any] = []  # every pass's job as the runner gets it (the final may finish within its step)
    make_job = stream.make_job
    stream.make_job = lambda mel: jobs.append(make_job(mel)) or jobs[-1]
    live_engine.feed_chunk(rid, audio[cut:], is_last=True)
    while live_engine.has_work():
        outputs.extend(o for o in live_engine.step() if o.request_id == rid)
    job = jobs[-1]
    assert job.final and job.forced, "the final pass decodes its whole window again"
    forced_text = live_engine.runner.tokenizer.decode(job.forced).strip()
    final = outputs[-1]
    assert final.finished and forced_text in final.text, (forced_text, final.text)
    assert wer([clip.text or ""], [final.text]) <= 10.0, final.text


def test_streams_stepped_counts_the_live_streams_decoded_together(clips: list[Clip]) -> None:
    """What `oasr_engine_batch_size{mode="streaming"}` observes: live streams in one decoder step,
    not rows (an offline request decoded beside them is no live stream)."""
    from engine import ASREngine, EngineConfig

    engine = ASREngine(EngineConfig(quantization="none", service_mode="streaming", max_batch_size=4))
    try:
        short = [c for c in clips if c.text and 3.0 <= c.duration <= 5.0][:3]
        rids = [engine.add_streaming_request() for _ in short[:2]]
        for rid, clip in zip(rids, short):
            engine.feed_chunk(rid, clip.audio, is_last=True)
        engine.add_request(short[2].audio)
        stepped, finished = [], 0
        while finished < 3:
            finished += sum(o.finished for o in engine.step())
            stepped += engine.metrics.drain().batch_size.get("streaming", [])
        assert max(stepped) == 2, stepped
    finally:
        engine.shutdown()


PAUSE_S = 1.5  # silence before each clip of a multi-utterance session (as benchmarks/streaming_capacity.py)


def _session(clips: list[Clip], ids: tuple[str, ...], pause_s: float = PAUSE_S) -> np.ndarray:
    by_id = {c.id: c for c in clips}
    pause = np.zeros(int(pause_s * 16000), dtype=np.float32)
    return np.concatenate([part for cid in ids for part in (pause, by_id[cid].audio)])


def _spoken(text: str) -> list[str]:
    return "".join(ch for ch in text.lower() if ch.isalnum() or ch.isspace()).split()


def test_a_lone_word_re_heard_over_silence_is_committed_once(live_engine: Any, clips: list[Clip]) -> None:
    """A lone word in a window of mostly silence has no reliable aligned time: "No." (said once,
    at ~9.5 s) was aligned at 9.46 s, 11.5 s, then 12.62 s by passes over 2 s blocks, so the final
    pass, forced with the committed "No.", re-heard it 0.6 s after its committed end and kept it
    as a new word: "... on the left. No. No. Firefox." Forced committed words are dropped by
    count now, not by time."""
    audio = _session(clips, ("libri_61-70968-0000", "cv_en_22058264", "cv_en_22058266"))
    final = stream_at_pace(live_engine, audio, [32000] * (audio.size // 32000 + 1))[-1]
    words = _spoken(final.text)
    assert words.count("no") == 1 and words[:2] == ["he", "began"] and "left" in words, final.text


def test_a_short_first_word_is_committed_once_and_later_speech_kept(live_engine: Any, clips: list[Clip]) -> None:
    """ "six", then a sentence, then a falsetto one, over 1 s blocks: "6." drifted to the end of
    each window, was re-heard as new ("6. 6."), and the phantom second "6.", forced on every later
    pass over audio that no longer held it, kept tiny.en from writing the falsetto sentence at
    all (offline decoding keeps it)."""
    audio = _session(clips, ("cv_en_22058267", "mfa_thoughts", "mfa_falsetto_sentence"))
    final = stream_at_pace(live_engine, audio, [16000] * (audio.size // 16000 + 1))[-1]
    words = _spoken(final.text)
    assert words.count("6") + words.count("six") == 1, final.text
    assert " ".join(words).endswith("this is all very high pitched"), final.text


def test_a_sentence_end_heard_at_a_pass_edge_is_not_committed(live_engine: Any, clips: list[Clip]) -> None:
    """Passes ending at 16.35 s and 16.94 s (uneven blocks, as a loaded engine runs them) both
    wrote "... no voice speech whatsoever." with the period at their audio's end; it was
    committed, and the final pass, forced with the finished sentence, wrote nothing for the
    "here." that followed. Words ending within EDGE_S of a pass's audio end now wait."""
    audio = _session(clips, ("mfa_falsetto2", "mfa_whispered", "mfa_whispered2"))
    blocks = [38555, 33791, 24377, 15923, 35068, 46771, 25109, 42034, 9443, 29111, 16062, 27770]
    final = stream_at_pace(live_engine, audio, blocks)[-1]
    assert " ".join(_spoken(final.text)).endswith("speech whatsoever here"), final.text


def test_a_pause_after_a_committed_sentence_trims_the_window_to_its_last_word(
    live_engine: Any, clips: list[Clip]
) -> None:
    """ "I really don't know how people talk like this." has no pause inside, so the rule that
    trims between two committed words kept the whole sentence in the window (re-encoded every
    pass) until the next sentence's first word committed. Once a pass has heard a second of
    silence after the committed sentence end, the window keeps only its last word (forced) and
    what follows; the next sentence is still heard whole."""
    from engine.models.whisper.stream_cuts import TRIM_KEEP_S

    audio = _session(clips, ("mfa_falsetto2", "mfa_thoughts"))
    next_sentence = int((2 * PAUSE_S + next(c for c in clips if c.id == "mfa_falsetto2").duration) * 16000)
    checked: list[int] = []

    def in_the_pause(rid: str, fed: int) -> None:
        if fed == next_sentence // STEP_SAMPLES * STEP_SAMPLES:  # the last block of the pause is in
            stream = live_engine.runner.streams[rid]
            last = stream.committed_words[-1]
            assert last.word.endswith("this."), stream.agreement.text
            assert 0 < last.start - TRIM_KEEP_S - 1e-3 <= stream.window_start <= last.start, (stream.window_start, last)
            checked.append(fed)

    spoken = " ".join(_spoken(stream_at_pace(live_engine, audio, after_block=in_the_pause)[-1].text))
    assert checked, "the pause was not reached"
    assert spoken.startswith("i really dont know how people talk like this i have a") and spoken.endswith("that thing"), spoken


def test_a_committed_sentence_end_trims_the_window_to_a_short_lead_in(live_engine: Any, clips: list[Clip]) -> None:
    """Two sentences 0.4 s apart. Once "... like this." is committed, the next pass needs only a
    lead-in before the next sentence: the window keeps whole committed words from LEFT_CONTEXT_S
    before the sentence's end (forced), not the whole sentence. Before, the window kept it until
    the next sentence's first word was committed with a gap in the aligned times after "this.",
    and every pass meanwhile re-encoded it. The transcript is still both sentences whole."""
    from engine.models.whisper.stream_cuts import LEFT_CONTEXT_S, SENTENCE_END

    longest_word_s = 1.0  # the lead-in's first committed word starts at most this much earlier
    audio = _session(clips, ("mfa_falsetto2", "mfa_thoughts"), pause_s=0.4)
    kept: list[float] = []  # committed audio before a committed sentence end that a pass re-encodes

    def after_block(rid: str, fed: int) -> None:
        stream = live_engine.runner.streams.get(rid)
        if stream is None:
            return
        ends = [w for w in stream._committed_in_window() if w.word.rstrip().endswith(SENTENCE_END)]
        if ends:
            kept.append(ends[-1].end - stream.window_start)

    final = stream_at_pace(live_engine, audio, after_block=after_block)[-1]
    assert kept, "no sentence end was committed while the second sentence was spoken"
    assert max(kept) <= LEFT_CONTEXT_S + longest_word_s, kept
    expected = "i really dont know how people talk like this i have a thousand thoughts about that thing"
    assert wer([expected], [" ".join(_spoken(final.text))]) <= 100.0 * 1.5 / len(expected.split()), final.text


def test_passes_over_pauses_are_skipped_without_changing_the_transcript(live_engine: Any, clips: list[Clip]) -> None:
    """With every word heard committed, a pass over audio the VAD hears no speech in would
    write nothing: the stream skips it (the pauses before and between clips, and the silence
    after the last). The transcript is the one a stream that runs every pass writes."""
    from engine import ASREngine, EngineConfig

    audio = np.concatenate([_session(clips, ("mfa_thoughts", "cv_en_22058264")), np.zeros(3 * 16000, np.float32)])
    picker = live_engine.runner.streams.picker
    skipped_before = picker.passes_skipped
    counted_before = live_engine.runner.stats().stream_passes_skipped_total
    gated = stream_at_pace(live_engine, audio)
    skipped = picker.passes_skipped - skipped_before
    assert live_engine.runner.stats().stream_passes_skipped_total - counted_before == skipped
    every = ASREngine(EngineConfig(quantization="none", service_mode="streaming", max_batch_size=1,
                                   family_options={"whisper": {"skip_silent_passes": False}}))
    try:
        assert every.runner.streams.picker.gate is None
        ungated = stream_at_pace(every, audio)
    finally:
        every.shutdown()
    assert gated[-1].text == ungated[-1].text, (gated[-1].text, ungated[-1].text)
    assert _spoken(gated[-1].text)[:4] == ["i", "have", "a", "thousand"], gated[-1].text
    # the 1.5 s before the first clip alone is three pass periods of silence
    assert skipped >= 3 and len(gated) + skipped <= len(ungated) + 1, (skipped, len(gated), len(ungated))


def test_live_passes_and_the_audio_they_encode_are_counted(live_engine: Any, clips: list[Clip]) -> None:
    """Every pass a stream runs is counted once, final included, with the audio its encoder
    heard: the window plus at least a second of tail, rounded up to whole seconds."""
    clip = next(c for c in clips if c.text and 3.0 <= c.duration <= 8.0)
    runner = live_engine.runner
    before = runner.stats()
    seen: list[int] = []

    def passes_so_far(rid: str, fed: int) -> None:
        if rid in runner.streams:
            seen.append(runner.streams[rid].passes)

    stream_at_pace(live_engine, clip.audio, after_block=passes_so_far)
    after = runner.stats()
    passes = after.stream_passes_total - before.stream_passes_total
    encoded = after.stream_encoded_seconds_total - before.stream_encoded_seconds_total
    assert seen and seen[-1] < passes <= seen[-1] + 1, (seen, passes)  # the last block brings the final pass
    assert encoded == round(encoded) and 2 * passes <= encoded <= 30 * passes, (passes, encoded)
