"""The dataset registry against tiny corpora in the documented layouts (built from dev clips):
indexing in place, the manifest's audio-root rule and revision, downloads only on request."""

from __future__ import annotations

import hashlib
import json
import socket
import tarfile
from pathlib import Path

import pytest

from benchmarks.asrbench import cli, datasets
from benchmarks.asrbench.datasets import librispeech
from benchmarks.asrbench.datasets.download import DownloadError, safe_extract
from tests.bench import corpora

pytestmark = pytest.mark.usefixtures("dev_data")


def test_librispeech_source_dir_indexes_in_place_with_chapter_groups(fresh_dirs: Path) -> None:
    tree = corpora.librispeech_tree(fresh_dirs / "corpus")
    assert cli.main(["prepare", "librispeech", "--source-dir", str(tree)]) == 0
    ds = datasets.load("librispeech/test-clean")
    assert [i.id for i in ds.items] == [f"61-70968-000{k}" for k in range(4)]
    assert {i.group for i in ds.items} == {"61-70968"} and {i.speaker for i in ds.items} == {"61"}
    assert ds.items[0].text == corpora.dev_texts()["libri_61-70968-0000"]
    assert ds.path(ds.items[0]).is_relative_to(tree), "indexed in place: nothing copied"
    assert abs(ds.items[0].duration - 4.905) < 0.01 and ds.card["license"] == "CC BY 4.0"
    assert datasets.default_primary()[0] == "librispeech/test-clean"
    assert cli.main(["prepare", "librispeech", "--subset", "test-clean", "--verify"]) == 0


