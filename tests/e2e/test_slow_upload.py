"""Fault (d) of issue 35: a client trickling its upload a byte at a time is cut off with 408 by the
upload deadline (`upload_timeout_secs`) and never holds an engine slot meanwhile. A real server
(fake-family checkpoint: the HTTP layer is under test, not the model) with one in-flight permit:
while a trickler sends, a normal request is still served."""

from __future__ import annotations

import io
import select
import socket
import threading
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import soundfile as sf

from engine.models.fake import write_checkpoint
from tests.e2e.conftest import ServerProcess, start_server

UPLOAD_TIMEOUT_S = 5.0  # long beside the 0.5 s request served meanwhile, short for a test
DECLARED_BYTES = 64_000  # the body the trickler announces and never finishes
TRICKLE_PAUSE_S = 0.05  # between single bytes
BOUNDARY = "trickle"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("slow-upload")
    ckpt = write_checkpoint(str(tmp / "ckpt"))
    srv = start_server(tmp, env={"OASR_CKPT_DIR": ckpt, "OASR_MAX_INFLIGHT": "1",
                                 "OASR_UPLOAD_TIMEOUT_SECS": str(UPLOAD_TIMEOUT_S)})
    yield srv
    srv.terminate()


def wav(seconds: float) -> bytes:
    t = np.arange(int(seconds * 16000)) / 16000
    buf = io.BytesIO()
    sf.write(buf, 0.3 * np.sin(2 * np.pi * 220 * t), 16000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


class Trickler(threading.Thread):
    """Sends a request's head, then its body one byte per TRICKLE_PAUSE_S until the server answers."""

    def __init__(self, port: int, path: str, content_type: str, prefix: bytes = b""):
        super().__init__(daemon=True)
        self.head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
                     f"Content-Length: {DECLARED_BYTES}\r\n\r\n").encode() + prefix
        self.port = port
        self.sent = 0
        self.response = b""
        self.closed = False
        self.sending = threading.Event()
        self.events: list[str] = []

    def run(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as sock:
            sock.sendall(self.head)
            self.sent = len(self.head)
            while True:
                readable, _, _ = select.select([sock], [], [], TRICKLE_PAUSE_S)
                if readable:
                    self.events.append("trickler answered")
                    break
                try:
                    sock.sendall(b"\0")
                except OSError:
                    break
                self.sent += 1
                self.sending.set()
            try:
                while chunk := sock.recv(65536):  # the response, then the server's close
                    self.response += chunk
            except ConnectionResetError:
                # the server closed with our last trickled bytes unread: the kernel answers those
                # with a reset, which is a close all the same
                pass
            self.closed = True


@pytest.mark.parametrize(("path", "content_type", "prefix"), [
    ("/v1/speech:recognize?encoding=AUTO", "audio/wav", b""),
    ("/v1/audio/transcriptions", f"multipart/form-data; boundary={BOUNDARY}",
     (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
      "Content-Type: audio/wav\r\n\r\n").encode()),
], ids=["google", "openai"])
def test_a_trickled_upload_is_cut_off_and_holds_no_engine_slot(server: ServerProcess, path: str,
                                                               content_type: str, prefix: bytes) -> None:
    trickler = Trickler(server.port, path, content_type, prefix)
    trickler.start()
    assert trickler.sending.wait(30)
    # the one in-flight permit is free for a whole request while the trickler is mid-body
    r = httpx.post(f"{server.base_url}/v1/speech:recognize", params={"encoding": "AUTO"}, content=wav(0.5),
                   timeout=60)
    trickler.events.append("other request served")
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["alternatives"][0]["transcript"] == "loud loud loud loud loud"
    trickler.join(60)
    assert trickler.events == ["other request served", "trickler answered"]  # served while it trickled
    status_line = trickler.response.split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 408 Request Timeout", trickler.response[:300]
    assert b"--upload-timeout-secs" in trickler.response
    assert trickler.sent < len(trickler.head) + DECLARED_BYTES - len(prefix)  # cut off mid-body
    assert trickler.closed  # and the connection closed: the socket is not held either
