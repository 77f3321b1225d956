"""Byte-level BPE pieces as bytes: GPT-2's byte alphabet, which Whisper's and Qwen's
`tokenizer.json` share (each byte is stored as one printable character)."""

from __future__ import annotations

import functools


@functools.cache
def _unicode_to_byte() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the printable character each byte is stored as in
    tokenizer.json -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def piece_bytes(piece: str) -> bytes:
    """The exact bytes of a byte-level BPE piece (it may hold part of a UTF-8 character, which a
    decoded string would show as U+FFFD)."""
    table = _unicode_to_byte()
    return bytes(table[ch] for ch in piece if ch in table)


__all__ = ["piece_bytes"]
