"""The live realtime sessions of one app: their shutdown drain, and the ones waiting to resume.

A session whose client dropped (any close but a deliberate 1000) is parked for the grace
period with its engine stream; a reconnect bearing its resume token takes it back. When the grace
runs out, or the session ends any other way, `end` frees it once (engine requests, inflight
permit) and its token is remembered as ended for a while, so a late reconnect learns that the
session is gone (4408) rather than that the token is wrong (4401).

Sessions live in one process and die with it (a restart, a kill -9). Each token names the
process that issued it (`rst_<generation>.<secret>`, the generation random per registry), so a
client resuming after the server restarted is told that its session ended with the server
(4408) instead of being told its token is wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app.realtime.session import RealtimeSession

logger = logging.getLogger(__name__)

FORGET_ENDED_S = 600.0
"""How long the token of an ended session is remembered (to refuse it as 'ended', not 'unknown')."""


@dataclass(eq=False)
class _Entry:
    session: RealtimeSession
    token: str | None
    finish: Callable[[], Awaitable[None]]
    grace_task: asyncio.Task[None] | None = None
    ended: bool = False


TOKEN_PREFIX = "rst_"


class SessionRegistry:
    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        """How long a dropped session waits for its client (0: sessions are not resumable)."""
        self.generation = secrets.token_hex(4)
        """This process's mark in the tokens it issues (module doc)."""
        self._entries: dict[RealtimeSession, _Entry] = {}
        self._by_token: dict[str, _Entry] = {}
        self._ended: dict[str, float] = {}

    @classmethod
    def of(cls, state: Any) -> SessionRegistry:
        registry: SessionRegistry | None = getattr(state, "realtime_sessions", None)
        if registry is None:
            registry = cls(state.settings.realtime_resume_grace_secs)
            state.realtime_sessions = registry
            hooks = getattr(state, "drain_hooks", None)
            if hooks is not None:
                hooks.append(registry.drain)
        return registry

    @property
    def sessions(self) -> list[RealtimeSession]:
        return list(self._entries)

    def add(self, session: RealtimeSession, finish: Callable[[], Awaitable[None]]) -> dict[str, Any] | None:
        """Register a new session; `finish` frees it. Returns its resume info (None: not resumable)."""
        token = f"{TOKEN_PREFIX}{self.generation}.{secrets.token_urlsafe(24)}" if self.grace_s > 0 else None
        entry = _Entry(session, token, finish)
        self._entries[session] = entry
        if token is not None:
            self._by_token[token] = entry
        return self.resume_info(session)

    def resume_info(self, session: RealtimeSession) -> dict[str, Any] | None:
        entry = self._entries.get(session)
        if entry is None or entry.token is None:
            return None
        return {"token": entry.token, "grace_seconds": self.grace_s}

    def lookup(self, token: str) -> tuple[RealtimeSession | None, bool]:
        """(the session the token resumes, whether the token named a session that has ended)."""
        self._forget_old()
        entry = self._by_token.get(token)
        if entry is None or entry.ended:
            return None, token in self._ended
        return entry.session, False

    def issued_by_another_process(self, token: str) -> bool:
        """Whether `token` has the shape of a resume token from another process of this server
        (one that restarted, or another replica): its session is not here and cannot come back."""
        generation, dot, _ = token.removeprefix(TOKEN_PREFIX).partition(".")
        return token.startswith(TOKEN_PREFIX) and bool(dot) and generation != self.generation

    def park(self, session: RealtimeSession) -> None:
        """The client dropped: keep the session for the grace period."""
        entry = self._entries.get(session)
        if entry is None or entry.ended:
            return
        if entry.grace_task is not None:
            entry.grace_task.cancel()
        entry.grace_task = asyncio.ensure_future(self._expire(entry))
        logger.info("realtime session %s: client dropped; resumable for %g s", session.id, self.grace_s)

    def claim(self, session: RealtimeSession) -> None:
        """A client resumed the session: it no longer expires."""
        entry = self._entries.get(session)
        if entry is not None and entry.grace_task is not None:
            entry.grace_task.cancel()
            entry.grace_task = None

    async def end(self, session: RealtimeSession) -> None:
        """Free the session (once), whatever ended it."""
        entry = self._entries.pop(session, None)
        if entry is None or entry.ended:
            return
        entry.ended = True
        if entry.token is not None:
            self._by_token.pop(entry.token, None)
            self._ended[entry.token] = time.monotonic()
        task, entry.grace_task = entry.grace_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        await entry.finish()

    async def _expire(self, entry: _Entry) -> None:
        await asyncio.sleep(self.grace_s)
        logger.info("realtime session %s: not resumed within %g s; ending it", entry.session.id, self.grace_s)
        entry.grace_task = None
        await self.end(entry.session)

    async def drain(self) -> None:
        """Shutdown: close every connected session with 1001 right away (the ASGI server closes
        WebSockets itself moments later), failing items still being transcribed; end the parked ones."""
        entries = list(self._entries.values())
        if entries:
            logger.info("closing %d realtime session(s) for shutdown", len(entries))
        parked = [e for e in entries if e.session.sender.websocket is None]
        await asyncio.gather(*(e.session.drain() for e in entries), return_exceptions=True)
        for entry in parked:
            with contextlib.suppress(Exception):
                await self.end(entry.session)

    def _forget_old(self) -> None:
        cutoff = time.monotonic() - FORGET_ENDED_S
        for token in [t for t, when in self._ended.items() if when < cutoff]:
            del self._ended[token]
