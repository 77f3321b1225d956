"""How many live streams keep up with real time? (issue: live streaming, must-show 4; issue 19)

Runs N concurrent streams fed like microphones (20 ms chunks on absolute due times) and reports
first-partial latency, final latency after the end of audio, the gap between a stream's partials,
how many streams were decoded together, and the live WER of the finals against the offline WER
of the same audio (the engine at the same settings, all sessions' audio in one offline batch),
and of the sessions' clips transcribed offline one by one (without the pauses, over which tiny.en
hearing a whole session in one window writes text nobody said).
By default every session is three short dev clips joined by pauses (PAUSE_S of silence), a
different triple per session; `--clip ID` streams that one clip in every session instead.

In process (default), one thread drives the engine as the server does. With `--server`, each
point starts a real streaming server (`uvicorn app.main:app`) and every stream is an OpenAI
realtime WebSocket session sending base64 24 kHz PCM; the batching columns then come from the
server's own `oasr_engine_batch_size{mode="streaming"}` histogram on /metrics, and the partial interval is
the gap between non-empty `delta` events (new text a stock client shows), and "deltas = completed"
counts the items whose joined deltas are their completed transcript (OpenAI's clients concatenate them).
The sessions' append events are encoded before the clock starts (`append_events`): the clients share
the server's cores, and the CPU each used over the sessions is a column of its own (server / clients).

    python -m benchmarks.streaming_capacity --server --sessions 8 16 24          # server defaults
    python -m benchmarks.streaming_capacity --sessions 1 2 4 8 --clip libri_2412-153948-0000
    python -m benchmarks.streaming_capacity --server --sessions 8 --batch-sizes 16 1 --quantization int8_w8a8

A burst test of live admission (issue 44): `--server --sessions C 3C` with C the most sessions
the server admits and holds at cadence (sessions open 0.25 s apart by default): at C all are
admitted; at 3C the excess is refused, each refusal with a Retry-After, and the admitted keep
their cadence (partial interval, final p95, `passes_shed`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import psutil
import soundfile as sf
import soxr
from prometheus_client.parser import text_string_to_metric_families

from app.metrics import BATCH_SIZE_BUCKETS
from engine import ASREngine, EngineConfig, RequestOutput
from engine.loop import drive

DATA = Path(os.environ.get("OASR_SPEECH_DATA", Path(__file__).resolve().parents[2] / "shared" / "data" / "speech"))
CHUNK_S = 0.02
SAMPLE_RATE = 16000
KEEPS_UP_P95_S = 1.5  # final latency bound that counts as keeping up
CADENCE_BOUND_S = 1.0
"""A stream keeps its cadence while its median gap between partials is at most this (issue 19:
two 500 ms steps); past that, passes of a busy engine come later than the step asks."""
PAUSE_S = 1.5  # silence between the clips of a multi-utterance session (and before the first)
SESSION_CLIPS = 3  # clips per multi-utterance session
POOL_SECONDS = (1.5, 8.0)  # dev clips of this length (s) make up the sessions


@dataclass
class Session:
    rid: str
    index: int = 0
    audio_end: float = 0.0  # wall time the last chunk was sent
    first_partial: float | None = None
    final: float | None = None
    start: float = 0.0
    texts: list[str] = field(default_factory=list)
    partial_times: list[float] = field(default_factory=list)


def _manifest() -> dict[str, dict[str, object]]:
    rows = [json.loads(line) for line in (DATA / "manifest.jsonl").read_text().splitlines() if line.strip()]
    return {str(row["id"]): row for row in rows}


def load(clip_id: str) -> np.ndarray:
    audio, rate = sf.read(DATA / str(_manifest()[clip_id]["audio"]), dtype="float32", always_2d=True)
    resampled: np.ndarray = soxr.resample(audio.mean(axis=1), rate, SAMPLE_RATE)
    return resampled.astype(np.float32)


def sessions_audio(n: int, clip: str | None = None) -> tuple[list[np.ndarray], list[str]]:
    """Audio and reference text of n sessions: `clip` in each, or SESSION_CLIPS different dev clips
    joined by PAUSE_S of silence (session k takes clips 3k, 3k+1, 3k+2 of the pool, cyclically)."""
    rows = _manifest()
    if clip is not None:
        return [load(clip)] * n, [str(rows[clip].get("text") or "")] * n
    pause = np.zeros(int(PAUSE_S * SAMPLE_RATE), dtype=np.float32)
    audios, texts = [], []
    for picked in session_clips(n):
        audios.append(np.concatenate([part for cid in picked for part in (pause, load(cid))]))
        texts.append(" ".join(str(rows[cid]["text"]) for cid in picked))
    return audios, texts


def session_clips(n: int) -> list[list[str]]:
    """The dev clips of each of n multi-utterance sessions, in order."""
    rows = _manifest()
    pool = [cid for cid, r in rows.items() if r.get("text") and not r.get("channel_texts")
            and POOL_SECONDS[0] <= float(r["duration"]) <= POOL_SECONDS[1]]  # type: ignore[arg-type]
    return [[pool[(SESSION_CLIPS * k + j) % len(pool)] for j in range(SESSION_CLIPS)] for k in range(n)]


def offline_wer(audios: list[np.ndarray], texts: list[str], **config: object) -> float:
    """WER of the same audio transcribed offline by the engine at the same settings."""
    engine = ASREngine(EngineConfig(**config))  # type: ignore[arg-type]
    try:
        outs = engine.transcribe_outputs(audios)
    finally:
        engine.shutdown()
    return corpus_wer(texts, [o.text for o in outs])


def offline_clip_wer(n: int, **config: object) -> float:
    """WER of the n sessions' clips transcribed offline one by one (each clip its own request,
    no pauses), their texts joined per session: the offline reference without what tiny.en
    writes over a session's pauses and trailing silence when it hears the session in one window."""
    rows = _manifest()
    picked = session_clips(n)
    clips = sorted({cid for ids in picked for cid in ids})
    engine = ASREngine(EngineConfig(**config))  # type: ignore[arg-type]
    try:
        text = {cid: o.text for cid, o in zip(clips, engine.transcribe_outputs([load(cid) for cid in clips]))}
    finally:
        engine.shutdown()
    return corpus_wer([" ".join(str(rows[cid]["text"]) for cid in ids) for ids in picked],
                      [" ".join(text[cid] for cid in ids) for ids in picked])


