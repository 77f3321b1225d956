"""Where the shared dev speech lives: `../shared/data/speech` beside the checkout (CI lays a copy
of shared/ there), overridable with OASR_SPEECH_DATA."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEECH_DATA = Path(os.environ.get("OASR_SPEECH_DATA", REPO.parent / "shared" / "data" / "speech"))
