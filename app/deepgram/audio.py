"""The socket's binary frames -> float32 mono at the model rate.

`encoding` linear16 / mulaw / alaw with `sample_rate` (and `channels`): headerless samples.
`encoding` opus (Ogg or WebM), flac, or none at all: a container, recognised from its first
bytes and decoded as it arrives (app/audio/container_stream.py). A WAV header in front of
linear16 is read as the container it is (its own rate wins); any other container under a
headerless encoding is refused: decoding it as samples would transcribe noise.
"""

from __future__ import annotations

import numpy as np

from app.audio import AudioDecodeError, HeaderlessStream, sniff_container
from app.audio.container_stream import FFMPEG_FORMAT, ContainerStream
from app.deepgram.params import HEADERLESS, ListenParams

SNIFF_BYTES = 16
"""Bytes needed to recognise a container (sniff_container reads at most 16)."""
_EXPECTED = {"opus": ("ogg", "webm"), "flac": ("flac",)}
_HEADERLESS_NAMES = {"linear16": "LINEAR16", "mulaw": "MULAW", "alaw": "ALAW"}
_FILES = frozenset({"ogg", "webm", "flac", "mp4", "aiff", "caf", "amr"})
"""Containers with unmistakable magic bytes: raw samples do not start like them by chance."""


class ListenAudio:
    def __init__(self, params: ListenParams, out_rate: int) -> None:
        self.params = params
        self.out_rate = out_rate
        self._head = b""
        self._decoder: HeaderlessStream | ContainerStream | None = None

    @property
    def format(self) -> str:
        """What the stream turned out to be, for logs ('' until known)."""
        if isinstance(self._decoder, ContainerStream):
            return f"{self._decoder.container}/{self._decoder.codec or '?'}"
        return self.params.encoding or ""

    async def push(self, data: bytes) -> np.ndarray:
        """The next binary frame's samples (AudioError when the bytes are not the declared audio)."""
        if self._decoder is None:
            self._head += data
            if len(self._head) < SNIFF_BYTES:
                return np.zeros(0, dtype=np.float32)
            data, self._head = self._head, b""
            self._decoder = self._open(data)
        return await self._feed(data)

    async def _feed(self, data: bytes) -> np.ndarray:
        if isinstance(self._decoder, ContainerStream):
            return await self._decoder.push(data)
        assert self._decoder is not None
        return self._decoder.push(data)

    def cut(self) -> np.ndarray:
        """Samples held back for look-ahead, released at a segment boundary (Finalize)."""
        return self._decoder.cut() if self._decoder is not None else np.zeros(0, dtype=np.float32)

    async def flush(self) -> np.ndarray:
        """End of the audio (CloseStream): everything left."""
        if self._decoder is None:  # a stream shorter than the sniffing window
            if not self._head:
                return np.zeros(0, dtype=np.float32)
            head, self._head = self._head, b""
            self._decoder = self._open(head)
            return np.concatenate([await self._feed(head), await self.flush()])
        if isinstance(self._decoder, ContainerStream):
            return await self._decoder.flush()
        return self._decoder.flush()

    def close(self) -> None:
        if isinstance(self._decoder, ContainerStream):
            self._decoder.close()

    def _open(self, head: bytes) -> HeaderlessStream | ContainerStream:
        container = sniff_container(head)
        encoding = self.params.encoding
        if encoding in HEADERLESS:
            if container == "wav":
                return ContainerStream("wav", self.out_rate)
            if container in _FILES:
                raise AudioDecodeError(f"the audio is a {container} file, but encoding={encoding} declares raw "
                                       "samples; omit encoding and sample_rate for containerized audio")
            assert self.params.sample_rate is not None  # parse_params requires it
            return HeaderlessStream(_HEADERLESS_NAMES[encoding], self.params.sample_rate, self.params.channels,
                                    self.out_rate)
        expected = _EXPECTED.get(encoding or "", tuple(FFMPEG_FORMAT))
        if container not in expected:
            what = f"a {container} file" if container else "not a container this server recognises"
            wanted = " or ".join(expected)
            raise AudioDecodeError(f"the audio is {what}; expected {wanted}"
                                   + ("" if encoding else "; raw audio needs encoding and sample_rate"))
        return ContainerStream(container, self.out_rate)