def corpus_wer(references: list[str], hypotheses: list[str]) -> float:
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    return round(100.0 * float(jiwer.wer([norm(r) for r in references], [norm(h) for h in hypotheses])), 2)


def _per_session(audio: np.ndarray | list[np.ndarray], n: int) -> list[np.ndarray]:
    return list(audio) if isinstance(audio, list) else [audio] * n


def run(n: int, audio: np.ndarray | list[np.ndarray], max_batch_size: int | None, stagger_s: float,
        references: list[str] | None = None, **config: object) -> dict[str, object]:
    """`audio`: one clip for every session, or one per session; `references`: their texts (for
    the live WER); max_batch_size None keeps the engine's defaults."""
    audios = _per_session(audio, n)
    # max_decode_rows too: with max_batch_size=1 alone the decoder would still step every stream together
    sizes = {} if max_batch_size is None else {"max_batch_size": max_batch_size, "max_decode_rows": max_batch_size}
    engine = ASREngine(EngineConfig(service_mode="streaming", **sizes, **config))  # type: ignore[arg-type]
    engine.transcribe_outputs(np.zeros(SAMPLE_RATE, dtype=np.float32))  # warm-up
    sessions: dict[str, Session] = {}
    streams_stepped: list[int] = []
    stage_seconds: dict[str, float] = {}  # engine stage -> host seconds over the run
    passes_shed = passes_skipped = passes = 0
    encoded_s = 0.0
    lock = threading.Lock()
    t0 = time.monotonic()
    chunk = int(CHUNK_S * SAMPLE_RATE)

    def feeder(k: int) -> None:
        start = t0 + k * stagger_s
        time.sleep(max(0.0, start - time.monotonic()))
        rid = engine.add_streaming_request()
        s = Session(rid, k, start=time.monotonic())
        audio = audios[k]
        with lock:
            sessions[rid] = s
        for i, off in enumerate(range(0, audio.size, chunk)):
            due = start + i * CHUNK_S
            time.sleep(max(0.0, due - time.monotonic()))
            last = off + chunk >= audio.size
            engine.feed_chunk(rid, audio[off : off + chunk], is_last=last)
        s.audio_end = time.monotonic()

    threads = [threading.Thread(target=feeder, args=(k,), daemon=True) for k in range(n)]
    for th in threads:
        th.start()
    finished = 0

    def deliver(outs: list[RequestOutput]) -> None:
        nonlocal finished, passes_shed, passes_skipped, passes, encoded_s, streams_stepped
        snap, runner = engine.metrics.drain(), engine.runner.stats()
        passes_shed = runner.stream_passes_shed_total
        passes_skipped = runner.stream_passes_skipped_total
        passes, encoded_s = runner.stream_passes_total, runner.stream_encoded_seconds_total
        streams_stepped += snap.batch_size.get("streaming", [])
        for stage, times in snap.stage_seconds.items():
            stage_seconds[stage] = stage_seconds.get(stage, 0.0) + sum(times)
        now = time.monotonic()
        for o in outs:
            s = sessions.get(o.request_id)
            if s is None:
                continue
            if not o.finished:
                s.partial_times.append(now)
            if not o.finished and o.text and s.first_partial is None:
                s.first_partial = now - s.start
            if o.finished:
                s.final = now - s.audio_end if s.audio_end else float("nan")
                s.texts.append(o.text)
                finished += 1

    drive(engine, deliver, stop=lambda: finished >= n)
    engine.shutdown()
    histogram = {b: sum(1 for x in streams_stepped if x <= b) for b in BATCH_SIZE_BUCKETS}
    finals = {s.index: s.texts[-1] for s in sessions.values() if s.texts}
    row = summarize(n, max_batch_size, [s.final for s in sessions.values() if s.final is not None],
                     [s.first_partial for s in sessions.values() if s.first_partial is not None],
                     [b - a for s in sessions.values() for a, b in itertools.pairwise(s.partial_times)],
                     histogram, len(streams_stepped), sum(streams_stepped), max(streams_stepped, default=0),
                     live_wer=_live_wer(references, finals, n))
    row["wall_s"] = round(time.monotonic() - t0, 1)
    row["passes_shed"] = passes_shed
    row["passes_skipped"] = passes_skipped
    row |= pass_costs(passes, encoded_s, audios)
    row["stage_s"] = {stage: round(t, 1) for stage, t in sorted(stage_seconds.items(), key=lambda kv: -kv[1])}
    return row


