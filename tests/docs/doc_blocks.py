"""Fenced code blocks of the user docs that a test runs.

A block is run when the line right before its fence is a marker comment:

    <!-- test -->                    run it; it must exit 0
    <!-- test: transcript -->        ...and its output must be the sample clip's transcript
    <!-- test: needs grpcurl -->     run it only where the named program is installed

Examples talk to `http://localhost:8000` / `ws://localhost:8000` / `localhost:50051` and read
`speech.flac`, exactly as a reader runs them; the test rewrites the addresses to its own server
and runs each block in a folder holding the sample clip under that name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/api.md", "docs/streaming.md", "docs/architecture.md")
MARKER = re.compile(r"^<!--\s*test(?::\s*(?P<args>[^>]*?))?\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)")
LANGUAGES = ("bash", "python")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    """1-based line of the opening fence."""
    lang: str
    code: str
    expect_transcript: bool
    needs: str | None

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(doc: str) -> list[Block]:
    lines = (ROOT / doc).read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        marker = MARKER.match(lines[i])
        if marker is None:
            i += 1
            continue
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if fence is None:
            raise ValueError(f"{doc}:{i + 1}: a test marker must sit right above a code fence")
        lang = fence["lang"]
        if lang not in LANGUAGES:
            raise ValueError(f"{doc}:{i + 2}: tested blocks are {LANGUAGES}, got {lang!r}")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{doc}:{i + 2}: unclosed code fence")
        args = (marker["args"] or "").split()
        needs = args[args.index("needs") + 1] if "needs" in args else None
        found.append(Block(doc, i + 2, lang, "\n".join(lines[i + 2:end]) + "\n", "transcript" in args, needs))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for doc in DOCS if (ROOT / doc).exists() for b in blocks(doc)]
