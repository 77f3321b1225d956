"""Automatic garbage collection paused while the server starts.

Start-up allocates millions of objects (torch's modules, pydantic models, the engine's weights and
tables) that all live as long as the process; the collector's passes over them find next to
nothing to free, and once torch is imported each full pass walks its whole heap. Measured on a
2-core VM: 0.42 s of collection (3 full passes, 42 middle, 464 young) in the imports of `oasr
serve` alone, about a tenth of its cold start (benchmarks/cold_start.py).

`oasr serve` pauses collection before its first heavy import, `app.main` pauses it around its own
imports, and the lifespan holds it paused while the engines build; when the server is ready the
lifespan resumes it, after the engine froze its heap (engine/gc_freeze.py), so serving collects as
usual. Only a pause this module made is ever undone: a process that disabled collection itself
keeps it disabled.
"""

from __future__ import annotations

import gc
import logging

logger = logging.getLogger(__name__)

_paused = False


def pause_collection() -> bool:
    """Disable automatic collection if it is on; True when this call paused it."""
    global _paused
    if _paused or not gc.isenabled():
        return False
    gc.disable()
    _paused = True
    return True


def resume_collection() -> None:
    """End the start-up pause, whoever began it (a no-op when none is active)."""
    global _paused
    if _paused:
        _paused = False
        gc.enable()
        logger.debug("garbage collection resumed after start-up")


def collection_paused() -> bool:
    """True while a start-up pause is active."""
    return _paused
