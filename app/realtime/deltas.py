"""Append-only transcription deltas, as OpenAI's realtime protocol defines them: clients (the
openai SDK's examples, livekit-plugins-openai, pipecat) concatenate an item's
`...transcription.delta` values and expect the result to be its `completed` transcript.

So a delta carries only text that will not change: the engine's `committed` text as it grows,
and at the end the rest of the final transcript. Text that may still be revised travels only in
the opt-in `tentative` extension field, never in `delta`.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


class AppendOnlyDeltas:
    """Per open item: the text its deltas carried so far."""

    def __init__(self) -> None:
        self._sent: dict[str, str] = {}

    def sent(self, item_id: str) -> str:
        return self._sent.get(item_id, "")

    def partial(self, item_id: str, committed: str) -> str:
        """The delta for an interim result whose stable text is `committed` ("" when it adds none)."""
        sent = self.sent(item_id)
        if not committed.startswith(sent):  # committed text only grows; never take back what was sent
            logger.warning("item %s: committed text %r does not extend the deltas sent %r", item_id, committed, sent)
            return ""
        delta = committed[len(sent):]
        self._sent[item_id] = committed
        return delta

    def final(self, item_id: str, transcript: str) -> str:
        """The last delta of an item, so that its deltas join to `transcript`; forgets the item."""
        sent = self._sent.pop(item_id, "")
        if not transcript.startswith(sent):
            logger.warning("item %s: final transcript %r does not extend the deltas sent %r", item_id, transcript,
                           sent)
            return ""
        return transcript[len(sent):]

    def forget(self, item_id: str) -> None:
        self._sent.pop(item_id, None)


def tokens_within(token_bytes: list[bytes], text: str) -> int:
    """How many leading tokens spell a prefix of `text` (the text the deltas carried), so their
    log-probabilities go out with it; a token split mid-character counts once it is whole."""
    want = text.strip()
    spelled = b""
    count = 0
    for i, piece in enumerate(token_bytes, 1):
        spelled += piece
        so_far = spelled.decode("utf-8", errors="ignore").strip()
        if not want.startswith(so_far):
            break
        count = i
    return count
