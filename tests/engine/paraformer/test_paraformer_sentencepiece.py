"""A Paraformer whose tokens are a SentencePiece model's pieces (`tokenizer_conf.bpemodel`, as
FunASR's English Paraformer ships): the tiny checkpoint's weights read with the fixtures'
bpe.model (trained on the dev transcripts by tools/paraformer_fixtures.py) give the text FunASR
gave with that model as its tokenizer, whether the token list comes from tokens.json or from the
SentencePiece model itself; words are its '▁'-opened pieces."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import sentencepiece as spm
import yaml

from engine.errors import CheckpointError
from engine.types import DecodingOptions
from tests.engine.paraformer.conftest import CKPT, FIXTURES, clip, make_runner, recognize, reference

BPE = reference()["bpe"]
CLIPS = tuple(BPE["clips"])


def bpe_checkpoint(tmp_path: Path, token_list: bool) -> Path:
    """tiny/ with bpe.model as its tokenizer; tokens.json (the pieces) only when `token_list`."""
    ckpt = tmp_path / "bpe"
    shutil.copytree(CKPT, ckpt)
    shutil.copy(FIXTURES / "bpe.model", ckpt / "bpe.model")
    (ckpt / "tokens.json").unlink()
    if token_list:
        sp = spm.SentencePieceProcessor(model_file=str(ckpt / "bpe.model"))
        (ckpt / "tokens.json").write_text(json.dumps([sp.id_to_piece(i) for i in range(sp.get_piece_size())]))
    raw = yaml.safe_load((ckpt / "config.yaml").read_text())
    raw["tokenizer"] = "SentencepiecesTokenizer"
    raw["tokenizer_conf"] = {"bpemodel": "bpe.model", "unk_symbol": "<unk>"}
    (ckpt / "config.yaml").write_text(yaml.safe_dump(raw))
    return ckpt


@pytest.mark.parametrize("token_list", [False, True], ids=["pieces-from-bpe.model", "tokens.json"])
def test_text_equals_funasr_with_its_sentencepiece_tokenizer(tmp_path: Path, token_list: bool) -> None:
    runner = make_runner(ckpt_dir=str(bpe_checkpoint(tmp_path, token_list)))
    assert runner.info().details["tokenizer"] == "sentencepiece"
    outs = recognize(runner, [clip(c) for c in CLIPS], DecodingOptions(word_timestamps=True))
    assert [o.text for o in outs] == [BPE["clips"][c]["text"] for c in CLIPS]
    # the same token ids as the character-list checkpoint: only the spelling differs
    assert [o.tokens for o in outs] == [reference()["clips"][c]["token_ids"] for c in CLIPS]
    for out in outs:
        assert out.words is not None and " ".join(w.word for w in out.words) == out.text
        assert all(a.start <= a.end <= b.start + 1e-9 for a, b in zip(out.words, out.words[1:], strict=False))


def test_a_missing_sentencepiece_model_is_refused(tmp_path: Path) -> None:
    ckpt = bpe_checkpoint(tmp_path, token_list=False)
    (ckpt / "bpe.model").unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer_conf.bpemodel='bpe.model': no bpe.model"):
        make_runner(ckpt_dir=str(ckpt))