def test_without_a_copy_and_without_download_nothing_touches_the_network(
        fresh_dirs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    attempts: list[object] = []

    def blocked(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network blocked by the test")

    monkeypatch.setattr(socket.socket, "connect", blocked)
    monkeypatch.setattr(socket.socket, "connect_ex", blocked)
    monkeypatch.setattr(socket, "create_connection", blocked)
    monkeypatch.setattr(socket, "getaddrinfo", blocked)
    assert cli.main(["prepare", "librispeech", "--subset", "test-clean"]) != 0
    err = capsys.readouterr().err
    assert "--download" in err and "--source-dir" in err and "test-clean" in err
    assert attempts == [], "no connection, not even a name lookup"
    assert not (fresh_dirs / "data" / "librispeech" / "_download").exists()


def test_download_verifies_the_checksum_falls_back_across_mirrors_and_extracts(
        fresh_dirs: Path, file_server: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    served, url = file_server
    corpora.librispeech_tree(fresh_dirs / "src")
    archive = corpora.librispeech_archive(fresh_dirs / "src", served / "test-clean.tar.gz")
    md5 = hashlib.md5(archive.read_bytes(), usedforsecurity=False).hexdigest()
    (served / "corrupt").mkdir()
    for subset in ("test-clean", "test-other"):
        (served / "corrupt" / f"{subset}.tar.gz").write_bytes(b"not the archive")
    monkeypatch.setattr(librispeech, "MIRRORS", ("http://127.0.0.1:9/", url + "corrupt/", url))
    monkeypatch.setitem(librispeech.ARCHIVE_MD5, "test-clean", md5)
    assert cli.main(["prepare", "librispeech", "--subset", "test-clean", "--download"]) == 0
    ds = datasets.load("librispeech/test-clean")
    assert len(ds.items) == 4 and ds.card["source"]["archive_md5"] == md5
    download_dir = fresh_dirs / "data" / "librispeech" / "_download"
    assert not list(download_dir.glob("*.part")) and not list(download_dir.glob("*.tar.gz"))
    monkeypatch.setattr(librispeech, "MIRRORS", (url + "corrupt/",))
    monkeypatch.setitem(librispeech.ARCHIVE_MD5, "test-other", md5)
    with pytest.raises(DownloadError, match="checksum mismatch"):
        datasets.prepare("librispeech", "test-other", download=True)


def test_safe_extract_refuses_path_traversal_and_links(tmp_path: Path) -> None:
    for name, member in (("up.tar", tarfile.TarInfo("../escape.txt")),
                         ("link.tar", tarfile.TarInfo("LibriSpeech/link"))):
        if name == "link.tar":
            member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
        with tarfile.open(tmp_path / name, "w") as tar:
            tar.addfile(member, None if member.issym() else __import__("io").BytesIO(b""))
        with pytest.raises(DownloadError, match=r"outside|link"):
            safe_extract(tmp_path / name, tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()


def test_ljspeech_is_found_through_the_documented_variables(fresh_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["prepare", "ljspeech"]) == 1, "absent: fails with instructions"
    corpus = corpora.ljspeech_tree(fresh_dirs / "lj")
    monkeypatch.setenv("WAV_DIR", str(corpus / "wavs"))
    assert cli.main(["prepare", "ljspeech"]) == 0
    ds = datasets.load("ljspeech/all")
    assert [i.id for i in ds.items] == ["LJ001-0001", "LJ001-0002"] and ds.items[0].sample_rate == 22_050
    assert ds.audio(ds.items[0]).dtype.name == "float32", "decoded and resampled to 16 kHz on use"


def test_earnings21_indexes_a_local_parquet_shard(fresh_dirs: Path) -> None:
    shard = corpora.earnings21_shard(fresh_dirs / "e21" / "full" / "test-00000-of-00001.parquet")
    assert cli.main(["prepare", "earnings21", "--source-dir", str(shard.parent)]) == 0
    ds = datasets.load("earnings21/test")
    assert [i.id for i in ds.items] == ["4320211", "4341191"]
    assert ds.items[0].text == corpora.dev_texts()["mfa_thoughts"]
    assert ds.path(ds.items[0]).is_file() and ds.card["source"]["shards"][0]["sha256"]
    assert cli.main(["prepare", "earnings21"]) == 1, "no shard and no --download: instructions, no fetch"


def test_manifest_audio_root_rule_groups_and_revision(fresh_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = corpora.manifest_corpus(fresh_dirs / "corpora")
    moved = fresh_dirs / "elsewhere" / "manifest.jsonl"
    moved.parent.mkdir()
    moved.write_text(manifest.read_text())
    partial = fresh_dirs / "partial"
    partial.mkdir()
    (partial / "lesson__01.wav").write_bytes((manifest.parent / "lesson__01.wav").read_bytes())
    monkeypatch.setenv("WAV_DIR", str(partial))  # holds only one of the four files: never chosen
    monkeypatch.setenv("AUDIO_DIR", str(manifest.parent))
    assert cli.main(["prepare", "manifest", "--subset", "my_set", "--source-dir", str(moved),
                     "-o", "group_sep=__", "-o", "language=vi"]) == 0
    ds = datasets.load("manifest/my_set")
    assert ds.card["source"]["audio_root"] == str(manifest.parent.resolve())
    assert [i.group for i in ds.items] == ["lesson", "lesson", "lesson", "talk"]
    assert ds.card["language"] == "vi" and ds.revision == hashlib.sha256(moved.read_bytes()).hexdigest()
    monkeypatch.delenv("AUDIO_DIR")
    with pytest.raises(datasets.DatasetError, match="no audio root holds all 4"):
        datasets.prepare("manifest", "my_set", moved, options={})
    lines = manifest.read_text().splitlines()
    lines[0] = lines[0].replace('"text": "', '"text": "edited ')
    manifest.write_text("\n".join(lines) + "\n")
    edited = datasets.prepare("manifest", None, manifest, options={})[0]
    assert edited.subset == "my_set", "manifest.jsonl: the subset is its folder's name"
    assert edited.revision != ds.revision, "an edited manifest is a new revision"


def test_registry_lists_every_dataset_with_licence_and_prepared_subsets(
        fresh_dirs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    datasets.ensure("synthetic/default")
    assert cli.main(["datasets"]) == 0
    out = capsys.readouterr().out
    for name in ("librispeech", "ljspeech", "earnings21", "longform", "manifest", "synthetic"):
        assert name in out
    assert "CC BY 4.0" in out and "test-clean, test-other, dev-clean, dev-other" in out
    row = next(line for line in out.splitlines() if line.startswith("synthetic"))
    assert "default" in row.split()[1:3]
    card = json.loads((fresh_dirs / "data" / "synthetic" / "default" / "dataset.json").read_text())
    assert card["simulated"] is True and card["manifest_sha256"]
