"""The per-run fixed costs cut for a fleet (issue 28): each shortcut gives what the long
way gives, value for value, and steps aside where it cannot prove it."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import trainlens
from trainlens.checkpoints import _discover
from trainlens.core import units
from trainlens.core.canonical import canonicalize
from trainlens.core.names import AliasTable
from trainlens.core.run import build_run
from trainlens.core.stats import prefix_medians
from trainlens.readers import _nesting
from trainlens.readers.jsonl import _ndjson, _no_key_repeated, _swap_nonfinite

# ---- prefix medians ---------------------------------------------------------------------


def _values(rng: np.random.Generator, kind: int, n: int) -> np.ndarray:
    if kind == 0:
        return rng.normal(size=n)
    if kind == 1:  # ties
        return rng.integers(-3, 3, size=n).astype(float)
    if kind == 2:  # signed zeros
        return np.where(rng.random(n) < 0.5, -0.0, 0.0)
    if kind == 3:  # infinities and sums that overflow
        return rng.choice([np.inf, -np.inf, 1.0, 2.0, 1e308, -1e308], size=n)
    if kind == 4:  # a NaN somewhere: numpy's median, one by one
        x = rng.normal(size=n)
        x[rng.integers(0, n)] = np.nan
        return x
    return rng.normal(size=n) * 10.0 ** rng.integers(-300, 300, size=n)


@pytest.mark.parametrize("kind", range(6))
def test_prefix_medians_are_numpys_bit_for_bit(kind: int) -> None:
    rng = np.random.default_rng(kind)
    for _ in range(300):
        n = int(rng.integers(1, 90))
        x = _values(rng, kind, n)
        counts = rng.integers(1, n + 1, size=int(rng.integers(1, n + 1)))
        got = prefix_medians(x, counts)
        with np.errstate(all="ignore"):
            want = np.array([np.median(x[:c]) for c in counts.tolist()])
        assert np.array_equal(got, want, equal_nan=True)
        assert np.array_equal(np.signbit(got), np.signbit(want))


def test_prefix_medians_of_a_long_prefix_and_of_float32() -> None:
    x = np.random.default_rng(0).normal(size=600)
    counts = np.array([1, 2, 599, 600])
    assert np.array_equal(prefix_medians(x, counts), [np.median(x[:c]) for c in counts])
    x32 = x.astype(np.float32)
    assert np.array_equal(prefix_medians(x32, counts), [np.median(x32[:c]) for c in counts])
    assert prefix_medians(x, np.array([], dtype=np.int64)).size == 0


# ---- JSONL: deep lines and repeated keys -------------------------------------------------


def _lines_with_many_opens_by_counting(data: bytes, limit: int) -> list[int]:
    return [
        n
        for n, line in enumerate(data.split(b"\n"))
        if line.count(b"{") + line.count(b"[") >= limit
    ]


def test_lines_with_many_opens_small_path_counts_each_line() -> None:
    rng = random.Random(0)
    for _ in range(2000):
        data = bytes(rng.choice(b'{[\n]}"a\\ ') for _ in range(rng.randint(0, 300)))
        for limit in (1, 2, 5, 32):
            assert _nesting.lines_with_many_opens(data, limit) == (
                _lines_with_many_opens_by_counting(data, limit)
            )


def _random_line(rng: random.Random, step: int, plain: bool) -> tuple[str, bool]:
    """A JSON line of numbers (unless ``plain``, sometimes a null, a ':' in a key, a text
    value or a nested object) and whether it repeats a key."""
    keys = rng.sample(["loss", "lr", "gn", "x"] if plain else ["loss", "lr", "a:b", "gn"], 3)
    pairs = [("step", str(step))]
    for k in keys:
        roll = 1.0 if plain else rng.random()
        value = (
            "null"
            if roll < 0.05
            else '"t"'
            if roll < 0.08
            else '{"y": 1}'
            if roll < 0.1
            else repr(rng.random())
        )
        pairs.append((k, value))
    repeated = rng.random() < 0.03
    if repeated:
        pairs.append((rng.choice(keys), "1.5"))
    return "{" + ", ".join(f'"{k}": {v}' for k, v in pairs) + "}", repeated


def test_the_count_proof_never_passes_a_repeated_key() -> None:
    rng = random.Random(1)
    proven = 0
    for _ in range(400):
        plain = rng.random() < 0.5
        made = [_random_line(rng, i, plain) for i in range(rng.randint(1, 30))]
        body = ("\n".join(line for line, _ in made) + "\n").encode()
        try:
            df = _ndjson(_swap_nonfinite(body))
        except Exception:  # (polars refuses some mixes: the slow path's)
            continue
        if _no_key_repeated(body, df):
            proven += 1
            assert not any(rep for _, rep in made)
            for line, _ in made:  # and json agrees: one value per key on every line
                pairs = json.loads(line, object_pairs_hook=lambda p: p)
                assert len({k for k, _ in pairs}) == len(pairs)
    assert proven > 20  # the proof holds for plain files, the usual case


@pytest.mark.parametrize("lines", [40, 2000])
def test_a_repeated_key_among_numbers_only_is_still_found(tmp_path: Path, lines: int) -> None:
    recs = [json.dumps({"step": i, "loss": 1.0, "lr": 0.1}) for i in range(lines)]
    recs[7] = '{"step": 7, "loss": 5.0, "lr": 0.1, "loss": 6.0}'
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(recs) + "\n")
    [run] = trainlens.read(path)
    assert run.series("train/loss")[1][7] == 6.0
    [note] = [d for d in run.data_quality if d.kind == "duplicate-key"]
    assert note.details["lines"] == [8]


# ---- units from blocks --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "values"),
    [
        (["mem_mb", "step_time", "dataloader_wait"], [3000.0, 1500.0, 400.0]),
        (["memory_allocated", "step_time_ms", "data_time"], [2.0e3, 250.0, 90.0]),
        (["max_reserved(gib)", "iter_time", "mfu"], [12.0, 0.5, 45.0]),
        (["loss", "tokens_per_sec_per_gpu", "step_time"], [2.0, 1e4, 0.3]),
    ],
)
def test_units_from_block_slices_are_the_units_from_filters(
    names: list[str], values: list[float]
) -> None:
    rows = [
        (s, n, v * (1 + 0.01 * s) if s != 3 else float("nan"))
        for n, v in zip(names, values, strict=True)
        for s in range(8)
    ]
    long = pl.DataFrame(rows, schema=["step", "metric", "value"], orient="row")
    long = long.with_columns(pl.col("metric").cast(pl.Enum(names)))
    frame, _notes, raw, blocks = canonicalize(
        long, source="s", aliases=AliasTable(), block_counts=[8] * len(names)
    )
    assert blocks is not None
    by_filter = units.infer(frame, raw, AliasTable(), "s")
    by_slice = units.infer(frame, raw, AliasTable(), "s", blocks)
    assert by_filter[0].equals(by_slice[0])
    assert [n.message for n in by_filter[1]] == [n.message for n in by_slice[1]]


# ---- series, asked for again ---------------------------------------------------------------


def test_a_series_asked_again_is_the_same_and_follows_a_new_frame() -> None:
    long = pl.DataFrame(
        {
            "step": [0, 1, 1, 2, 0, 1],
            "metric": ["loss"] * 4 + ["lr"] * 2,
            "value": [3.0, 2.0, 2.5, 1.0, 0.1, 0.2],
        }
    )
    run = build_run(long, name="r", source="s", fmt="jsonl")
    first = run.series_frame("train/loss")
    assert run.series_frame("train/loss") is first
    assert first["step"].to_list() == [0, 1, 2] and first["value"].to_list() == [3.0, 2.5, 1.0]
    run.frame = run.frame.with_columns(pl.col("value") * 2)  # a new frame: new series
    assert run.series_frame("train/loss")["value"].to_list() == [6.0, 5.0, 2.0]


# ---- the folder above a fleet, listed once ---------------------------------------------------


def _counting_walks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The folders ``_discover._walk`` is called on from now on (recursion included)."""
    listed: list[str] = []
    walk = _discover._walk

    def counting(folder: str, *args: object, **kwargs: object) -> None:
        listed.append(folder)
        walk(folder, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_discover, "_walk", counting)
    return listed


