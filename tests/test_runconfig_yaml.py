"""trainlens.core.yamlio, the one YAML reader: safe (no tag builds an object), bounded
(size, expanded aliases, depth, self-reference), and identical to yaml.safe_load on the
documents people write — with the C loader and with PyYAML's pure-Python one."""

from __future__ import annotations

import itertools
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from trainlens.core import yamlio
from trainlens.core.yamlio import RefusedFile, parse_yaml, read_yaml


@pytest.fixture(params=["C", "python"])
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "C":
        if not hasattr(yaml, "CSafeLoader"):
            pytest.skip("PyYAML built without libyaml")
        monkeypatch.setattr(yamlio, "_Loader", yamlio.make_loader(yaml.CSafeLoader))
    else:
        monkeypatch.setattr(yamlio, "_Loader", yamlio.make_loader(yaml.SafeLoader))
    yield request.param


def laughs(levels: int, fan: int = 9) -> str:
    """A "billion laughs" document: ``fan`` aliases per level, fan**levels strings."""
    lines = ["a: &a [" + ",".join(['"lol"'] * fan) + "]"]
    names = "abcdefghijklmnopqrstuvwxyz"[:levels]
    for prev, cur in itertools.pairwise(names):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * fan) + "]")
    return "\n".join([*lines, f"run_name: *{names[levels - 1]}"]) + "\n"


def test_billion_laughs_is_refused_fast_and_small(loader: str) -> None:
    text = laughs(9)
    assert len(text.encode()) < 600  # 9**9 = 387M strings once every alias is expanded
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with pytest.raises(RefusedFile, match="more than 1,000,000 values once its aliases"):
        parse_yaml(text, "meta.yaml")
    assert time.perf_counter() - t0 < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 50_000  # KiB


def test_aliases_within_the_bound_are_read(loader: str) -> None:
    # 9**5 = 59,049 expanded strings: a big config, still a config
    got = parse_yaml(laughs(5), "x.yaml")
    assert len(got["run_name"]) == 9 and got["run_name"][0][0][0][0] == ["lol"] * 9
    base = "defaults: &d {lr: 0.1, warmup: 10}\ntrain: {<<: *d, lr: 0.2}\n"
    assert parse_yaml(base, "x.yaml")["train"] == {"lr": 0.2, "warmup": 10}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("&a [1, *a]", "an alias refers to the node that contains it"),
        ("a: &a {b: *a}", "an alias refers to the node that contains it"),
        ("[" * 150 + "]" * 150, "nested more than 100 levels deep"),
        ("- " * 150 + "x\n", "nested more than 100 levels deep"),
        ("[" * 5000 + "]" * 5000, "not"),  # libyaml's own limit, or Python's recursion
        ("a: [1, 2\nb: 3\n", "not valid YAML (line 2)"),
        ("--- 1\n--- 2\n", "not valid YAML"),
        ("a: 2024-13-45\n", "month must be in 1..12"),
        ("? [1, {a: 1}]\n: x\n", "unhashable"),
        ("a: " + "9" * 5000 + "\n", "ValueError"),
        ("a: *undefined\n", "not valid YAML"),
        ("a: \x00\n", "not"),
    ],
)
def test_bad_documents_are_one_sentence(loader: str, text: str, why: str) -> None:
    with pytest.raises(RefusedFile) as err:
        parse_yaml(text, "cfg.yaml")
    msg = str(err.value)
    assert msg.startswith("cfg.yaml: not") and why in msg and "\n" not in msg


def test_tags_are_plain_data_never_objects(loader: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    text = (
        "betas: !!python/tuple [0.9, 0.999]\n"
        "ns: !!python/object:argparse.Namespace {lr: 0.1}\n"
        f"cmd: !!python/object/apply:os.system ['touch {marker}']\n"
        "fn: !!python/name:os.system\n"
        "mine: !custom {a: 1}\n"
        "when: 2024-01-02\n"
        "raw: !!binary aGk=\n"
    )
    got = parse_yaml(text, "hparams.yaml")
    assert not marker.exists()
    assert got["betas"] == [0.9, 0.999] and got["ns"] == {"lr": 0.1}
    assert got["cmd"] == [f"touch {marker}"] and got["fn"] == ""
    assert got["mine"] == {"a": 1} and got["raw"] == b"hi"
    assert str(got["when"]) == "2024-01-02"
    # and PyYAML's own safe loader is left as it was
    with pytest.raises(yaml.constructor.ConstructorError):
        yaml.safe_load("x: !!python/tuple [1]")


@pytest.mark.parametrize(
    "doc",
    [
        {"a": 1, "b": [1.5, None, True, "x: y", "it's"], "c": {"d": {"e": "ü\n"}}},
        {"run_name": "a long name " * 20, "n": -3, "f": 1e-300, "empty": [], "m": {}},
        {"k": float("inf"), "t": "2024-01-02", "q": "'quoted'", "yes": "yes", "o": "0o17"},
    ],
)
def test_same_as_safe_load(loader: str, doc: dict[str, object], tmp_path: Path) -> None:
    for text in (yaml.safe_dump(doc), yaml.safe_dump(doc, default_flow_style=True)):
        path = tmp_path / "x.yaml"
        path.write_text(text, encoding="utf-8")
        assert read_yaml(path) == yaml.safe_load(text) == doc


def test_size_cap_and_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlio, "MAX_BYTES", 1 << 20)
    big = tmp_path / "config.yaml"
    big.write_text("a: " + "x" * (1 << 20) + "\n")
    with pytest.raises(RefusedFile, match="larger than 1 MiB"):
        read_yaml(big)
    with pytest.raises(RefusedFile, match="cannot be read"):
        read_yaml(tmp_path / "absent.yaml")
    assert parse_yaml("", "empty.yaml") is None and parse_yaml("# only\n", "c.yaml") is None
