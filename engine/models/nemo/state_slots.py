"""Fixed-size per-stream state in preallocated rows (NeMo's slot-based cache manager, seed 003):
the convolution caches (`cache_last_time`) and the transducer decoder state of every live stream.

One tensor per kind covers every slot, so memory is allocated once; a batched step gathers the
rows of its streams with one index and writes them back with `index_copy_`. A stream takes a slot
at admission and gives it back (zeroed) when it finishes or is aborted. The engine thread owns
it: no locks.
"""

from __future__ import annotations

import torch


class StateSlots:
    def __init__(
        self, num_slots: int, shapes: dict[str, tuple[int, ...]], dtype: torch.dtype, device: torch.device
    ) -> None:
        self.num_slots = num_slots
        self.tensors = {name: torch.zeros((num_slots, *shape), dtype=dtype, device=device)
                        for name, shape in shapes.items()}  # fmt: skip
        self._free = list(range(num_slots - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def free_ids(self) -> set[int]:
        return set(self._free)

    def allocate(self) -> int | None:
        return self._free.pop() if self._free else None

    def free(self, slot: int) -> None:
        for t in self.tensors.values():
            t[slot].zero_()
        self._free.append(slot)

    def gather(self, name: str, slots: torch.Tensor) -> torch.Tensor:
        """(len(slots), *shape)."""
        return self.tensors[name].index_select(0, slots)

    def scatter(self, name: str, slots: torch.Tensor, values: torch.Tensor) -> None:
        self.tensors[name].index_copy_(0, slots, values.to(self.tensors[name].dtype))
