"""The batched torch log-mel front end matches faster-whisper's FeatureExtractor numerically."""

from __future__ import annotations

import numpy as np
import torch
from faster_whisper.feature_extractor import FeatureExtractor

from engine.log_mel import LogMelExtractor
from tests.conftest import Clip

TOLERANCE = 1e-4  # max abs difference of normalized log-mel values


def test_log_mel_matches_faster_whisper_on_a_mixed_batch(clips: list[Clip]) -> None:
    ours = LogMelExtractor(80, torch.device("cpu"))
    reference = FeatureExtractor(feature_size=80)
    by_length = sorted(clips, key=lambda c: c.duration)
    picked = [by_length[0], by_length[len(by_length) // 2], by_length[-1], by_length[3]]
    waveforms = [c.audio for c in picked]
    assert len({len(w) for w in waveforms}) == len(waveforms), "lengths must differ to exercise padding"
    batched = ours(waveforms)
    for clip, wave, mel in zip(picked, waveforms, batched):
        expected = reference(wave)
        assert tuple(mel.shape) == expected.shape, clip.id
        diff = float(np.abs(mel.numpy() - expected).max())
        assert diff <= TOLERANCE, f"{clip.id}: max abs diff {diff:.2e}"
        # batching must not change a waveform's features
        alone = ours([wave])[0]
        assert float((alone - mel).abs().max()) <= 1e-6, clip.id


def test_very_short_and_silent_inputs(clips: list[Clip]) -> None:
    ours = LogMelExtractor(80, torch.device("cpu"))
    reference = FeatureExtractor(feature_size=80)
    for wave in (np.zeros(16000, dtype=np.float32), clips[0].audio[:800].copy()):
        mel = ours([wave])[0]
        expected = reference(wave)
        assert tuple(mel.shape) == expected.shape
        assert float(np.abs(mel.numpy() - expected).max()) <= TOLERANCE


def test_audio_padding_matches_the_reference_features(clips: list[Clip]) -> None:
    """Offline windows use openai/whisper's convention, as Transformers' feature extractor does:
    the audio is followed by zeros, so a padded 30 s window ends in the clip's floor, not 0."""
    from transformers import WhisperFeatureExtractor

    from engine.log_mel import EDGE_FRAMES, N_FRAMES, pad_window, padding_value

    ours = LogMelExtractor(80, torch.device("cpu"))
    reference = WhisperFeatureExtractor(feature_size=80)
    short = [c for c in sorted(clips, key=lambda c: c.duration) if c.duration < 30]
    picked = [short[0], short[len(short) // 2], short[-1]]
    mels = ours([c.audio for c in picked], audio_padding=True)
    for clip, mel in zip(picked, mels):
        assert mel.shape[1] == len(clip.audio) // 160 + EDGE_FRAMES, clip.id
        expected = reference(clip.audio, sampling_rate=16000, return_tensors="np").input_features[0]
        window = pad_window(mel, 0, N_FRAMES, padding_value(mel)).numpy()
        diff = float(np.abs(window - expected).max())
        assert diff <= TOLERANCE, f"{clip.id}: max abs diff {diff:.2e}"
        assert padding_value(mel) < 0, "the floor of a clip with speech is below log-mel 0"