def _live_wer(references: list[str] | None, finals: dict[int, str], n: int, skip: Sequence[int] = ()) -> float:
    """WER of the first `n` sessions' finals, but those in `skip` (refused: nothing transcribed)."""
    if not references:
        return float("nan")
    kept = [k for k in range(n) if k not in skip]
    return corpus_wer([references[k] for k in kept], [finals.get(k, "") for k in kept])


def run_server(n: int, audio: np.ndarray | list[np.ndarray], max_batch_size: int | None, stagger_s: float,
               quantization: str | None, encoder_context: str | None,
               references: list[str] | None = None, turn_detection: str = "none") -> dict[str, object]:
    """The same sessions through a real streaming server, as OpenAI realtime WebSocket clients.
    None for max_batch_size, quantization or encoder_context keeps the server's default.

    `turn_detection` "none" (default): a session is one turn, final after the client's commit at
    the end of its audio, so the engine itself hears the pauses. "server_vad" (a realtime
    session's default when the client sends none): the server's VAD cuts each session into
    turns, and a turn's final latency runs from where the VAD heard its speech end (the
    `speech_end_ms` of `speech_stopped`; the end of the audio for the turn the client's commit
    closes) to its `completed` transcript, so it includes the VAD's silence wait."""
    from websockets.exceptions import InvalidStatus

    from benchmarks.asrbench.backends.realtime import RealtimeStream, append_events
    from benchmarks.asrbench.backends.server_process import ServerProcess

    audios = _per_session(audio, n)
    env = {"OASR_SERVICE_MODE": "streaming", "OASR_LOG_LEVEL": "warning"}
    if max_batch_size is not None:
        env |= {"OASR_MAX_BATCH_SIZE": str(max_batch_size), "OASR_MAX_DECODE_ROWS": str(max_batch_size)}
    if quantization is not None:
        env["OASR_QUANTIZATION"] = quantization
    if encoder_context is not None:
        env["OASR_WHISPER_STREAM_ENCODER_CONTEXT"] = encoder_context
    server = ServerProcess(env, startup_timeout_s=300.0)
    try:
        warm = RealtimeStream(server.base_url, model="", turn_detection="none")
        warm.send(audios[0][:SAMPLE_RATE])
        warm.close_input()
        warm.result(60.0)
        before = stream_batch_histogram(server.base_url)
        finals: list[float] = []
        firsts: list[float] = []
        intervals: list[float] = []
        joined_match = [0, 0]  # items whose joined deltas equal their completed transcript, items
        texts: dict[int, str] = {}
        errors: list[str] = []
        refused: list[int] = []  # sessions the server's live admission refused (503)
        unhinted: list[int] = []  # ...of them, refused without a Retry-After
        reasons: list[str] = []  # ...the server's words for each refusal
        lock = threading.Lock()
        events = [append_events(a, CHUNK_S) for a in audios]  # the clients' CPU goes to sending only
        t0 = time.perf_counter() + 0.5

        def client(k: int) -> None:
            start = t0 + k * stagger_s
            time.sleep(max(0.0, start - time.perf_counter()))
            try:
                stream = RealtimeStream(server.base_url, model="", turn_detection=turn_detection)
            except InvalidStatus as exc:  # refused on the upgrade: the server judged itself full
                if exc.response.status_code != 503:
                    raise
                with lock:
                    refused.append(k)
                    reasons.append((exc.response.body or b"").decode("utf-8", "replace")[:300])
                    if exc.response.headers.get("retry-after") is None:
                        unhinted.append(k)
                return
            opened = time.perf_counter()
            for i, event in enumerate(events[k]):
                time.sleep(max(0.0, start + i * CHUNK_S - time.perf_counter()))
                stream.send_event(event)
            audio_end = start + audios[k].size / SAMPLE_RATE
            stream.close_input()
            try:
                text = stream.result(120.0)
            except Exception as exc:  # a failed session is reported, not raised
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")
                return
            with lock:
                assert stream.final_t is not None
                finals.extend(done - (audio_end if end_s is None else start + end_s)
                              for end_s, done in stream.turn_ends())
                texts[k] = text
                if stream.partials:
                    firsts.append(stream.partials[0][0] - opened)
                intervals.extend(b - a for (a, _), (b, _) in itertools.pairwise(stream.partials))
                joined_match[0] += sum(stream.joined.get(i, "") == t for i, t in stream.completed.items())
                joined_match[1] += len(stream.completed)

        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(n)]
        server_cpu, client_cpu = _cpu_seconds(server.proc.pid), time.process_time()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        server_cpu, client_cpu = _cpu_seconds(server.proc.pid) - server_cpu, time.process_time() - client_cpu
        after = stream_batch_histogram(server.base_url)
    finally:
        server.stop()
    if errors:
        raise RuntimeError(f"{len(errors)} of {n} sessions failed: {errors[0]}")
    histogram = {b: after[str(float(b))] - before[str(float(b))] for b in BATCH_SIZE_BUCKETS}
    steps = after["+Inf"] - before["+Inf"]
    # /metrics has buckets only: the most streams in one step is known up to its bucket's bound
    most = min((b for b in BATCH_SIZE_BUCKETS if histogram[b] >= steps), default=BATCH_SIZE_BUCKETS[-1])
    row = summarize(n, max_batch_size, finals, firsts, intervals, histogram, int(steps), int(after["sum"] - before["sum"]),
                    most if steps else 0, live_wer=_live_wer(references, texts, n, skip=refused))
    row["refused"] = len(refused)
    row["deltas_join_to_completed"] = f"{joined_match[0]} of {joined_match[1]}"
    row["refused_unhinted"] = len(unhinted)
    row["refusal_reasons"] = sorted(set(reasons))
    row["passes_shed"] = int(after["passes_shed"] - before["passes_shed"])
    row["passes_late"] = int(after["passes_late"] - before["passes_late"])
    row["passes_skipped"] = int(after["passes_skipped"] - before["passes_skipped"])
    row |= pass_costs(int(after["passes"] - before["passes"]), after["encoded_s"] - before["encoded_s"], audios)
    row["turns"] = len(finals)
    row["server_cpu_s"] = round(server_cpu, 1)
    row["client_cpu_s"] = round(client_cpu, 1)
    return row


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process `pid` has used (all its threads)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def pass_costs(passes: int, encoded_s: float, audios: list[np.ndarray]) -> dict[str, object]:
    """The live passes started (`oasr_engine_stream_passes_total`), the sessions' audio per pass (a
    stream's pass cadence in audio seconds, pauses included: the cadence bound needs it near
    CADENCE_BOUND_S), and the audio each pass encoded (window, tail and rounding: the encoder's
    cost of a pass)."""
    audio_s = sum(a.size for a in audios) / SAMPLE_RATE
    return {"passes": passes,
            "audio_s_per_pass": round(audio_s / passes, 2) if passes else float("nan"),
            "encoded_s_per_pass": round(encoded_s / passes, 2) if passes else float("nan")}