def test_a_gate_lists_the_folder_above_its_runs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainlens.core.config import Config
    from trainlens.gate import gate

    for i in range(6):
        d = tmp_path / "fleet" / f"run{i}"
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text(
            "\n".join(json.dumps({"step": s, "loss": 2.0 - s / 100}) for s in range(50)) + "\n"
        )
    stray = tmp_path / "fleet" / "checkpoint-40"  # beside the runs: not theirs
    stray.mkdir()
    (stray / "model.safetensors").write_bytes(b"")
    listed = _counting_walks(monkeypatch)
    result = gate([str(tmp_path / "fleet")], config=Config(), jobs=1)
    assert len(result.reports) == 6
    fleet = os.path.join(str(tmp_path), "fleet")
    assert listed.count(fleet) == 1
    # each run still says where the stray checkpoint lies, as a lone analyze does
    [alone] = trainlens.analyze(tmp_path / "fleet" / "run3" / "metrics.jsonl")
    notes = [d.message for d in alone.run.data_quality if d.kind == "checkpoints-elsewhere"]
    for r in result.reports:
        gated = [d["message"] for d in r.data_quality if d["kind"] == "checkpoints-elsewhere"]
        assert gated == notes and f"found checkpoints in {fleet} " in notes[0]
    assert _discover._WALKS is None  # off again after the gate


