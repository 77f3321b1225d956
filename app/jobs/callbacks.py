"""Webhook callback URLs: checked against `--callback-allowed-hosts` when a job is submitted,
so the server cannot be made to send requests to arbitrary hosts."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from app.jobs.errors import InvalidJobError


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    host = host.lower().rstrip(".")
    for pattern in allowed:
        pattern = pattern.lower().rstrip(".")
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and host != pattern[2:]:
                return True
        elif host == pattern:
            return True
    return False


def check_callback_url(url: str, allowed: Sequence[str]) -> str:
    """The URL, or InvalidJobError when its scheme or host is not allowed."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        _ = parts.port  # raises on a malformed port
    except ValueError as exc:
        raise InvalidJobError(f"callback.url {url!r} is not a valid URL") from exc
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidJobError(f"callback.url must be an http:// or https:// URL, got {url!r}")
    if parts.username or parts.password:
        raise InvalidJobError("callback.url must not carry credentials; sign deliveries with callback.secret")
    if not host_allowed(host, allowed):
        listed = ", ".join(allowed) if allowed else "none are allowed (--callback-allowed-hosts is unset)"
        raise InvalidJobError(f"callback host {host!r} is not on this server's callback allow-list ({listed})")
    return url
