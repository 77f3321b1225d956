"""Profiles: the five-key YAML form, unknown keys rejected, overrides in the documented order."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks.asrbench import cli, profiles
from benchmarks.asrbench.profiles import Overrides, ProfileError

LATENCY_ONLY = """\
name: latency_only
description: Single-request latency over duration buckets.
defaults: {primary: librispeech/test-clean, seed: 0, timeout_s: 60}
workloads:
  utterances: {dataset: "${primary}", sampling: stratified, num_items: 200}
benchmarks:
  - {name: single, kind: single, workload: utterances, repetitions: 3}
"""


def test_the_documented_profile_file_resolves(tmp_path: Path, bench_dirs: Path) -> None:
    path = tmp_path / "latency_only.yaml"
    path.write_text(LATENCY_ONLY)
    p = profiles.resolve(str(path), Overrides(dataset="synthetic/default"))
    assert p["workloads"]["utterances"]["dataset"] == "synthetic/default"
    assert p["benchmarks"] == [{"name": "single", "kind": "single", "workload": "utterances", "warmup": "all",
                                "repetitions": 3}]
    assert p["defaults"]["timeout_s"] == 60 and p["notes"] == ["primary dataset synthetic/default from --dataset"]


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(extra=1), "unknown keys"),
    (lambda d: d["defaults"].update(batch=4), "unknown defaults"),
    (lambda d: d["workloads"]["utterances"].update(speed=2), "unknown field"),
    (lambda d: d["benchmarks"][0].update(batch_sizes=[1]), "unknown parameter"),
    (lambda d: d["benchmarks"][0].update(kind="nope"), "unknown kind"),
])
def test_unknown_keys_and_parameters_are_rejected(tmp_path: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(LATENCY_ONLY)
    edit(data)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError, match=message):
        profiles.resolve(str(path))


def test_overrides_apply_in_the_documented_order(bench_dirs: Path) -> None:
    o = Overrides(dataset="synthetic/default", batch_sizes=[1, 8, 32], rates=[2.0], chunk_ms=[160, 320],
                  sessions=[1, 8], repetitions=3, warmup="all", timeout_s=30, num_items=5, duration_range=[1, None],
                  seed=7, sets=["batch.repetitions=9", "workloads.utterances.order=duration_asc", "defaults.seed=8"],
                  skip=["cold_start"])
    p = profiles.resolve("smoke", o)
    bench = {b["name"]: b for b in p["benchmarks"]}
    assert "cold_start" not in bench
    assert bench["batch"]["batch_sizes"] == [1, 8, 32] and bench["batch"]["repetitions"] == 9, "--set wins"
    assert bench["load"]["rates"] == [2.0] and bench["load"]["concurrency"] == [], "--rates: open loop only"
    assert bench["streaming"]["chunk_ms"] == [160, 320] and bench["streaming"]["timeout_s"] == 30
    assert bench["single"]["warmup"] == "all" and bench["throughput"]["repetitions"] == 3
    spec = p["workloads"]["utterances"]
    assert spec["num_items"] == 5 and spec["duration_range"] == [1, None] and spec["seed"] == 7
    assert spec["order"] == "duration_asc" and p["defaults"]["seed"] == 8
    assert p["workloads"]["long"]["dataset"] == "longform/synthetic-default"
    only = profiles.resolve("smoke", Overrides(only=["single", "batch"]))
    assert [b["name"] for b in only["benchmarks"]] == ["single", "batch"]
    with pytest.raises(ProfileError, match="no benchmark or kind"):
        profiles.resolve("smoke", Overrides(only=["nope"]))
    with pytest.raises(ProfileError, match="section must be"):
        profiles.resolve("smoke", Overrides(sets=["nowhere.x=1"]))


def test_smoke_defaults_to_the_dev_set_without_librispeech_and_says_so(fresh_dirs: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    p = profiles.resolve("smoke")
    assert p["defaults"]["primary"] == "manifest/speech"
    assert "no LibriSpeech copy is prepared" in p["notes"][0]
    assert cli.main(["profiles", "standard", "--dataset", "ljspeech/all"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["defaults"]["primary"] == "ljspeech/all"
    assert printed["workloads"]["long"]["dataset"] == "longform/ljspeech-all"
    assert cli.main(["profiles"]) == 0
    assert {line.split(":")[0] for line in capsys.readouterr().out.splitlines()} == {
        "full", "selftest", "smoke", "standard"}