def test_a_gate_walks_a_folder_of_run_files_once_per_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run files side by side (a fleet of JSONL runs in one folder): each run's own folder
    is that folder, searched for its checkpoints (its own entries) and for strays (three
    levels down). Each walk is done once in a gate, not once per run (N**2 entries)."""
    from trainlens.core.config import Config
    from trainlens.gate import gate

    fleet = tmp_path / "fleet"
    fleet.mkdir()
    for i in range(8):
        (fleet / f"run{i}.jsonl").write_text(
            "\n".join(json.dumps({"step": s, "loss": 2.0 - s / 100}) for s in range(50)) + "\n"
        )
    (fleet / "sub" / "checkpoint-40").mkdir(parents=True)  # below the runs: not theirs
    (fleet / "sub" / "checkpoint-40" / "model.safetensors").write_bytes(b"")
    alone = {
        r.run.source: [d.message for d in r.run.data_quality if d.kind == "checkpoints-elsewhere"]
        for r in trainlens.analyze(fleet / "run5.jsonl")
    }
    listed = _counting_walks(monkeypatch)
    result = gate([str(fleet)], config=Config(), jobs=1)
    assert len(result.reports) == 8
    assert 1 <= listed.count(str(fleet)) <= 2  # its own entries, and three levels down
    assert listed.count(str(fleet / "sub")) == 1
    [notes] = alone.values()
    assert notes and "sub" in notes[0]
    for r in result.reports:  # every run still names the stray checkpoint, as alone
        assert [
            d["message"] for d in r.data_quality if d["kind"] == "checkpoints-elsewhere"
        ] == notes
    assert _discover._WALKS is None


# ---- the pool ---------------------------------------------------------------------------------


def _fleet(root: Path, n: int) -> Path:
    for i in range(n):
        d = root / f"run{i:02d}"
        d.mkdir(parents=True)
        diverges = i % 4 == 1  # the loss turns NaN for good: an error, the run fails
        loss = [float("nan") if diverges and s >= 200 else 2.0 - s / 300 for s in range(300)]
        (d / "metrics.jsonl").write_text(
            "\n".join(
                json.dumps({"step": s, "loss": v, "lr": 1e-3, "grad_norm": 1.0})
                for s, v in enumerate(loss)
            )
            + "\n"
        )
    (root / "broken").mkdir()
    (root / "broken" / "metrics.jsonl").write_text("not json\n")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("parent_judges", [True, False])
def test_the_pool_gives_the_serial_reports_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parent_judges: bool
) -> None:
    from trainlens.core.config import Config
    from trainlens.gate import _pool, gate

    root = _fleet(tmp_path / "fleet", 11)
    one = gate([str(root)], config=Config(), jobs=1)
    monkeypatch.setattr(_pool, "PARENT_JUDGES", parent_judges)  # False: workers judge all
    seen: list[tuple[int, int]] = []
    three = gate([str(root)], config=Config(), jobs=3, on_done=lambda d, t: seen.append((d, t)))

    def strip(r: object) -> dict[str, object]:
        d = r.to_dict()  # type: ignore[attr-defined]
        d.pop("seconds")
        return d

    assert [strip(r) for r in three.reports] == [strip(r) for r in one.reports]
    assert [r.verdict for r in one.reports].count("fail") >= 2
    assert seen == [(k, 12) for k in range(1, 13)]
    assert "POLARS_MAX_THREADS" not in os.environ or os.environ["POLARS_MAX_THREADS"] != "1"


def test_chunks_shrink_to_one_run_at_the_end() -> None:
    from trainlens.gate._pool import CHUNK_MAX, chunk_size

    assert chunk_size(10_000, 2) == CHUNK_MAX
    assert chunk_size(20, 2) == 2
    assert [chunk_size(k, 4) for k in (15, 3, 1, 0)] == [1, 1, 1, 1]


def test_a_kept_walk_finds_what_a_fresh_one_does_at_the_entry_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reused walks keep the entry budget's outcome: where the entries already counted
    leave no room for a kept walk's own, the folder is walked afresh (and truncated as a
    fresh walk would be)."""
    for name, n in (("a", 6), ("b", 5)):
        for i in range(n):
            d = tmp_path / name / f"checkpoint-{i * 10}"
            d.mkdir(parents=True)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")

    def outcome(found: _discover.Found) -> tuple[list[str], bool]:
        return [p for p, _k, _s in found.folders + found.files], found.truncated

    for budget in (4, 6, 8, 11, 12, 100):
        monkeypatch.setattr(_discover, "MAX_ENTRIES", budget)
        fresh = outcome(_discover.find_in([a, b], []))
        with _discover.shared_listings():
            first = outcome(_discover.find_in([b], []))  # b's walk kept (if it fits)
            again = outcome(_discover.find_in([a, b], []))
            twice = outcome(_discover.find_in([a, b], []))
        assert again == fresh and twice == fresh, budget
        assert first == outcome(_discover.find_in([b], [])), budget
    assert fresh == (
        [os.path.join(a, f"checkpoint-{i * 10}") for i in range(6)]
        + [os.path.join(b, f"checkpoint-{i * 10}") for i in range(5)],
        False,
    )
