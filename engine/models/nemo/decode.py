"""Decoding a batch of encoder outputs for the requests they belong to: the transducer greedy
search batched across requests and streams (its per-stream state read from and written back to
the state slots), the transducer beam search (NeMo's malsd_batch, engine/ops/malsd.py; requests
with equal beam width in one batched call, each request's beam carried in its own state), or
each request's CTC search. `peek` decodes frames past the committed ones (a buffered stream's
right context) without writing the state back (greedy rows only)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.models.nemo.beam import NemoTransducerNet
from engine.models.nemo.checkpoint import NemoModel
from engine.models.nemo.ctc import CtcDecoder
from engine.models.nemo.greedy import GreedyResult, greedy_label_looping, operator_weights
from engine.models.nemo.outputs import Hypothesis
from engine.models.nemo.state_slots import StateSlots
from engine.models.nemo.transducer import TransducerState
from engine.ops.malsd import MalsdBeam, malsd_search

PRED_H, PRED_C, PRED_OUT = "pred_h", "pred_c", "pred_out"


@dataclass(eq=False)
class DecodeState:
    """One request's search: greedy transducer tokens + counters, a transducer beam, or a CTC search."""

    hyp: Hypothesis | None = None
    ctc: CtcDecoder | None = None
    beam: MalsdBeam | None = None
    slot: int | None = None
    """Row of the state slots holding the prediction network state (streams only)."""
    frames_decoded: int = 0
    time_jump: int = 0
    started: bool = False


def transducer_slot_shapes(model: NemoModel) -> dict[str, tuple[int, ...]]:
    tr = model.transducer
    if tr is None:
        return {}
    layers, hidden = tr.cfg.pred_rnn_layers, tr.cfg.pred_hidden
    return {PRED_H: (layers, hidden), PRED_C: (layers, hidden), PRED_OUT: (tr.cfg.joint_hidden,)}


class BatchDecoder:
    def __init__(
        self, model: NemoModel, method: str, slots: StateSlots, max_symbols: int, beam_max_symbols: int = 10
    ) -> None:
        self.model = model
        self.method = method
        self.slots = slots
        self.max_symbols = max_symbols
        self.beam_max_symbols = beam_max_symbols
        self._start: dict[torch.device, TransducerState] = {}
        self._net: NemoTransducerNet | None = None

    @property
    def net(self) -> NemoTransducerNet:
        """The transducer as the beam search sees it (built on first use)."""
        if self._net is None:
            assert self.model.transducer is not None
            self._net = NemoTransducerNet(operator_weights(self.model.transducer))
        return self._net

    @torch.inference_mode()
    def decode(self, states: list[DecodeState], enc: torch.Tensor, lengths: torch.Tensor) -> None:
        """enc (B, T, D) and valid frames (B,) of the requests behind `states`, in order."""
        if self.method == "ctc":
            assert self.model.ctc is not None
            log_probs = self.model.ctc(enc).float().cpu()
            for i, st in enumerate(states):
                assert st.ctc is not None
                st.ctc.advance(log_probs[i, : int(lengths[i])])
            return
        greedy = [i for i, st in enumerate(states) if st.beam is None]
        if len(greedy) < len(states):
            self._decode_beams(states, enc, lengths)
            if not greedy:
                return
            states = [states[i] for i in greedy]
            index = torch.tensor(greedy, device=enc.device)
            enc, lengths = enc.index_select(0, index), lengths.index_select(0, index.to(lengths.device))
        tr = self.model.transducer
        assert tr is not None
        device = enc.device
        state = self._gather(states, device)
        result, state = greedy_label_looping(tr, enc, lengths.to(device), state, self.max_symbols)
        self._scatter(states, state)
        for i, st in enumerate(states):
            assert st.hyp is not None
            st.hyp.extend(result.tokens[i], result.frames[i], result.logprobs[i])

    def _decode_beams(self, states: list[DecodeState], enc: torch.Tensor, lengths: torch.Tensor) -> None:
        """The beam rows, one batched search per beam width."""
        widths: dict[int, list[int]] = {}
        for i, st in enumerate(states):
            if st.beam is not None:
                widths.setdefault(st.beam.beam_size, []).append(i)
        for rows in widths.values():
            index = torch.tensor(rows, device=enc.device)
            beams = [states[i].beam for i in rows]
            frames = self.net.project(enc.index_select(0, index))
            malsd_search(self.net, frames, lengths.index_select(0, index.to(lengths.device)), beams,  # type: ignore[arg-type]
                         self.beam_max_symbols, self.net.durations)  # fmt: skip

    @torch.inference_mode()
    def peek(self, states: list[DecodeState], enc: torch.Tensor, lengths: torch.Tensor) -> GreedyResult:
        """Transducer tokens of enc (B, T, D) decoded from a copy of each request's state: the
        state (slots, counters) stays where the committed frames left it."""
        tr = self.model.transducer
        assert tr is not None and self.method != "ctc"
        result, _ = greedy_label_looping(tr, enc, lengths.to(enc.device), self._gather(states, enc.device),
                                         self.max_symbols)  # fmt: skip
        return result

    def _gather(self, states: list[DecodeState], device: torch.device) -> TransducerState:
        fresh = self._start_state(len(states), device)
        slotted = [i for i, st in enumerate(states) if st.slot is not None and st.started]
        if slotted:
            idx = torch.tensor([states[i].slot for i in slotted], device=device)  # type: ignore[misc]
            rows = torch.tensor(slotted, device=device)
            fresh.h[:, rows] = self.slots.gather(PRED_H, idx).transpose(0, 1).to(fresh.h.dtype)
            fresh.c[:, rows] = self.slots.gather(PRED_C, idx).transpose(0, 1).to(fresh.c.dtype)
            fresh.pred[rows] = self.slots.gather(PRED_OUT, idx).to(fresh.pred.dtype)
        fresh.time_jump = torch.tensor([st.time_jump for st in states], device=device)
        fresh.frames_decoded = torch.tensor([st.frames_decoded for st in states], device=device)
        return fresh

    def _start_state(self, batch: int, device: torch.device) -> TransducerState:
        """The state after the start symbol for `batch` rows: one prediction-network step, computed
        once per device (not once per call, for rows that mostly come from the slots)."""
        start = self._start.get(device)
        if start is None:
            tr = self.model.transducer
            assert tr is not None
            start = self._start[device] = tr.initial_state(1, device)
        zeros = torch.zeros(batch, dtype=torch.long, device=device)
        return TransducerState(start.h.repeat(1, batch, 1), start.c.repeat(1, batch, 1), start.pred.repeat(batch, 1),
                               zeros, zeros.clone())  # fmt: skip

    def _scatter(self, states: list[DecodeState], state: TransducerState) -> None:
        jumps, decoded = state.time_jump.tolist(), state.frames_decoded.tolist()
        rows = [i for i, st in enumerate(states) if st.slot is not None]
        for i, st in enumerate(states):
            st.time_jump, st.frames_decoded, st.started = int(jumps[i]), int(decoded[i]), True
        if rows:
            idx = torch.tensor([states[i].slot for i in rows], device=state.h.device)  # type: ignore[misc]
            sel = torch.tensor(rows, device=state.h.device)
            self.slots.scatter(PRED_H, idx, state.h[:, sel].transpose(0, 1))
            self.slots.scatter(PRED_C, idx, state.c[:, sel].transpose(0, 1))
            self.slots.scatter(PRED_OUT, idx, state.pred[sel])