def stream_batch_histogram(base_url: str) -> dict[str, float]:
    """The server's cumulative `oasr_engine_batch_size{mode="streaming"}` buckets by `le`, plus its sum
    (the live streams one engine step advanced together), and its `oasr_engine_stream_passes_shed_total`
    as "passes_shed" (interim passes it skipped while behind), `oasr_engine_stream_passes_late_total` as
    "passes_late" (interim passes started three quarters of a pass period late), and its
    `oasr_engine_stream_passes_skipped_total` as "passes_skipped" (passes over silence), and the
    passes run and the audio they encoded (`oasr_engine_stream_passes_total`,
    `oasr_engine_stream_encoded_seconds_total`) as "passes" and "encoded_s", from one read of /metrics."""
    text = httpx.get(f"{base_url}/metrics", timeout=10.0).text
    # zeros until the first streaming step creates the series
    out: dict[str, float] = {**{str(float(b)): 0.0 for b in BATCH_SIZE_BUCKETS}, "+Inf": 0.0, "sum": 0.0,
                             "passes_shed": 0.0, "passes_late": 0.0, "passes_skipped": 0.0, "passes": 0.0,
                             "encoded_s": 0.0}
    totals = {"oasr_engine_stream_passes_shed": "passes_shed", "oasr_engine_stream_passes_late": "passes_late",
              "oasr_engine_stream_passes_skipped": "passes_skipped",
              "oasr_engine_stream_passes": "passes", "oasr_engine_stream_encoded_seconds": "encoded_s"}
    for family in text_string_to_metric_families(text):
        if family.name in totals:
            out[totals[family.name]] = sum(sample.value for sample in family.samples if sample.name.endswith("_total"))
        if family.name != "oasr_engine_batch_size":
            continue
        for sample in family.samples:
            if sample.labels.get("mode") != "streaming":
                continue
            if sample.name.endswith("_bucket"):
                out[sample.labels["le"]] = sample.value
            elif sample.name.endswith("_sum"):
                out["sum"] = sample.value
    return out


