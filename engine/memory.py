"""What a device's memory holds: the one place the engine asks, and the one tests set.

The paged KV pools are planned from it (engine/cache/block_pool.py, reference design §6.1):
`resident` is read after the model is on the device, so it covers the weights, the CUDA context
and whatever other engines or processes hold; there is no separate weights term to get wrong.
A CPU has nothing to measure (None): its pools take the `cpu_cache_bytes` budget instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

MIB = 1024 * 1024


@dataclass(frozen=True)
class DeviceMemory:
    """One reading of a device's memory, in bytes."""

    total_bytes: int
    free_bytes: int

    @property
    def resident_bytes(self) -> int:
        """Held by anything at all: this process's models and pools, the CUDA context, other processes."""
        return self.total_bytes - self.free_bytes


MemoryProbe = Callable[[torch.device], "DeviceMemory | None"]


def driver_memory(device: torch.device) -> DeviceMemory | None:
    """The CUDA driver's reading (torch.cuda.mem_get_info); None on a device without one."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    return DeviceMemory(total_bytes=total, free_bytes=free)


_probe: MemoryProbe = driver_memory


def device_memory(device: torch.device) -> DeviceMemory | None:
    """The memory facts of `device` now: the driver's, or what a test set (`set_device_memory`)."""
    return _probe(device)


def set_device_memory(facts: DeviceMemory | MemoryProbe | None) -> MemoryProbe:
    """Replace the driver's reading, for every device: fixed facts, or a function of the device.
    None restores the driver. Returns the probe it replaced (to restore it after)."""
    global _probe
    previous = _probe
    if facts is None:
        _probe = driver_memory
    elif isinstance(facts, DeviceMemory):
        _probe = lambda device: facts  # noqa: E731 - one fixed reading
    else:
        _probe = facts
    return previous


__all__ = ["MIB", "DeviceMemory", "MemoryProbe", "device_memory", "driver_memory", "set_device_memory"]
