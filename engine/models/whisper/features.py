"""Whisper's encoder and timestamp arithmetic over the shared log-mel front end (engine/log_mel.py)."""

from __future__ import annotations

from engine.log_mel import HOP_LENGTH, SAMPLE_RATE

ENCODER_STRIDE = 2  # mel frames per encoder position (conv2 stride)
SECONDS_PER_TOKEN = ENCODER_STRIDE * HOP_LENGTH / SAMPLE_RATE  # 0.02 s per timestamp step