def summarize(n: int, max_batch_size: int | None, finals: list[float], firsts: list[float], intervals: list[float],
              histogram: Mapping[int, float], steps: int, stream_steps: int, max_streams: int,
              live_wer: float = float("nan")) -> dict[str, object]:
    """One point's row. `intervals` are the gaps between a stream's consecutive partials (its pass
    cadence); `histogram` counts engine steps by the streams they advanced together (cumulative,
    by bucket bound); `max_streams` is the largest seen, or the bucket bound above it."""
    p95 = percentile(finals, 0.95)
    return {
        "sessions": n,
        "max_batch_size": max_batch_size,
        "final_p50_s": round(statistics.median(finals), 3),
        "final_p95_s": round(p95, 3),
        "first_partial_p50_s": round(statistics.median(firsts), 3) if firsts else float("nan"),
        "partial_interval_p50_s": round(statistics.median(intervals), 3) if intervals else float("nan"),
        "partial_interval_p95_s": round(percentile(intervals, 0.95), 3) if intervals else float("nan"),
        "steps_with_streams": steps,
        "mean_streams_per_step": round(stream_steps / steps, 2) if steps else 0.0,
        "steps_with_2plus_streams": int(steps - histogram[1]),
        "max_streams_per_step": max_streams,
        "keeps_up": p95 <= KEEPS_UP_P95_S,
        "keeps_cadence": bool(intervals) and statistics.median(intervals) <= CADENCE_BOUND_S,
        "live_wer": live_wer,
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(np.ceil(q * len(ordered))) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--clip", default=None, help="stream this dev clip in every session (default: "
                        f"{SESSION_CLIPS} clips joined by {PAUSE_S} s pauses, different per session)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[None],
                        help="max_batch_size (and max_decode_rows) per point; default: the engine's")
    parser.add_argument("--stagger-s", type=float, default=0.25, help="start offset between sessions, seconds")
    parser.add_argument("--quantization", default=None, choices=["none", "int8_w8a8"], help="default: the engine's")
    parser.add_argument("--encoder-context", default=None, choices=["fit", "full"], help="default: the engine's")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per point; the table shows the median p95 (it moves a lot from run to run)")
    parser.add_argument("--turn-detection", default="none", choices=["none", "server_vad"],
                        help="--server: the sessions' turn detection (none: one turn per session, ended by the "
                        "client's commit; server_vad: the server's VAD ends turns, finals timed from each "
                        "turn's speech end)")
    parser.add_argument("--server", action="store_true",
                        help="run each point against a real streaming server over /v1/realtime WebSockets")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    config: dict[str, object] = {}
    if args.quantization is not None:
        config["quantization"] = args.quantization
    if args.encoder_context is not None:
        config["family_options"] = {"whisper": {"stream_encoder_context": args.encoder_context}}
    rows = []
    for mbs in args.batch_sizes:
        for n in args.sessions:
            audios, texts = sessions_audio(n, args.clip)
            sizes = {} if mbs is None else {"max_batch_size": mbs}
            reference = offline_wer(audios, texts, **config, **sizes)
            per_clip = reference if args.clip else offline_clip_wer(n, **config, **sizes)
            runs = []
            for _ in range(args.repeat):
                if args.server:
                    runs.append(run_server(n, audios, mbs, args.stagger_s, args.quantization, args.encoder_context,
                                           references=texts, turn_detection=args.turn_detection))
                else:
                    runs.append(run(n, audios, mbs, args.stagger_s, references=texts, **config))
                runs[-1]["offline_wer"] = reference
                runs[-1]["offline_clip_wer"] = per_clip
                print(json.dumps(runs[-1]), flush=True)
            row = dict(sorted(runs, key=lambda r: r["final_p95_s"])[len(runs) // 2])  # type: ignore[arg-type,return-value]
            row["final_p95_runs"] = [r["final_p95_s"] for r in runs]
            rows.append(row)
    most = "most streams in a step (bucket bound)" if args.server else "most streams in a step"
    defaults = EngineConfig()
    where = f"server over /v1/realtime, turn detection {args.turn_detection}" if args.server else "in-process engine"
    print(f"\n{where}, "
          f"quantization={args.quantization or defaults.quantization}, "
          f"context={args.encoder_context or 'the engine default'}, "
          f"sessions: {args.clip or f'{SESSION_CLIPS} dev clips joined by {PAUSE_S} s pauses'}\n")
    print("| max_batch_size | sessions | final p50 s | final p95 s (median run) | p95 of each run | "
          f"first partial p50 s | partial interval p50 / p95 s | steps with ≥2 streams | mean streams a step | "
          f"{most} | passes: audio s / encoded s per pass | live WER % | offline WER % | offline WER % clip by clip | "
          f"final p95 ≤ {KEEPS_UP_P95_S} s | partials every ≤ {CADENCE_BOUND_S} s |"
          + (" CPU s: server / clients |" if args.server else ""))
    print("|---" * (17 if args.server else 16) + "|")
    for r in rows:
        each = ", ".join(str(x) for x in r["final_p95_runs"])  # type: ignore[attr-defined]
        sessions = f"{r['sessions']} ({r['sessions'] - r['refused']} admitted)" if r.get("refused") else r["sessions"]  # type: ignore[operator]
        if r.get("refused_unhinted"):
            sessions = f"{sessions}, {r['refused_unhinted']} refused without Retry-After"
        print(f"| {r['max_batch_size'] or defaults.max_batch_size} | {sessions} | {r['final_p50_s']} | "
              f"{r['final_p95_s']} | {each} | "
              f"{r['first_partial_p50_s']} | {r['partial_interval_p50_s']} / {r['partial_interval_p95_s']} | "
              f"{r['steps_with_2plus_streams']} of {r['steps_with_streams']} | "
              f"{r['mean_streams_per_step']} | {r['max_streams_per_step']} | "
              f"{r['passes']}: {r['audio_s_per_pass']} / {r['encoded_s_per_pass']} | {r['live_wer']} | {r['offline_wer']} | {r['offline_clip_wer']} | "
              f"{r['keeps_up']} | {r['keeps_cadence']} |"
              + (f" {r['server_cpu_s']} / {r['client_cpu_s']} |" if args.server else ""))


if __name__ == "__main__":
    main()
