"""Token strings -> text and words, by the rules of FunASR's `sentence_postprocess` for
character/word-piece token lists (what its Paraformer returns as `text` and `timestamp`).

- CJK characters and digits ("Chinese" to FunASR) stand alone, joined without spaces;
- a piece ending in `@@` continues into the next piece; other alphabetic tokens end a word, and
  words are separated by one space (a space before a following CJK character is dropped);
- runs of single ASCII letters separated by spaces become one upper-case abbreviation ("u n y" ->
  "UNY");
- `<s>`, `</s>`, `<unk>` and `<OOV>` are dropped; any other token is kept as it is.

With times (one span per token) the words carry merged spans, and the text FunASR returns then
joins every word with a space; `text` here is always the plain form FunASR returns without
timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass

SPECIAL = frozenset({"<s>", "</s>", "<unk>", "<OOV>"})
SPACE = " "


def _cjk(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff" or "0" <= ch <= "9" or ch == "@"


def _strip(token: str) -> str:
    for s in (" ", "</s>", "<s>", "<unk>", "<OOV>"):
        token = token.replace(s, "")
    return token


def _all_cjk(items: list[str] | str) -> bool:
    parts = [_strip(x) for x in items]
    return bool(parts) and all(_cjk(p) for p in parts)


def _all_alpha(items: list[str] | str) -> bool:
    parts = [_strip(x) for x in items]
    if not parts:
        return False
    for p in parts:
        if not p.isalpha() and p != "'":
            return False
        if p.isalpha() and _cjk(p):
            return False
    return True


def _letter(w: str) -> bool:
    return len(w) == 1 and w.encode("utf-8").isalpha()


Piece = tuple[str, list[int]]
"""A word (or SPACE) and the indices of the tokens it was made of."""


@dataclass(frozen=True)
class Words:
    text: str
    """FunASR's `text` without timestamps."""
    words: list[str]
    groups: list[list[int]]
    """Indices (into the given tokens) of each word's tokens."""
    spans: list[tuple[int, int]] | None
    """(start_ms, end_ms) per word, when token spans were given (may be shorter than `words`,
    as FunASR's are when the fires ran out)."""


def _pieces(tokens: list[str], spans: list[tuple[int, int]] | None) -> tuple[list[Piece], list[tuple[int, int]]]:
    """Words interleaved with SPACE separators, and the spans of the words that got one."""
    kept = [i for i, t in enumerate(tokens) if t not in SPECIAL]
    items = [tokens[i] for i in kept]
    if _all_cjk(items):
        return [(t.replace(" ", ""), [k]) for t, k in zip(items, kept, strict=True)], list(spans or [])
    alpha_only = _all_alpha(items)
    out: list[Piece] = []
    times: list[tuple[int, int]] = []
    word, pending = "", []  # a word being glued from `@@` pieces
    glued, follow = False, True  # glued: a SPACE ends `out`; follow: the next token starts a span
    begin = end = -1
    for i, (tok, k) in enumerate(zip(items, kept, strict=True)):
        if follow and spans is not None:
            begin, end = spans[i]
        if not alpha_only and _all_cjk(tok):
            if glued:
                out.pop()  # no space between a word and a CJK character
            out.append((tok, [k]))
            glued, follow = False, True
            if spans is not None:
                times.append((begin, end))
                begin = end
        elif "@@" in tok:
            word += tok.replace("@@", "")
            pending.append(k)
            glued = False
            if spans is not None:
                follow, end = False, spans[i][1]
        elif alpha_only or _all_alpha(tok):
            out += [(word + tok, [*pending, k]), (SPACE, [])]
            word, pending, glued, follow = "", [], True, True
            if spans is not None:
                end = spans[i][1]
                times.append((begin, end))
                begin = end
        else:
            out.append((tok, [k]))
    return out, times


def _abbreviations(pieces: list[Piece], spans: list[tuple[int, int]] | None) -> tuple[list[Piece], list[tuple[int, int]]]:
    """Merge runs of single letters (FunASR's `abbr_dispose`, its quirks included)."""
    words = [w for w, _ in pieces]
    n = len(words)
    begins: list[int] = []
    ends: list[int] = []
    last = -1
    for num in range(n):
        if num <= last or not _letter(words[num]):
            continue
        if num + 2 < n and words[num + 1] == SPACE and _letter(words[num + 2]):
            begins.append(num)
            j = num + 2
            ends.append(j)
            while True:
                j += 1
                if j < n and words[j] == SPACE:
                    j += 1
                    if j < n and _letter(words[j]):
                        ends[-1] = j
                        last = j
                    else:
                        break
                else:
                    break
    index, k = [], 0  # span index of each position (separators share the next word's)
    for w in words:
        index.append(k)
        k += w != SPACE
    out: list[Piece] = []
    times: list[tuple[int, int]] = []
    last = -1
    for num in range(n):
        if num <= last:
            continue
        if num in begins:
            begin = spans[index[num]][0] if spans is not None and index[num] < len(spans) else 0
            abbr, group = words[num].upper(), list(pieces[num][1])
            j = num + 1
            while j < n:
                if j in ends:
                    abbr += words[j].upper()
                    group += pieces[j][1]
                    last = j
                    break
                if words[j].encode("utf-8").isalpha():
                    abbr += words[j].upper()
                    group += pieces[j][1]
                j += 1
            out.append((abbr, group))
            if spans is not None and index[j] < len(spans):
                times.append((begin, spans[index[j]][1]))
        else:
            out.append(pieces[num])
            if spans is not None and index[num] < len(spans) and words[num] != SPACE:
                times.append(spans[index[num]])
    return out, times


def postprocess(tokens: list[str], spans: list[tuple[int, int]] | None = None) -> Words:
    """Text and words of a token sequence (token spans in ms, one per token, optional)."""
    plain, _ = _pieces(tokens, None)
    plain, _ = _abbreviations(plain, None)
    text = "".join(w for w, _ in plain).strip()
    if spans is None:
        real = [p for p in plain if p[0] != SPACE]
        return Words(text, [w for w, _ in real], [g for _, g in real], None)
    timed, times = _pieces(tokens, spans)
    timed, times = _abbreviations(timed, times)
    real = [p for p in timed if p[0] != SPACE]
    return Words(text, [w for w, _ in real], [g for _, g in real], times)
