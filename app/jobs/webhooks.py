"""Webhook delivery: the finished operation's JSON POSTed to the job's callback URL.

Headers: `X-OASR-Signature: sha256=<hex HMAC-SHA256 of the body keyed by callback.secret>`,
`X-OASR-Delivery` (one id per finished job, the same on every retry, so a receiver can drop
duplicates) and `X-OASR-Delivery-Attempt` (1, 2, ...). A 2xx answer delivers; anything else
(another status, a timeout, a refused connection) is retried after `webhook_backoff_secs`,
doubling each time, until `webhook_max_attempts`, then the delivery is FAILED. Redirects are
not followed (they could leave the allow-list), and the host is checked against the
allow-list again before every attempt.

Deliveries are claimed from the store like jobs, so with several replicas each attempt is
made by one of them, and a restart resumes pending deliveries.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from typing import Any

from app.jobs.callbacks import check_callback_url
from app.jobs.errors import InvalidJobError
from app.jobs.model import Job, WebhookState
from app.jobs.spec import JobCodec
from app.jobs.store import SqlJobStore

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-OASR-Signature"
DELIVERY_HEADER = "X-OASR-Delivery"
ATTEMPT_HEADER = "X-OASR-Delivery-Attempt"
CLAIM_BATCH = 16
"""Deliveries one replica takes per round."""


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str) -> bool:
    """What a receiver does (documented in docs/api.md); constant-time."""
    return hmac.compare_digest(sign(secret, body), header)


class WebhookSender:
    def __init__(self, store: SqlJobStore, codec: JobCodec, *, allowed_hosts: list[str], max_attempts: int,
                 backoff_s: float, timeout_s: float, metrics: Any):
        self.store = store
        self.codec = codec
        self.allowed_hosts = allowed_hosts
        self.max_attempts = max(1, max_attempts)
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.metrics = metrics
        self._client: Any = None
        """httpx.AsyncClient, made at the first delivery: importing httpx costs the server's start-up
        ~0.8 s (its command-line module pulls in rich), and most servers deliver no webhook."""

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def deliver_due(self) -> int:
        """Attempt every delivery that is due now; return how many were attempted."""
        import asyncio

        # held for longer than one attempt can take, so no other replica retries it meanwhile
        jobs = await asyncio.to_thread(self.store.claim_webhooks, CLAIM_BATCH, self.timeout_s * 2 + 5)
        for job in jobs:
            await self._attempt(job)
        return len(jobs)

    async def _attempt(self, job: Job) -> None:
        import asyncio

        attempt = job.webhook_attempts + 1
        error = await self._post(job, attempt)
        if error is None:
            state, next_at, outcome = WebhookState.DELIVERED, None, "delivered"
        elif attempt >= self.max_attempts:
            state, next_at, outcome = WebhookState.FAILED, None, "failed"
        else:
            state, next_at, outcome = WebhookState.PENDING, time.time() + self.backoff_s * 2 ** (attempt - 1), "retry"
        self.metrics.webhook_deliveries.labels(outcome=outcome).inc()
        if error is not None:
            logger.warning("webhook of %s, attempt %d/%d: %s", job.name, attempt, self.max_attempts, error)
        await asyncio.to_thread(self.store.record_webhook, job.name, state=state, attempts=attempt, error=error,
                                next_at=next_at)

    async def _post(self, job: Job, attempt: int) -> str | None:
        """None when delivered, else why not."""
        assert job.callback_url is not None
        try:
            check_callback_url(job.callback_url, self.allowed_hosts)
        except InvalidJobError as exc:
            return exc.message
        body = json.dumps(self.codec.operation_json(job), separators=(",", ":")).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "oasr-webhooks",
            DELIVERY_HEADER: job.webhook_delivery_id or job.name,
            ATTEMPT_HEADER: str(attempt),
        }
        if job.callback_secret:
            headers[SIGNATURE_HEADER] = sign(job.callback_secret, body)
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False)
        try:
            response = await self._client.post(job.callback_url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"[:500]
        if 200 <= response.status_code < 300:
            return None
        return f"HTTP {response.status_code}"
