"""Ephemeral client secrets: single use, refused once expired, with the reason in the refusal."""

from __future__ import annotations

import pytest

from app.realtime import secrets as store_module
from app.realtime.config import SessionConfig
from app.realtime.secrets import ClientSecretStore, SecretRefused


def test_a_secret_opens_one_session_then_is_refused() -> None:
    store = ClientSecretStore()
    secret = store.mint(SessionConfig(turn_detection=None), 60, "sess_1")
    assert secret.value.startswith("ek_") and len(secret.value) > 30
    assert store.redeem(secret.value).config == SessionConfig(turn_detection=None)
    with pytest.raises(SecretRefused, match="already used"):
        store.redeem(secret.value)
    with pytest.raises(SecretRefused, match="unknown"):
        store.redeem("ek_never-minted")


def test_an_expired_secret_is_refused_as_expired(monkeypatch: pytest.MonkeyPatch) -> None:
    store = ClientSecretStore()
    now = [1_000_000.0]
    monkeypatch.setattr(store_module.time, "time", lambda: now[0])
    kept, used = store.mint(SessionConfig(), 10, "a"), store.mint(SessionConfig(), 10, "b")
    now[0] += 9.9
    store.redeem(used.value)
    now[0] += 0.2
    for value in (kept.value, used.value):
        with pytest.raises(SecretRefused, match=r"expired|already used"):
            store.redeem(value)
    with pytest.raises(SecretRefused, match="expired"):
        store.redeem(kept.value)
