"""Engine workloads: one family's model in process, driven through `engine/loop.py` as the server
drives it, measured three ways (docs/benchmarking.md, "Engine workloads"):

- `rtf`: B offline requests admitted together; wall and CPU real-time factor, tokens per CPU-second;
- `lockstep`: S live streams fed one chunk each per tick, the engine stepped until idle between
  ticks: CPU per step and per second of stream audio, the streams one core sustains (independent
  of the machine's load and of wall-clock pacing);
- `paced`: N streams fed like microphones on absolute due times: partial and final latency, their
  drift against audio position, whether the point keeps up.

    python -m benchmarks.asrbench engine rtf --family paraformer --size realistic --batch 1 8 32
    python -m benchmarks.asrbench engine lockstep --family zipformer --size realistic --batch 8 --batch-sizes 8 1
    python -m benchmarks.asrbench engine paced --family nemo --size realistic --sessions 1 4 16 --chunk-size 2
"""
