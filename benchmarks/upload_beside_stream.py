"""A long upload beside a live stream: does the stream keep its partials while the upload starts?

`python -m benchmarks.upload_beside_stream --minutes 30` drives an in-process engine (defaults) from
one thread, as the server's engine thread does: a live stream of six dev clips joined by 0.5 s
pauses is fed in 20 ms chunks at real time, and 3 s in an offline request of `--minutes` of dev
clips joined by 1 s pauses (benchmarks/long_form.py's recording) arrives. It prints the stream's
largest gap between two partials, its final latency after its audio ends, and when the upload
finished. Before a long request's collation ran beside the engine thread (engine/models/whisper/
collate.py), its VAD pass and features held every live stream for their whole duration.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.long_form import build_recording
from benchmarks.offline import DEFAULT_MANIFEST, SAMPLE_RATE, load_clips

CHUNK_S = 0.02
UPLOAD_AT_S = 3.0
LIVE_PAUSE_S = 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the upload")
    args = parser.parse_args(argv)
    from engine import ASREngine, EngineConfig

    clips = load_clips(DEFAULT_MANIFEST, None)
    upload = build_recording(clips, args.minutes).audio
    pause = np.zeros(int(LIVE_PAUSE_S * SAMPLE_RATE), np.float32)
    live = np.concatenate([np.concatenate([c.audio, pause]) for c in clips[:6]])
    engine = ASREngine(EngineConfig())
    try:
        engine.transcribe_outputs(clips[0].audio)  # warm-up
        stream = engine.add_streaming_request()
        start = time.perf_counter()
        fed = 0
        partials: list[float] = []
        upload_id: str | None = None
        final_at = upload_done = None
        while final_at is None or upload_done is None:
            now = time.perf_counter() - start
            due = min(int(now / CHUNK_S) * int(CHUNK_S * SAMPLE_RATE), live.size)
            if due > fed:
                engine.feed_chunk(stream, live[fed:due], is_last=due >= live.size)
                fed = due
            if upload_id is None and now >= UPLOAD_AT_S:
                upload_id = engine.add_request(upload)
            for out in engine.step():
                at = time.perf_counter() - start
                if out.request_id == stream:
                    partials.append(at)
                    final_at = at if out.finished else final_at
                elif out.finished:
                    upload_done = at
            time.sleep(0.001)
    finally:
        engine.shutdown()
    gaps = np.diff([0.0, *partials])
    print(f"upload {upload.size / SAMPLE_RATE:.0f} s at {UPLOAD_AT_S:.0f} s; stream {live.size / SAMPLE_RATE:.1f} s: "
          f"{len(partials)} partials, largest gap {gaps.max():.2f} s, final {final_at - live.size / SAMPLE_RATE:.2f} s "
          f"after its audio; upload done at {upload_done:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
