"""How many threads a Whisper engine step's decoding runs on (CPU): DECODE_THREADS, or every
thread where that changes no number and nothing else wants the cores (engine/host_load.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from engine.host_load import HostLoad

DECODE_THREADS = 1
"""torch intra-op threads for a narrowed decoder step on CPU (`StepThreads.narrowed`)."""


class StepThreads:
    """The runner's per-step choice between DECODE_THREADS and every thread for decoding."""

    def __init__(self, device: torch.device, exact_on_any_threads: bool, host_load: HostLoad | None = None):
        """`exact_on_any_threads`: the decoder's numbers are the same on any number of threads
        (int8.exact_integer_decoder)."""
        self.device = device
        self.exact_on_any_threads = exact_on_any_threads
        self.host_load = host_load or HostLoad()

    def narrow(self, encoder_busy: bool, live_rows: bool) -> bool:
        """Whether this step's decoding runs on DECODE_THREADS rather than every thread: while
        the encoder thread holds a core (`encoder_busy`), live rows decode (`live_rows`: their
        cadence was measured on one thread, and a barrier that waits out a busy core delays each
        of their tokens), or other processes keep the host's cores busy. A batch of offline
        windows alone on an otherwise idle host takes every thread: its cross-attention over
        whole windows splits well (601 s long-form recording, int8, quiet: 9.3-10.0 -> 7.5-8.1 s,
        the same transcript). Only where a step's numbers are the same on any number of threads:
        float GEMMs round differently with the threads that split them (measured: every token
        log-probability of 13 float32 transcripts moved), and which way a step goes depends on
        the host's load, which no transcript may."""
        return not self.exact_on_any_threads or encoder_busy or live_rows or not self.host_load.others_idle()

    @contextlib.contextmanager
    def narrowed(self) -> Iterator[None]:
        """Run the decoder's per-token work on DECODE_THREADS intra-op threads (CPU). A step is a
        hundred-odd tiny ops; with several OpenMP threads each op ends in a barrier that waits a
        whole scheduler slice whenever another process or the server's own threads hold a core.
        The encoder's large matmuls keep every thread."""
        before = torch.get_num_threads()
        if self.device.type != "cpu" or before <= DECODE_THREADS:
            yield
            return
        torch.set_num_threads(DECODE_THREADS)
        try:
            yield
        finally:
            torch.set_num_threads(before)


__all__ = ["DECODE_THREADS", "StepThreads"]
