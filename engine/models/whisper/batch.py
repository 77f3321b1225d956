"""Continuous batching of the Whisper decoder.

All rows of all running window jobs decode together, one token per step. New groups join
after a batched prefill of their prompts; finished groups leave by compacting the cache.
Beam groups reorder their own rows (self-attention K/V only: every beam of a group shares
the same audio, whose cross-attention K/V the cache holds once per group).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import Tensor

from engine.models.whisper.cache import DecoderCache, own_storage
from engine.models.whisper.decoding import DecodeGroup, ruled_log_softmax
from engine.models.whisper.model import TextDecoder
from engine.models.whisper.window import WindowJob

logger = logging.getLogger(__name__)


class DecodeBatch:
    def __init__(self, decoder: TextDecoder, no_speech_token: int, device: torch.device):
        self.decoder = decoder
        self.no_speech_token = no_speech_token
        self.device = device
        self.groups: list[DecodeGroup] = []
        self.cache: DecoderCache | None = None

    @property
    def num_rows(self) -> int:
        return sum(g.num_rows for g in self.groups)

    def __len__(self) -> int:
        return len(self.groups)

    # ---- joining ----

    def join(
        self,
        groups: list[DecodeGroup],
        audio_features: list[Tensor],
        audio_positions: list[int] | None = None,
        silence: tuple[list[Tensor], list[Tensor]] | None = None,
        shared_silence: bool = True,
        projected: list[tuple[list[Tensor], list[Tensor]] | None] | None = None,
    ) -> list[tuple[list[Tensor], list[Tensor]]]:
        """Prefill the prompts of new groups in one forward and add their rows.
        audio_features[i] is (S, C) for groups[i]; with `audio_positions` and the `silence` K/V,
        only its first audio_positions[i] positions are its own (context.py; `shared_silence` and
        `projected`, groups' cross K/V projected already, as in TextDecoder.new_cache). Returns
        each group's cross K/V per layer (1, H, own positions, Dh), for a later pass over the same
        window (word alignment)."""
        if not groups:
            return []
        feats = torch.stack(audio_features)  # (G, S, C): a group's beams share its cross K/V
        max_len = max(len(g.prefix) + len(g.draft) for g in groups)
        cache = self.decoder.new_cache(feats, capacity=max_len + 16, audio_positions=audio_positions, silence=silence,
                                       shared_silence=shared_silence, repeats=[g.num_rows for g in groups],
                                       projected=projected)
        tokens: list[list[int]] = []
        logit_rows: list[int] = []
        logit_positions: list[int] = []
        for g in groups:
            read = g.prefix + g.draft
            pad = max_len - len(read)
            for _ in range(g.num_rows):
                # right-pad by repeating the last token at increasing positions; the padding
                # writes K/V beyond the row's length, which its causal mask never reads
                row = len(tokens)
                tokens.append(read + [read[-1]] * pad)
                # the logits at the start of transcript (no-speech), at the prefix's end and at
                # every draft token
                last = len(g.prefix) - 1
                wanted = [g.sot_index, *range(last, last + len(g.draft) + 1)]
                logit_rows += [row] * len(wanted)
                logit_positions += wanted
        tok = torch.tensor(tokens, device=self.device)
        pos = torch.arange(max_len, device=self.device).expand(len(tokens), max_len)
        wanted_at = (torch.tensor(logit_rows, device=self.device), torch.tensor(logit_positions, device=self.device))
        logits = self.decoder(tok, pos, cache, logit_index=wanted_at)  # (sum of wanted, V)
        last_logits, drafts = [], {}
        at = 0
        for i, g in enumerate(groups):
            g.set_no_speech(logits[at], self.no_speech_token)  # its beams' prefixes are the same
            for _ in range(g.num_rows):
                last_logits.append(logits[at + 1])
                if g.draft:
                    drafts[i] = logits[at + 2 : at + 2 + len(g.draft)]
                at += 2 + len(g.draft)
        sources = self._advance_groups(groups, torch.stack(last_logits), drafts)
        held = cache.held or [cache.cross_capacity] * len(groups)
        cross = [([k[i : i + 1, :, :n] for k in cache.cross_k], [v[i : i + 1, :, :n] for v in cache.cross_v])
                 for i, n in enumerate(held)]
        cache.reorder_rows(torch.tensor(sources, device=self.device), max_len)
        if self.cache is None:
            own_storage(cache)
            self.cache = cache
        else:
            self.cache.extend(cache)
        self.groups.extend(groups)
        return cross

    # ---- stepping ----

    def step(self, on_group_error: Callable[[DecodeGroup, Exception], None]) -> list[DecodeGroup]:
        """Decode one token for every live row. Returns the groups that finished (now removed).
        A forward that fails is retried one group at a time; groups that still fail are handed
        to `on_group_error` and dropped, the rest carry on."""
        live = [g for g in self.groups if not g.done]
        if live and self.cache is not None:
            try:
                self._step_rows(self.groups)
            except Exception as exc:  # isolate the culprit
                logger.warning("decoder step failed for a batch of %d groups (%s); retrying one by one",
                               len(self.groups), exc)
                self._step_isolated(on_group_error)
        return self._evict_done()

    def _step_rows(self, groups: list[DecodeGroup], cache: DecoderCache | None = None) -> None:
        cache = cache or self.cache
        assert cache is not None
        tokens = [t for g in groups for t in g.last_tokens()]
        positions = [p for g in groups for p in g.positions()]
        tok = torch.tensor(tokens, device=self.device)[:, None]
        pos = torch.tensor(positions, device=self.device)[:, None]
        logits = self.decoder(tok, pos, cache)[:, 0]  # (N, V)
        sources = self._advance_groups(groups, logits)
        if sources != list(range(len(sources))):
            cache.reorder_rows(torch.tensor(sources, device=self.device), max(positions) + 1)

    def _advance_groups(self, groups: list[DecodeGroup], logits: Tensor,
                        drafts: dict[int, Tensor] | None = None) -> list[int]:
        """Let each group pick its next tokens from its rows' `logits` (N, V) (and groups[i] with a
        draft from `drafts[i]` (D, V) too: the logits after each draft token, see
        DecodeGroup.accept_draft); returns the global row gather index. The logit rules run in one
        call for every row of every group."""
        drafts = drafts or {}
        pieces: list[Tensor] = []
        seqs: list[list[int]] = []
        flags: list[bool] = []
        eot_floors: list[int | None] = []
        row = 0
        for i, g in enumerate(groups):
            if not g.done:
                pieces.append(logits[row : row + g.num_rows])
                seqs += g.ruled_sequences()
                if i in drafts:
                    pieces.append(drafts[i])
                    seqs += [g.ruled_sequences()[0] + g.draft[:j] for j in range(1, len(g.draft) + 1)]
                flags += [g.timestamps] * (len(seqs) - len(flags))
                eot_floors += [g.eot_floor] * (len(seqs) - len(eot_floors))
            row += g.num_rows
        if not pieces:
            return list(range(row))
        rules = next(g for g in groups if not g.done).rules
        ruled, logprobs = ruled_log_softmax(rules, torch.cat(pieces) if len(pieces) > 1 else pieces[0], seqs, flags,
                                            eot_floors)
        sources: list[int] = []
        row = ruled_row = 0
        for i, g in enumerate(groups):
            if g.done:  # finished rows idle until eviction
                sources.extend(range(row, row + g.num_rows))
            elif i in drafts:
                span = slice(ruled_row, ruled_row + 1 + len(g.draft))
                g.accept_draft(ruled[span], logprobs[span])
                sources.append(row)
                ruled_row = span.stop
            else:
                span = slice(ruled_row, ruled_row + g.num_rows)
                sources.extend(row + s for s in g.advance(ruled[span], logprobs[span]))
                ruled_row = span.stop
            row += g.num_rows
        return sources

    def _step_isolated(self, on_group_error: Callable[[DecodeGroup, Exception], None]) -> None:
        assert self.cache is not None
        failed: list[tuple[DecodeGroup, Exception]] = []
        row = 0
        for item, g in enumerate(list(self.groups)):
            index = torch.arange(row, row + g.num_rows, device=self.device)
            row += g.num_rows
            if g.done:
                continue
            sub = self.cache.item_cache(item, index)
            try:
                self._step_rows([g], sub)
            except Exception as exc:
                g.done = True
                failed.append((g, exc))
                continue
            self.cache.ensure_capacity(sub.capacity)
            for mine, theirs in ((self.cache.self_k, sub.self_k), (self.cache.self_v, sub.self_v)):
                for layer in range(len(mine)):
                    mine[layer][index, :, : theirs[layer].shape[2]] = theirs[layer]
        # only now: the handler releases the request, which may evict groups and compact the
        # cache, and this loop indexes rows by the layout it started with
        for g, exc in failed:
            on_group_error(g, exc)

    def _evict_done(self) -> list[DecodeGroup]:
        done = [g for g in self.groups if g.done]
        if not done:
            return []
        keep = fill_from_tail([not g.done for g in self.groups])  # a group is its cache's item i
        self.groups = [self.groups[i] for i in keep]
        if not self.groups:
            self.cache = None
        elif self.cache is not None:
            self.cache.select_items(keep)
            self._shrink()
        return done

    def _shrink(self) -> None:
        """Drop cache positions no live row can reach, so attention cost follows live lengths."""
        assert self.cache is not None
        needed = max(max(g.positions()) for g in self.groups) + 2
        if needed * 2 < self.cache.capacity:
            self.cache.resize(needed)

    def evict_removed(self) -> None:
        """Free the rows of groups dropped by `remove_job` (withdrawn fallback attempts, aborts)
        now rather than at the next step: an idle engine would otherwise keep them. Only when no
        finished group still waits to be returned by `step()`, which must not lose it."""
        done = [g for g in self.groups if g.done]
        if done and all(g.result is None for g in done):
            self._evict_done()

    def remove_job(self, job: WindowJob) -> None:
        """Drop a job's group (abort, error): it idles until the next step evicts it. Evicting here
        would also evict, and lose, groups that finished in the current step but were not yet
        returned by `step()`."""
        for g in self.groups:
            if g.job is job:
                g.done = True
                g.result = None  # nothing to report for it


def fill_from_tail(alive: list[bool]) -> list[int]:
    """The order of the live entries after evicting the others: each hole among the first
    sum(alive) places takes a live entry from beyond them, so only those move (the cache
    compacts in place). Order changes no transcript: offline items attend item by item
    (cross_attention.py), and live items' rounding already depends on their batch mates."""
    count = sum(alive)
    tail = [i for i in range(count, len(alive)) if alive[i]]
    return [i if alive[i] else tail.pop() for i in range(count)]
