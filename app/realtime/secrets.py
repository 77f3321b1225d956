"""Ephemeral client secrets: short-lived, single-use keys for one transcription session.

A server holding the API key mints one (`POST /v1/realtime/client_secrets`, or the beta
`POST /v1/realtime/transcription_sessions`) and hands it to a browser, which opens
`/v1/realtime` with it instead of the key. The secret is bound to the session configuration
it was minted with (the session starts with it) and is redeemed by the first connection that
presents it: a second use, or a use after it expired, is refused. OpenAI lets a secret open
sessions until it expires; one use is stricter and is what lets a leaked secret do no harm
once its session has started.

Secrets live in this process's memory: with several replicas, a client must reach the replica
that minted its secret (the same holds for resuming a session).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from app.middleware import CLIENT_SECRET_PREFIX as PREFIX
from app.realtime.config import SessionConfig

DEFAULT_TTL_S = 600
"""GA default lifetime (10 minutes)."""
BETA_DEFAULT_TTL_S = 60
"""The beta endpoint's default lifetime (one minute)."""
MIN_TTL_S = 10
MAX_TTL_S = 7200
FORGET_AFTER_S = 3600.0
"""How long a used or expired secret is remembered, to say which it was."""


class SecretRefused(Exception):
    """The presented secret cannot open a session; the message says why."""


@dataclass(frozen=True)
class ClientSecret:
    value: str
    expires_at: float
    """Unix time (s) after which the secret opens no session."""
    session_id: str
    config: SessionConfig


class ClientSecretStore:
    def __init__(self) -> None:
        self._live: dict[str, ClientSecret] = {}
        self._spent: dict[str, tuple[str, float]] = {}
        """value -> (why it is no longer usable, when that was decided)."""

    @classmethod
    def of(cls, state: Any) -> ClientSecretStore:
        store: ClientSecretStore | None = getattr(state, "client_secrets", None)
        if store is None:
            store = cls()
            state.client_secrets = store
        return store

    def mint(self, config: SessionConfig, ttl_s: int, session_id: str) -> ClientSecret:
        self._prune()
        secret = ClientSecret(PREFIX + secrets.token_urlsafe(24), time.time() + ttl_s, session_id, config)
        self._live[secret.value] = secret
        return secret

    def redeem(self, value: str) -> ClientSecret:
        """The secret's session configuration; it is spent from now on. SecretRefused otherwise."""
        self._prune()
        secret = self._live.pop(value, None)
        if secret is None:
            why = self._spent.get(value, ("unknown client secret", 0.0))[0]
            raise SecretRefused(why)
        if time.time() >= secret.expires_at:
            self._spent[value] = ("client secret expired", time.monotonic())
            raise SecretRefused("client secret expired")
        self._spent[value] = ("client secret already used: a secret opens one session", time.monotonic())
        return secret

    def _prune(self) -> None:
        now = time.time()
        for value in [v for v, s in self._live.items() if now >= s.expires_at]:
            del self._live[value]
            self._spent[value] = ("client secret expired", time.monotonic())
        cutoff = time.monotonic() - FORGET_AFTER_S
        for value in [v for v, (_, when) in self._spent.items() if when < cutoff]:
            del self._spent[value]
