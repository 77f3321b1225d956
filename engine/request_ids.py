"""The ids of the requests an engine has accepted and not yet finished.

Unlike the rest of the engine's state, which only the thread driving `step()` touches, these ids
are read and claimed by any thread: a caller learns at once that its id is taken, unknown, or
that the engine is shut down, before its command is queued. So this small set has its own lock.
"""

from __future__ import annotations

import threading
import uuid

from engine.errors import EngineShutdownError, InvalidRequestError, UnknownRequestError

GENERATED_ID_HEX = 12  # hex digits of a generated id's random part (48 bits)


class RequestIds:
    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False

    def claim(self, request_id: str | None) -> str:
        """Take `request_id` (or a generated one) for a new request; refused once closed or while
        the id is in use."""
        rid = request_id or f"req-{uuid.uuid4().hex[:GENERATED_ID_HEX]}"
        with self._lock:
            if self._closed:
                raise EngineShutdownError("engine is shut down")
            if rid in self._ids:
                raise InvalidRequestError(f"request id {rid!r} is already in use")
            self._ids.add(rid)
        return rid

    def check(self, request_id: str) -> None:
        """UnknownRequestError unless `request_id` is accepted and not finished."""
        with self._lock:
            if request_id not in self._ids:
                raise UnknownRequestError(f"unknown request id {request_id!r}")

    def discard(self, request_id: str) -> None:
        """The request finished: its id may be used again."""
        with self._lock:
            self._ids.discard(request_id)

    def close(self) -> bool:
        """Refuse new ids from now on; False if already closed (shutdown is idempotent)."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            return True

    def clear(self) -> None:
        with self._lock:
            self._ids.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._ids)


__all__ = ["RequestIds"]
