"""A long upload beside a live stream: does the stream keep its partials while the upload starts?

`python -m benchmarks.upload_beside_stream --minutes 30` drives an in-process engine (defaults)
through engine/loop.py, as the server's engine thread does, while a client thread feeds it: a live
stream of six dev clips joined by 0.5 s pauses is fed in 20 ms chunks at real time, and 3 s in an
offline request of `--minutes` of dev clips joined by 1 s pauses (benchmarks/long_form.py's
recording) arrives. It prints the stream's
largest gap between two partials, its final latency after its audio ends, and when the upload
finished. Before a long request's collation ran beside the engine thread (engine/models/whisper/
collate.py), its VAD pass and features held every live stream for their whole duration.
"""

from __future__ import annotations

import argparse
import threading
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
    from engine import ASREngine, EngineConfig, RequestOutput
    from engine.loop import drive

    clips = load_clips(DEFAULT_MANIFEST, None)
    upload = build_recording(clips, args.minutes).audio
    pause = np.zeros(int(LIVE_PAUSE_S * SAMPLE_RATE), np.float32)
    live = np.concatenate([np.concatenate([c.audio, pause]) for c in clips[:6]])
    engine = ASREngine(EngineConfig())
    try:
        engine.transcribe_outputs(clips[0].audio)  # warm-up
        stream = engine.add_streaming_request()
        partials: list[float] = []
        done: dict[str, float] = {}
        upload_id: list[str] = []
        start = time.perf_counter()

        def feed() -> None:  # the client: 20 ms chunks on absolute due times, the upload 3 s in
            fed = 0
            while fed < live.size:
                now = time.perf_counter() - start
                if not upload_id and now >= UPLOAD_AT_S:
                    upload_id.append(engine.add_request(upload))
                due = min(int(now / CHUNK_S) * int(CHUNK_S * SAMPLE_RATE), live.size)
                if due > fed:
                    engine.feed_chunk(stream, live[fed:due], is_last=due >= live.size)
                    fed = due
                time.sleep(CHUNK_S / 4)

        def deliver(outputs: list[RequestOutput]) -> None:
            at = time.perf_counter() - start
            for out in outputs:
                if out.request_id == stream:
                    partials.append(at)
                if out.finished:
                    done[out.request_id] = at

        feeder = threading.Thread(target=feed, name="client")
        feeder.start()
        # the engine is stepped on the thread that built it, as one loop (engine/loop.py)
        drive(engine, deliver, stop=lambda: len(done) == 2)
        feeder.join()
    finally:
        engine.shutdown()
    final_at, upload_done = done[stream], done[upload_id[0]]
    gaps = np.diff([0.0, *partials])
    print(f"upload {upload.size / SAMPLE_RATE:.0f} s at {UPLOAD_AT_S:.0f} s; stream {live.size / SAMPLE_RATE:.1f} s: "
          f"{len(partials)} partials, largest gap {gaps.max():.2f} s, final {final_at - live.size / SAMPLE_RATE:.2f} s "
          f"after its audio; upload done at {upload_done:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
