"""Per-channel recognition of a live StreamingRecognize call: each channel of the interleaved
audio is its own `LiveCall` (its own engine stream, turns and results), run side by side; their
responses are merged in the order they come, each result tagged with its channel (1-based, as
Google's `channel_tag`).

    reader task:  audio_content -> ChannelSplitter -> one byte queue per channel
    channel tasks: LiveCall(mono spec).run(its queue) -> tagged responses -> one merged queue
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from app.audio import ChannelSplitter
from app.google.convert import AudioSpec
from app.grpc.convert import invalid
from app.grpc.live import DONE, LiveCall, until_done
from protos.oasr.speech.v1 import speech_pb2 as pb


class ChannelCalls:
    def __init__(self, streaming_config: pb.StreamingRecognitionConfig, spec: AudioSpec,
                 live_call: Callable[[AudioSpec], LiveCall]):
        """`live_call` builds one channel's LiveCall for a (mono) audio spec."""
        if streaming_config.single_utterance:
            # the call ends at the first utterance's end: of which channel is not defined
            raise invalid("single_utterance cannot be combined with enable_separate_recognition_per_channel")
        if not spec.encoding.headerless:
            raise invalid(
                f"live per-channel StreamingRecognize takes headerless audio (LINEAR16, LINEAR32F, MULAW or ALAW "
                f"with sample_rate_hertz), not {spec.encoding.value}; send files with Recognize"
            )
        mono = replace(spec, channels=1)
        self.splitter = ChannelSplitter(spec.encoding, spec.channels)
        self.calls = [live_call(mono) for _ in range(spec.channels)]

    async def run(self, audio_in: AsyncIterator[bytes]) -> AsyncIterator[pb.StreamingRecognizeResponse]:
        inputs: list[asyncio.Queue[Any]] = [asyncio.Queue() for _ in self.calls]
        merged: asyncio.Queue[Any] = asyncio.Queue()
        tasks = [asyncio.ensure_future(self._split(audio_in, inputs))]
        tasks += [asyncio.ensure_future(self._channel(tag, call, inputs[tag - 1], merged))
                  for tag, call in enumerate(self.calls, start=1)]  # fmt: skip
        try:
            ended = 0
            while ended < len(self.calls):
                item = await merged.get()
                if item is DONE:
                    ended += 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _split(self, audio_in: AsyncIterator[bytes], inputs: list[asyncio.Queue[Any]]) -> None:
        """Deal each message's frames to the channels; an error reaches every channel's reader."""
        try:
            async for data in audio_in:
                for queue, part in zip(inputs, self.splitter.push(data)):
                    if part:
                        queue.put_nowait(part)
            self.splitter.finish()
        except Exception as exc:  # a stray partial frame, the client's stream failing
            for queue in inputs:
                queue.put_nowait(exc)
        for queue in inputs:
            queue.put_nowait(DONE)

    @staticmethod
    async def _channel(tag: int, call: LiveCall, audio: asyncio.Queue[Any], merged: asyncio.Queue[Any]) -> None:
        try:
            async for response in call.run(until_done(audio)):
                for result in response.results:
                    result.channel_tag = tag
                merged.put_nowait(response)
            merged.put_nowait(DONE)
        except Exception as exc:
            merged.put_nowait(exc)
