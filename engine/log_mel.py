"""Whisper's log-mel front end in torch, batched, on the engine's device: the features of Whisper
and of the speech-LLMs whose audio encoder is Whisper's (Qwen2-Audio, Qwen3-ASR).

Reflect-centred 400-point STFT with a periodic Hann window, the last frame dropped, Slaney mel
filters, log10 with a floor, an 8-decade dynamic range per request. Two conventions for what
follows the audio's end, which Whisper hears (a padded window is mostly padding):
- the reference's (openai/whisper, Transformers; offline windows): the audio is followed by
  zeros before the STFT, so the last frames hear the cut and every padding frame is the clip's
  floor (its loudest bin minus 8 decades), a value per clip;
- faster-whisper's (live windows): 160 samples of end padding reflected at the clip's edge, and
  windows padded with 0 in the log-mel domain, one value for every stream
  (engine/models/whisper/context.py).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

SAMPLE_RATE = 16000  # Hz
N_FFT = 400  # samples: 25 ms window
HOP_LENGTH = 160  # samples: 10 ms per frame
CHUNK_SECONDS = 30  # Whisper's context
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames per window
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH  # 100
EDGE_FRAMES = 5  # frames past the audio's end in the reference convention; the last is all padding


@functools.lru_cache(maxsize=4)
def mel_filters(n_mels: int, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """Slaney-style mel filterbank (n_mels, n_fft // 2 + 1), as librosa/faster-whisper build it."""
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sample_rate)
    mels = np.linspace(0.0, 45.245640471924965, n_mels + 2)  # mel(8000 Hz) on the Slaney scale
    f_sp = 200.0 / 3
    freqs = f_sp * mels
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    log_t = mels >= min_log_mel
    freqs[log_t] = min_log_hz * np.exp(logstep * (mels[log_t] - min_log_mel))
    fdiff = np.diff(freqs)
    ramps = freqs.reshape(-1, 1) - fftfreqs.reshape(1, -1)
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (freqs[2 : n_mels + 2] - freqs[:n_mels]))[:, None]
    return weights.astype(np.float32)


class LogMelExtractor:
    def __init__(self, n_mels: int, device: torch.device):
        self.n_mels = n_mels
        self.device = device
        self.filters = torch.from_numpy(mel_filters(n_mels)).to(device)
        self.window = torch.hann_window(N_FFT, periodic=True, device=device)

    def __call__(self, waveforms: list[np.ndarray], audio_padding: bool = False) -> list[Tensor]:
        """Waveforms (float32 mono 16 kHz, any lengths) -> log-mel (n_mels, frames) each, computed
        in one batched STFT. Without `audio_padding` (faster-whisper's convention) a mel has
        samples // HOP_LENGTH + 1 frames, the last centred on the end padding. With it (the reference's),
        the audio is followed by zeros and a mel has samples // HOP_LENGTH content frames followed
        by EDGE_FRAMES frames that reach into the zeros, the last of which is the padding value
        (`padding_value`)."""
        if not waveforms:
            return []
        end_pad = EDGE_FRAMES * HOP_LENGTH if audio_padding else HOP_LENGTH
        padded = []
        for w in waveforms:
            # read-only inputs (np.frombuffer over request bytes) are copied: torch warns on them
            x = torch.from_numpy(np.require(w, dtype=np.float32, requirements=["C", "W"])).to(self.device)
            x = torch.nn.functional.pad(x, (0, end_pad))
            # reflect-centre each waveform at its own edges before batching
            x = torch.nn.functional.pad(x[None, None], (N_FFT // 2, N_FFT // 2), mode="reflect")[0, 0]
            padded.append(x)
        lengths = [(len(w) + end_pad) // HOP_LENGTH for w in waveforms]
        batch = torch.nn.utils.rnn.pad_sequence(padded, batch_first=True)  # (B, L)
        stft = torch.stft(batch, N_FFT, HOP_LENGTH, window=self.window, center=False, return_complex=True)
        power = stft[..., :-1].abs() ** 2  # (B, F, T); last frame dropped
        mel = self.filters @ power  # (B, n_mels, T)
        log_spec = torch.clamp(mel, min=1e-10).log10()
        out = []
        for i, n in enumerate(lengths):
            spec = log_spec[i, :, :n]
            spec = torch.maximum(spec, spec.max() - 8.0)
            out.append((spec + 4.0) / 4.0)
        return out


def padding_value(mel: Tensor) -> float:
    """The value of every padding frame of a mel computed with `audio_padding`: its last frame
    hears only zeros, floored at the clip's loudest bin minus 8 decades (one value in every bin)."""
    return float(mel[0, -1])


def pad_window(mel: Tensor, start: int, length: int = N_FRAMES, value: float = 0.0) -> Tensor:
    """Frames [start, start+length) of a log-mel, padded to `length` with `value` (0: faster-whisper's
    convention; the clip's `padding_value`: the reference's)."""
    segment = mel[:, start : start + length]
    if segment.shape[1] < length:
        segment = torch.nn.functional.pad(segment, (0, length - segment.shape[1]), value=value)
    return segment
