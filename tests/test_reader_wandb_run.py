"""W&B run folders and ``.wandb`` transaction logs, written by the real W&B SDK offline.

Each run is written once per session (module fixture, in a subprocess: the SDK keeps a
service process and global state) from a fixture run's values; what trainlens reads from
it must be what it reads from the fixture's JSONL: the same frame (step, metric, value,
superseded) and the same findings.

The reference for the framing: wandb 0.31 no longer ships a Python reader of its
transaction log (the datastore moved into its Go core), so :func:`_reference_records`
reads the format the plain way (LevelDB's log, one chunk at a time) and W&B's own
protobuf classes (``wandb.proto.wandb_internal_pb2.Record``) decode every record;
trainlens' own decoder must agree with it value for value.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests._wandb_records import records as wandb_records
from tests.conftest import FIXTURE_RUNS, run_wandb_offline
from trainlens.cli import main
from trainlens.core.errors import UnreadableInputError
from trainlens.readers import detect_format, read_runs

pytest.importorskip("wandb")

WRITER = Path(__file__).with_name("_wandb_writer.py")
CONFIG = {"lr_schedule": "cosine", "optim": {"warmup_steps": 50}, "n_params": 124_000_000}
CASES = {"healthy": "healthy_cosine", "nan": "nan_divergence", "resumed": "crash_resume"}
RESUME_AT_ROW = 714  # crash_resume.jsonl: the row where the step goes back from 700 to 601


@pytest.fixture(scope="module")
def wandb_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """<root>/<case>/wandb/offline-run-*/ for each case (the resumed one: two folders)."""
    root = tmp_path_factory.mktemp("wandb_runs")
    specs = [f"{case}={fx}" for case, fx in CASES.items() if case != "resumed"]
    specs.append(f"resumed={CASES['resumed']}:{RESUME_AT_ROW}")
    specs.append("extras=")
    run_wandb_offline(WRITER, root, *specs)
    return root


def _log_of(root: Path, case: str) -> Path:
    return next((root / case / "wandb").glob("*run-*/run-*.wandb"))


def _plain(frame: pl.DataFrame) -> pl.DataFrame:
    return (
        frame.select("step", pl.col("metric").cast(pl.String), "value", "superseded")
        .filter(~pl.col("metric").str.starts_with("system/"))
        .sort("step", "metric", "value", "superseded")
    )


def _jsonl_without_time(case: str, tmp_path: Path) -> Path:
    """The fixture's JSONL without its wall time (W&B stamps its own: the fixtures'
    injected wall-clock stalls are not in a run logged now) and with the same config."""
    out = tmp_path / case
    out.mkdir()
    lines = (FIXTURE_RUNS / CASES[case] / "metrics.jsonl").read_text().splitlines()
    rows = []
    for line in lines:
        # (the fixtures write NaN unquoted: parse it the way the JSONL reader does)
        row = json.loads(line, parse_constant=float)
        row.pop("time", None)
        rows.append(json.dumps(row))
    (out / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    (out / "config.json").write_text(json.dumps(CONFIG))
    return out / "metrics.jsonl"


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_same_frame_as_the_jsonl_of_the_same_values(wandb_runs: Path, case: str) -> None:
    (run,) = read_runs(wandb_runs / case / "wandb")
    (ref,) = read_runs(FIXTURE_RUNS / CASES[case] / "metrics.jsonl")
    assert run.format == "wandb-run"
    assert run.name == case  # the display name given to wandb.init
    got, want = _plain(run.frame), _plain(ref.frame)
    assert got.height == want.height > 1000
    assert got.equals(want)  # values bit for bit, NaN where NaN
    assert run.frame.get_column("wall_time").null_count() == 0  # W&B's _timestamp


def _findings(path: Path, capsys: pytest.CaptureFixture[str]) -> list[tuple[Any, ...]]:
    capsys.readouterr()
    main(["analyze", str(path), "--json"])
    (doc,) = json.loads(capsys.readouterr().out)["runs"]
    return sorted(
        (f["code"], f["metric"] or "", f["step_start"], f["step_end"]) for f in doc["findings"]
    )


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_same_findings_as_the_jsonl(
    wandb_runs: Path, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the W&B run's wall times are when the SDK wrote it: a writer stalled by a loaded
    # machine is a real wall-clock gap there, which the JSONL without times cannot have)
    got = [f for f in _findings(wandb_runs / case / "wandb", capsys) if f[1] != "wall_time"]
    want = _findings(_jsonl_without_time(case, tmp_path), capsys)
    assert got == want
    if case == "nan":
        assert ("NAN001", "train/loss", 450, 469) in got
    if case == "resumed":
        assert [f for f in got if f[0] == "DATA001"] == [("DATA001", "", 601, 700)]


@pytest.mark.slow
def test_resumed_run_is_one_run_with_a_restart(wandb_runs: Path) -> None:
    folders = sorted((wandb_runs / "resumed" / "wandb").glob("offline-run-*"))
    assert len(folders) == 2  # W&B wrote the resumed part into a folder of its own
    (run,) = read_runs(wandb_runs / "resumed" / "wandb")
    assert [d.kind for d in run.data_quality] == ["restart"]
    standing = run.standing()
    assert standing.get_column("step").max() == 1000
    # the first segment's values at steps 601..700 that the second one logged again (a
    # value only the first pass has, e.g. the dataloader_wait of 601, which the resumed
    # monitor's first step cannot measure, still stands)
    lines = (FIXTURE_RUNS / CASES["resumed"] / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line, parse_constant=float) for line in lines]

    def logged(part: list[dict[str, Any]]) -> set[tuple[int, str]]:
        return {(r["step"], k) for r in part for k in r if k not in ("step", "time")}

    again = logged(rows[:RESUME_AT_ROW]) & logged(rows[RESUME_AT_ROW:])
    assert {s for s, _ in again} == set(range(601, 701))
    assert run.frame.get_column("superseded").sum() == len(again)


# ---- the reference: W&B's own protobuf over a plain reading of the log ---------------------


def _reference_history(path: Path) -> list[tuple[int, str, float]]:
    from wandb.proto import wandb_internal_pb2 as pb

    rows = []
    for raw in wandb_records(path.read_bytes()):
        record = pb.Record.FromString(raw)
        if record.WhichOneof("record_type") != "history":
            continue
        items = {
            ".".join(it.nested_key) or it.key: json.loads(it.value_json)
            for it in record.history.item
        }
        step = int(items.pop("_step"))
        for key, value in items.items():
            if key not in ("_runtime", "_timestamp"):
                rows.append((step, key, float(value)))
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("case", ["nan", "healthy"])
def test_agrees_with_wandbs_own_decoding(wandb_runs: Path, case: str) -> None:
    log = _log_of(wandb_runs, case)
    want = sorted(_reference_history(log), key=repr)
    (run,) = read_runs(log)
    frame = run.frame.filter(~pl.col("metric").cast(pl.String).str.starts_with("system/"))
    got = sorted(
        zip(
            frame.get_column("step").to_list(),
            [run.raw_names.get(m, m) for m in frame.get_column("metric").cast(pl.String)],
            frame.get_column("value").to_list(),
            strict=True,
        ),
        key=repr,
    )
    assert len(got) == len(want) > 5000
    assert [(s, k) for s, k, _ in got] == [(s, k) for s, k, _ in want]
    for (_, _, a), (_, _, b) in zip(got, want, strict=True):
        assert a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.slow
@pytest.mark.parametrize("case", ["healthy", "resumed", "extras"])
def test_numpy_lane_reads_what_the_compiled_lane_reads(
    wandb_runs: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainlens.readers import wandb_run

    if wandb_run._wbscan is None:
        pytest.skip("the compiled lane is not built")
    (compiled,) = read_runs(wandb_runs / case / "wandb")
    monkeypatch.setattr(wandb_run, "_wbscan", None)
    (numpy_lane,) = read_runs(wandb_runs / case / "wandb")
    for run in (compiled, numpy_lane):  # (block order may differ between the lanes)
        run.frame = run.frame.with_columns(pl.col("metric").cast(pl.String))
    order = ["metric", "step", "superseded", "wall_time"]
    assert compiled.frame.sort(order).equals(numpy_lane.frame.sort(order))
    assert compiled.data_quality == numpy_lane.data_quality


def scanned_as_lists(scanned: Any) -> Any:
    """A ``_wbscan.scan`` result with its Arrow columns as lists (comparable with ==)."""
    if isinstance(scanned, str):
        return scanned
    keys, values, rows, mark_step, mark_wall, mark_rec, exact = scanned

    def col(c: Any) -> list[Any]:
        return pl.Series(c).to_list()

    return (
        keys,
        [col(v) for v in values],
        [r if isinstance(r, tuple) else col(r) for r in rows],
        col(mark_step),
        col(mark_wall),
        col(mark_rec),
        exact,
    )


@pytest.mark.slow
@pytest.mark.parametrize("case", ["healthy", "resumed", "extras"])
def test_ranges_read_side_by_side_give_what_one_thread_reads(wandb_runs: Path, case: str) -> None:
    """The compiled lane split into 2..16 ranges of blocks (a few blocks each here: records
    that continue over a range's start at almost every split) gives one thread's result."""
    from trainlens.readers import wandb_run

    if wandb_run._wbscan is None:
        pytest.skip("the compiled lane is not built")
    for log in (wandb_runs / case / "wandb").glob("*run-*/run-*.wandb"):
        data = log.read_bytes()
        one = scanned_as_lists(wandb_run._wbscan.scan(data))
        assert not isinstance(one, str) and len(one[3]) > 20  # (history records read)
        for threads in (2, 3, 7, 16):
            assert scanned_as_lists(wandb_run._wbscan.scan(data, threads=threads)) == one


# ---- layouts -------------------------------------------------------------------------------


@pytest.mark.slow
def test_one_file_one_folder_and_a_folder_of_runs(wandb_runs: Path, tmp_path: Path) -> None:
    log = _log_of(wandb_runs, "healthy")
    assert detect_format(log) == "wandb-run"
    assert detect_format(log.parent) == "wandb-run"
    (from_file,) = read_runs(log)
    (from_folder,) = read_runs(log.parent)
    assert from_file.frame.equals(from_folder.frame)
    # W&B's wandb/ of a job that ran several times: each run id one run
    store = tmp_path / "wandb"
    for case in ("healthy", "nan"):
        for d in (wandb_runs / case / "wandb").glob("offline-run-*"):
            shutil.copytree(d, store / d.name)
    (store / "latest-run").symlink_to(next(store.glob("offline-run-*")))
    runs = read_runs(store)
    assert sorted(r.name for r in runs) == ["healthy", "nan"]
    from trainlens.gate.discover import discover

    assert [s.path for s in discover([str(tmp_path)])] == [str(store)]


@pytest.mark.slow
def test_config_feeds_the_run_config(wandb_runs: Path) -> None:
    from trainlens.runconfig import find_run_config

    (run,) = read_runs(wandb_runs / "healthy" / "wandb")
    config, origin = find_run_config(run)
    assert config == CONFIG
    assert origin is not None and origin.endswith("(params)")
    assert run.metadata["wandb"]["project"] == "trainlens-test"
    assert run.metadata["wandb"]["run_id"] == "healthy01"


@pytest.mark.slow
def test_the_machine_wandb_recorded_is_the_hardware_when_the_config_names_none(
    wandb_runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainlens.api import build_context
    from trainlens.core.config import Config

    (folder,) = (wandb_runs / "healthy" / "wandb").glob("offline-run-*")
    run_dir = tmp_path / folder.name
    shutil.copytree(folder, run_dir)
    # what the SDK records on a GPU machine (this one has none)
    meta_path = run_dir / "files" / "wandb-metadata.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta.update({"gpu": "NVIDIA A100-SXM4-80GB", "gpu_count": 8})
    meta_path.parent.mkdir(exist_ok=True)
    meta_path.write_text(json.dumps(meta))
    (run,) = read_runs(run_dir)
    assert run.metadata["machine"] == {"gpu": "NVIDIA A100-SXM4-80GB", "n_gpus": 8}
    model = build_context(run, Config()).model
    assert (model["gpu"], model["n_gpus"]) == ("NVIDIA A100-SXM4-80GB", 8)
    # the user's config wins over the machine's record
    model = build_context(run, Config(model={"gpu": "h100", "n_gpus": 4})).model
    assert (model["gpu"], model["n_gpus"]) == ("h100", 4)
    # and the summary's TDP energy estimate is the recorded machine's
    capsys.readouterr()
    main(["analyze", str(run_dir), "--json"])
    (doc,) = json.loads(capsys.readouterr().out)["runs"]
    estimated = doc["summary"]["energy"]["estimated"]
    assert (estimated["gpu"], estimated["n_gpus"]) == ("A100 SXM4 80GB", 8)


@pytest.mark.slow
def test_system_metrics_are_read_at_the_step_they_were_sampled(wandb_runs: Path) -> None:
    (run,) = read_runs(wandb_runs / "healthy" / "wandb")
    system = run.frame.filter(pl.col("metric").cast(pl.String).str.starts_with("system/"))
    names = set(system.get_column("metric").cast(pl.String))
    assert "system/proc.memory.rssMB" in names  # W&B samples the process on every machine
    steps = set(run.frame.filter(pl.col("metric") == "train/loss").get_column("step"))
    assert set(system.get_column("step")) <= steps
    assert system.get_column("wall_time").null_count() == 0


@pytest.mark.slow
def test_convert_writes_the_run(wandb_runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    assert main(["convert", str(wandb_runs / "nan" / "wandb"), "-o", str(out)]) == 0
    back = pl.read_parquet(out)
    (run,) = read_runs(wandb_runs / "nan" / "wandb")
    assert back.height == run.frame.height
    assert _plain(back).equals(_plain(run.frame))


@pytest.mark.slow
def test_nested_keys_non_numbers_and_late_config(wandb_runs: Path) -> None:
    (run,) = read_runs(wandb_runs / "extras" / "wandb")
    frame = run.frame.with_columns(pl.col("metric").cast(pl.String))

    def series(name: str) -> list[tuple[int, float]]:
        rows = frame.filter(pl.col("metric") == name).sort("step")
        return list(zip(rows["step"].to_list(), rows["value"].to_list(), strict=True))

    # a nested dict is W&B's nested key, shown (and read) as eval.loss
    assert series("eval.loss") == [(s, 2.0 + s) for s in range(30)]
    assert series("train/loss") == [(s, 1.0 / (s + 1)) for s in range(30)]
    assert series("ok") == [(s, float(s % 2 == 0)) for s in range(30)]  # JSON true/false
    assert series("late/metric") == [(s, float(s)) for s in range(20, 30)]
    from tests._wandb_writer import EDGE, LONG_KEYS

    got = [struct.pack("<d", v) for _, v in series("edge")]
    assert got == [struct.pack("<d", EDGE[s % len(EDGE)]) for s in range(60)]  # bit for bit
    for block, key in LONG_KEYS.items():
        assert series(key) == [(s, block * 1000.0 + s) for s in range(30, 60)]
    (note,) = [d for d in run.data_quality if d.kind == "non-scalar"]
    assert note.count == 30 and "note: 30" in note.message
    assert run.metadata["params"]["model"] == {"n_layer": 12, "d_model": 768}


# ---- damage --------------------------------------------------------------------------------


@pytest.mark.slow
def test_truncated_log_keeps_its_good_records(wandb_runs: Path, tmp_path: Path) -> None:
    log = _log_of(wandb_runs, "healthy")
    data = log.read_bytes()
    cut = tmp_path / log.name
    cut.write_bytes(data[: len(data) // 2 + 123])  # in the middle of some record
    (whole,) = read_runs(log)
    (run,) = read_runs(cut)
    issues = [d for d in run.data_quality if d.kind == "corrupt-record"]
    assert len(issues) == 1 and "ends inside" in issues[0].message
    assert issues[0].location is not None and issues[0].location.startswith("block ")
    kept = _plain(run.frame)
    assert 0.4 * _plain(whole.frame).height < kept.height < 0.6 * _plain(whole.frame).height
    # what was kept is the start of the run, value for value
    assert kept.join(_plain(whole.frame), on=["step", "metric", "value"], how="anti").is_empty()
    last = kept.get_column("step").max()
    assert _plain(whole.frame).filter(pl.col("step") < last).height <= kept.height


@pytest.mark.slow
def test_flipped_byte_is_a_bad_checksum_and_costs_one_record(
    wandb_runs: Path, tmp_path: Path
) -> None:
    log = _log_of(wandb_runs, "healthy")
    from wandb.proto import wandb_internal_pb2 as pb

    data = bytearray(log.read_bytes())
    starts: list[int] = []
    records = wandb_records(bytes(data), starts)
    at = next(  # inside a history record past the middle of the file
        a + len(r) // 2
        for r, a in zip(records, starts, strict=True)
        if a > len(data) // 2 and pb.Record.FromString(r).WhichOneof("record_type") == "history"
    )
    data[at] ^= 0x20
    bad = tmp_path / log.name
    bad.write_bytes(bytes(data))
    (whole,) = read_runs(log)
    (run,) = read_runs(bad)
    (issue,) = [d for d in run.data_quality if d.kind == "corrupt-record"]
    assert "bad checksum" in issue.message and issue.count == 1
    assert issue.location == f"block {at // 32768}, byte {issue.location.split()[-1]}"
    lost = _plain(whole.frame).join(_plain(run.frame), on=["step", "metric"], how="anti")
    assert lost.get_column("step").n_unique() == 1  # one step's values, the rest kept
    assert 0 < lost.height <= 16


def test_not_a_wandb_log_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run-x.wandb"
    path.write_bytes(b":W&B\x00\x00\x00garbage")
    with pytest.raises(UnreadableInputError, match="not a W&B transaction log"):
        read_runs(path, format="wandb-run")
