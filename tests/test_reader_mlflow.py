"""MLflow: stores written by the real MLflow client (file store, SQLite) and runs exported
by mlflow-export-import, read back by trainlens and checked value for value against
``MlflowClient.get_metric_history``."""

from __future__ import annotations

import math
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

mlflow = pytest.importorskip("mlflow")

from mlflow.entities import Metric, Param, RunTag, ViewType  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

import trainlens.readers.mlflow._metricfiles as mlflow_reader  # noqa: E402
from trainlens.core.errors import UnreadableInputError  # noqa: E402
from trainlens.core.run import Run  # noqa: E402
from trainlens.core.yamlio import read_yaml  # noqa: E402
from trainlens.readers import detect_format  # noqa: E402
from trainlens.readers.base import ReadOptions  # noqa: E402
from trainlens.readers.mlflow import read as read_mlflow  # noqa: E402
from trainlens.readers.mlflow import sniff  # noqa: E402

T0 = 1_700_000_000_000  # ms
DBL_MAX = 1.7976931348623157e308
TRICKY_NAME = (
    'it\'s a "quoted" name: with # a hash, ünïcode, and enough words to make PyYAML fold '
    "it over more than one line of meta.yaml"
)

# how metric files are parsed: small ones joined in one buffer (default), every file by
# path (as files of 1 MiB and more are), or one small file per buffer
PARSE_MODES: dict[str, dict[str, int]] = {
    "joined": {},
    "by-path": {"_BIG_FILE": 1},
    "one-per-buffer": {"_BATCH_BYTES": 1},
}


def _log_runs(client: MlflowClient) -> dict[str, str]:
    """Several runs in two experiments; returns run name -> run id."""
    exp_a = client.create_experiment("pretrain")
    exp_b = client.create_experiment("finetune")
    ids: dict[str, str] = {}

    def batch(run_id: str, rows: list[tuple[str, float, int]], t: int) -> None:
        metrics = [Metric(k, v, t + i, s) for i, (k, v, s) in enumerate(rows)]
        for i in range(0, len(metrics), 900):  # log_batch takes at most 1000 metrics
            client.log_batch(run_id, metrics=metrics[i : i + 900])

    # alpha: NaN, ±inf, names with '/', a value logged twice at one step
    run = client.create_run(exp_a, run_name="alpha")
    rid = ids["alpha"] = run.info.run_id
    rows: list[tuple[str, float, int]] = []
    for s in range(60):
        loss = 4.0 - 0.05 * s
        if s == 10:
            loss = math.nan
        elif s == 20:
            loss = math.inf
        elif s == 30:
            loss = -math.inf
        rows.append(("train/loss", loss, s))
        rows.append(("lr", 1e-4 * min(1.0, (s + 1) / 10), s))
        rows.append(("grad_norm/layers.0.attn/q_proj", 0.1 + 1e-3 * s, s))
        if s % 10 == 0:
            rows.append(("val/loss", 4.1 - 0.04 * s, s))
    rows.append(("train/loss", 1.25, 59))  # a second value at the same step
    batch(rid, rows, T0)
    client.log_batch(
        rid,
        params=[Param("n_params", "124000000"), Param("gpu", "A100-SXM4-80GB")],
        tags=[RunTag("team", "infra"), RunTag("nested/tag", "x")],
    )
    client.set_terminated(rid)

    # beta: restarted (the steps go back), still running
    run = client.create_run(exp_a, run_name="beta")
    rid = ids["beta"] = run.info.run_id
    rows = [("train/loss", 3.0 - 0.01 * s, s) for s in range(40)]
    rows += [("train/loss", 2.9 - 0.01 * s, s) for s in range(25, 50)]
    rows += [("tokens_per_sec", 1.0e5 + s, s) for s in range(0, 50, 5)]
    batch(rid, rows, T0 + 10_000)
    client.log_param(rid, "model_params", "7e9")

    # gamma: in the other experiment, with a name PyYAML has to quote and fold
    run = client.create_run(exp_b, run_name=TRICKY_NAME)
    rid = ids["gamma"] = run.info.run_id
    batch(rid, [("val/accuracy", 0.5 + 0.01 * s, s * 100) for s in range(20)], T0 + 20_000)
    client.set_terminated(rid, status="FAILED")

    # a second "alpha" in the other experiment, and a deleted run
    run = client.create_run(exp_b, run_name="alpha")
    rid = ids["alpha-2"] = run.info.run_id
    batch(rid, [("train/loss", 1.0 / (s + 1), s) for s in range(5)], T0 + 30_000)
    run = client.create_run(exp_b, run_name="discarded")
    rid = ids["discarded"] = run.info.run_id
    batch(rid, [("train/loss", 9.0, s) for s in range(3)], T0 + 40_000)
    client.delete_run(rid)
    return ids


@pytest.fixture(scope="module")
def file_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    root = tmp_path_factory.mktemp("fs") / "mlruns"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        client = MlflowClient(tracking_uri=f"file:{root}")
        ids = _log_runs(client)
        yield root, ids


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    db = tmp_path_factory.mktemp("db") / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")  # runs MLflow's migrations once
    return db, _log_runs(client)


def _client(uri: str) -> MlflowClient:
    return MlflowClient(tracking_uri=uri)


def _by_id(runs: list[Run]) -> dict[str, Run]:
    return {r.metadata["run_id"]: r for r in runs}


def _history(run: Run, raw: str) -> list[tuple[int, float, int]]:
    """(step, value, timestamp ms) of one raw metric, in the order trainlens keeps."""
    canonical = {v: k for k, v in run.raw_names.items()}[raw]
    df = run.frame.filter(run.frame["metric"] == canonical)
    return [
        (int(s), float(v), round(w * 1000))
        for s, v, w in zip(df["step"], df["value"], df["wall_time"], strict=True)
    ]


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _assert_agrees(client: MlflowClient, runs: list[Run], *, sql: bool) -> int:
    """Every metric of every live run: trainlens and get_metric_history agree value for
    value, step for step, timestamp for timestamp. Returns the values compared."""
    by_id = _by_id(runs)
    exps = [e.experiment_id for e in client.search_experiments()]
    live = client.search_runs(exps, run_view_type=ViewType.ACTIVE_ONLY)
    assert {r.info.run_id for r in live} == set(by_id)
    compared = 0
    for info in live:
        run = by_id[info.info.run_id]
        assert set(run.raw_names.values()) == set(info.data.metrics)
        for key in info.data.metrics:
            expected = []
            for m in client.get_metric_history(info.info.run_id, key):
                value = m.value
                if sql and abs(value) == DBL_MAX:
                    value = math.copysign(math.inf, value)  # how MLflow's SQL store keeps inf
                expected.append((m.step, value, m.timestamp))
            got = _history(run, key)
            if sql:  # the SQL store returns history sorted by (timestamp, step, value)
                got = sorted(got, key=lambda r: (r[2], r[0], r[1]))
            assert len(got) == len(expected), key
            for g, e in zip(got, expected, strict=True):
                assert g[0] == e[0] and g[2] == e[2] and _same(g[1], e[1]), (key, g, e)
            compared += len(got)
    return compared


# ---- file store ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(PARSE_MODES))
def test_file_store_agrees_in_every_parse_mode(
    file_store: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    for name, value in PARSE_MODES[mode].items():
        monkeypatch.setattr(mlflow_reader, name, value)
    root, _ids = file_store
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    runs = read_mlflow(root, ReadOptions())
    assert _assert_agrees(_client(f"file:{root}"), runs, sql=False) == 287
    assert not [i for r in runs for i in r.data_quality if i.kind.endswith("-line")]


def test_file_store_agrees_with_mlflow_client(
    file_store: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, ids = file_store
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert detect_format(root) == "mlflow"
    runs = read_mlflow(root, ReadOptions())
    assert _assert_agrees(_client(f"file:{root}"), runs, sql=False) == 287  # every value

    alpha = _by_id(runs)[ids["alpha"]]
    loss = alpha.series("train/loss")[1]
    assert math.isnan(loss[10]) and loss[20] == math.inf and loss[30] == -math.inf
    assert loss[59] == 1.25  # the later of two values at one step stands
    assert alpha.has("grad_norm/layers.0.attn/q_proj")  # '/' in a name: sub-folders
    assert any(i.kind == "duplicate-step" for i in alpha.data_quality)
    assert not [i for i in alpha.data_quality if i.kind in ("bad-line", "truncated-line")]
    beta = _by_id(runs)[ids["beta"]]
    assert any(i.kind == "restart" for i in beta.data_quality)  # 39 -> 25 marked by build_run
    assert int(beta.frame["superseded"].sum()) == 15


def test_file_store_metadata(file_store: tuple[Path, dict[str, str]]) -> None:
    root, ids = file_store
    runs = _by_id(read_mlflow(root, ReadOptions()))
    alpha = runs[ids["alpha"]].metadata
    assert alpha["store"] == "file"
    assert alpha["params"] == {"gpu": "A100-SXM4-80GB", "n_params": "124000000"}
    assert alpha["tags"]["team"] == "infra" and alpha["tags"]["nested/tag"] == "x"
    assert alpha["tags"]["mlflow.runName"] == "alpha"
    assert alpha["experiment"] == "pretrain" and alpha["status"] == "FINISHED"
    assert alpha["run_name"] == "alpha" and alpha["lifecycle_stage"] == "active"
    assert alpha["start_time"] is not None and alpha["end_time"] >= alpha["start_time"]
    assert runs[ids["beta"]].metadata["status"] == "RUNNING"
    assert runs[ids["beta"]].metadata["end_time"] is None
    assert runs[ids["beta"]].metadata["params"] == {"model_params": "7e9"}
    gamma = runs[ids["gamma"]]
    assert gamma.name == TRICKY_NAME and gamma.metadata["status"] == "FAILED"
    assert gamma.metadata["experiment"] == "finetune"
    # two runs named alpha: the short id tells them apart; the deleted run is left out
    assert runs[ids["alpha"]].name == f"alpha ({ids['alpha'][:8]})"
    assert runs[ids["alpha-2"]].name == f"alpha ({ids['alpha-2'][:8]})"
    assert ids["discarded"] not in runs


def test_the_run_status_is_how_the_run_ended(file_store: tuple[Path, dict[str, str]]) -> None:
    """MLflow's own status (set by the client's set_terminated): FINISHED is finished,
    FAILED crashed, RUNNING no end (docs/watch.md, "Run states")."""
    from trainlens.core.runstate import run_end

    root, ids = file_store
    runs = _by_id(read_mlflow(root, ReadOptions()))
    alpha = run_end(runs[ids["alpha"]].metadata)
    assert alpha is not None and (alpha.state, alpha.by) == (
        "finished",
        "MLflow run status FINISHED",
    )
    assert alpha.time == runs[ids["alpha"]].metadata["end_time"]
    gamma = run_end(runs[ids["gamma"]].metadata)
    assert gamma is not None and (gamma.state, gamma.error) == ("crashed", "FAILED")
    assert run_end(runs[ids["beta"]].metadata) is None


def test_meta_yaml_reads_as_pyyaml_safe_load(file_store: tuple[Path, dict[str, str]]) -> None:
    """The bounded reader changes nothing on what the MLflow client writes (folded long
    names, quotes, nulls, ints)."""
    yaml = pytest.importorskip("yaml")
    root, _ids = file_store
    metas = sorted(root.rglob("meta.yaml"))
    assert len(metas) >= 8
    for meta in metas:
        assert read_yaml(meta) == yaml.safe_load(meta.read_text(encoding="utf-8")), meta
    assert any(read_yaml(m).get("run_name") == TRICKY_NAME for m in metas)


def _laughs(levels: int = 9) -> str:
    """A "billion laughs" document: 9 aliases per level, 9**levels strings expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for c in "bcdefghijklmnop"[: levels - 1]:
        lines.append(f"{c}: &{c} [" + ",".join([f"*{prev}"] * 9) + "]")
        prev = c
    return "\n".join([*lines, f"run_name: *{prev}"]) + "\n"


def test_billion_laughs_meta_yaml_is_refused_and_noted(
    file_store: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    import resource
    import time

    root, ids = file_store
    store = tmp_path / "mlruns"
    shutil.copytree(root, store)
    run_dir = next(p.parent for p in store.rglob("meta.yaml") if p.parent.name == ids["beta"])
    meta = run_dir / "meta.yaml"
    bomb = f"run_id: {ids['beta']}\nrun_uuid: {ids['beta']}\n" + _laughs()
    meta.write_text(bomb)
    assert len(bomb) < 700  # 9**9 = 387 million strings once expanded
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    [run] = read_mlflow(run_dir, ReadOptions())
    assert time.perf_counter() - t0 < 5.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 200_000  # KiB
    # the metrics are all there, the name comes from the mlflow.runName tag, the status
    # (only in meta.yaml) is unknown, and the refusal is noted
    assert run.name == "beta" and run.metadata["status"] is None
    assert run.frame.height > 0
    [note] = [d for d in run.data_quality if d.kind == "bad-metadata"]
    assert note.source == str(meta) and "aliases are expanded" in note.message


def test_experiment_folder_run_folder_and_metrics_folder(
    file_store: tuple[Path, dict[str, str]],
) -> None:
    root, ids = file_store
    run_dir = next(p.parent for p in root.rglob("meta.yaml") if p.parent.name == ids["beta"])
    for path in (run_dir, run_dir / "metrics"):
        assert sniff(path, b"")
        [run] = read_mlflow(path, ReadOptions())
        assert run.name == "beta" and run.metadata["experiment"] == "pretrain"
    runs = read_mlflow(run_dir.parent, ReadOptions())
    assert sorted(r.metadata["run_id"] for r in runs) == sorted([ids["alpha"], ids["beta"]])
    assert {r.name for r in runs} == {"alpha", "beta"}  # no clash inside one experiment


def test_selection_by_id_and_name(file_store: tuple[Path, dict[str, str]]) -> None:
    root, ids = file_store
    [beta] = read_mlflow(root, ReadOptions(runs=[ids["beta"]]))
    assert beta.name == "beta"
    by_name = read_mlflow(root, ReadOptions(runs=["alpha", "beta"]))
    assert {r.metadata["run_id"] for r in by_name} == {ids["alpha"], ids["alpha-2"], ids["beta"]}
    [one] = read_mlflow(root, ReadOptions(runs=[f"alpha ({ids['alpha-2'][:8]})"]))
    assert one.metadata["run_id"] == ids["alpha-2"]  # the name a previous read showed
    # a deleted run is read when asked for by name
    [gone] = read_mlflow(root, ReadOptions(runs=["discarded"]))
    assert gone.metadata["lifecycle_stage"] == "deleted" and gone.frame.height == 3


def test_unknown_selection_names_the_available_runs(
    file_store: tuple[Path, dict[str, str]],
) -> None:
    root, ids = file_store
    with pytest.raises(UnreadableInputError) as err:
        read_mlflow(root, ReadOptions(runs=["beta", "nope"]))
    msg = str(err.value)
    assert "'nope'" in msg and "beta" in msg and ids["gamma"] in msg and str(root) in msg


@pytest.mark.parametrize("mode", list(PARSE_MODES))
def test_bad_lines_are_reported_with_file_and_line_and_the_rest_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    for name, value in PARSE_MODES[mode].items():
        monkeypatch.setattr(mlflow_reader, name, value)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    root = tmp_path / "mlruns"
    client = _client(f"file:{root}")
    exp = client.create_experiment("e")
    rid = client.create_run(exp, run_name="live").info.run_id
    client.log_batch(
        rid, metrics=[Metric("train/loss", 1.0 / (s + 1), T0 + s, s) for s in range(50)]
    )
    client.log_batch(rid, metrics=[Metric("lr", 0.1, T0 + s, s) for s in range(50)])
    client.log_batch(rid, metrics=[Metric("val/loss", 2.0, T0 + s, s) for s in range(3)])
    before = client.get_metric_history(rid, "train/loss")
    loss_file = root / exp / rid / "metrics" / "train" / "loss"
    lr_file = root / exp / rid / "metrics" / "lr"
    with loss_file.open("a") as fh:
        fh.write(f"{T0 + 50} 0.01")  # a write cut short: no step, no newline
    lines = lr_file.read_text().splitlines(keepends=True)
    lines.insert(7, "garbage here\n")
    lines.insert(20, f"{T0} not-a-number 3\n")
    lr_file.write_text("".join(lines))
    val_file = root / exp / rid / "metrics" / "val" / "loss"
    val_file.write_text("\n" + val_file.read_text())  # a blank first line

    [run] = read_mlflow(root, ReadOptions())
    assert _history(run, "train/loss") == [(m.step, m.value, m.timestamp) for m in before]
    assert run.series("lr")[0].tolist() == list(range(50))
    issues = {i.kind: i for i in run.data_quality if i.source != str(val_file)}
    trunc = issues["truncated-line"]
    assert trunc.source == str(loss_file) and trunc.location == "line 51"
    bad = issues["bad-line"]
    assert bad.source == str(lr_file) and bad.location == "line 8" and bad.count == 2
    assert bad.details["lines"] == [8, 21] and "garbage here" in bad.message
    assert run.series("val/loss")[0].tolist() == [0, 1, 2]
    [blank] = [i for i in run.data_quality if i.source == str(val_file)]
    assert blank.kind == "bad-line" and blank.location == "line 1"


def test_legacy_two_field_lines_read_as_mlflow_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    root = tmp_path / "mlruns"
    client = _client(f"file:{root}")
    exp = client.create_experiment("old")
    rid = client.create_run(exp).info.run_id
    client.log_batch(rid, metrics=[Metric("acc", 0.1 * s, T0 + s, s) for s in range(5)])
    path = root / exp / rid / "metrics" / "acc"
    # files from MLflow before steps existed hold `timestamp value`
    path.write_text(
        "".join(" ".join(ln.split()[:2]) + "\n" for ln in path.read_text().splitlines())
    )
    expected = [(m.step, m.value, m.timestamp) for m in client.get_metric_history(rid, "acc")]
    [run] = read_mlflow(root, ReadOptions())
    assert run.name == client.get_run(rid).info.run_name  # MLflow named it
    assert _history(run, "acc") == expected and {s for s, _v, _t in expected} == {0}
    assert not [i for i in run.data_quality if i.kind == "bad-line"]


def test_dataset_lines_keep_their_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A metric logged with a dataset is written `timestamp value step name digest`;
    MLflow's own file-store reader returns step 0 for such lines, trainlens the step."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    root = tmp_path / "mlruns"
    client = _client(f"file:{root}")
    rid = client.create_run(client.create_experiment("ds")).info.run_id
    client.log_metric(rid, "val/loss", 0.5, step=7, dataset_name="eval", dataset_digest="abc")
    client.log_metric(rid, "val/loss", 0.4, step=8)
    assert [m.step for m in client.get_metric_history(rid, "val/loss")] == [0, 8]
    [run] = read_mlflow(root, ReadOptions())
    assert [(s, v) for s, v, _t in _history(run, "val/loss")] == [(7, 0.5), (8, 0.4)]
    assert run.data_quality == []


def test_store_without_runs_is_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    root = tmp_path / "mlruns"
    _client(f"file:{root}").search_experiments()  # creates mlruns/ with the Default experiment
    assert (root / "0" / "meta.yaml").is_file()
    assert detect_format(root) == "mlflow"
    with pytest.raises(UnreadableInputError, match="no MLflow runs"):
        read_mlflow(root, ReadOptions())


def test_folders_that_are_not_mlflow_are_not_sniffed(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "meta.yaml").write_text("title: my notes\n")
    (tmp_path / "b" / "metrics").mkdir(parents=True)
    (tmp_path / "b" / "metrics" / "loss.csv").write_text("step,loss\n1,2.0\n")
    db = tmp_path / "other.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    assert not sniff(tmp_path / "a", b"")
    assert not sniff(tmp_path / "b", b"")
    assert not sniff(tmp_path, b"")
    assert not sniff(db, db.read_bytes()[:4096])


# ---- SQLite -------------------------------------------------------------------------------


@pytest.mark.slow
def test_sqlite_agrees_with_mlflow_client(sqlite_store: tuple[Path, dict[str, str]]) -> None:
    db, ids = sqlite_store
    assert detect_format(db) == "mlflow"
    runs = read_mlflow(db, ReadOptions())
    client = _client(f"sqlite:///{db}")
    assert _assert_agrees(client, runs, sql=True) == 287
    # MLflow's SQL store keeps inf as the largest double; trainlens gives inf back
    [inf] = [m for m in client.get_metric_history(ids["alpha"], "train/loss") if m.step == 20]
    assert inf.value == DBL_MAX
    alpha = _by_id(runs)[ids["alpha"]]
    loss = alpha.series("train/loss")[1]
    assert math.isnan(loss[10]) and loss[20] == math.inf and loss[30] == -math.inf
    assert loss[59] == 1.25
    beta = _by_id(runs)[ids["beta"]]
    assert int(beta.frame["superseded"].sum()) == 15  # logging (rowid) order kept
    assert not [i for i in alpha.data_quality if i.kind == "store-mismatch"]


@pytest.mark.slow
def test_sqlite_metadata_and_selection(sqlite_store: tuple[Path, dict[str, str]]) -> None:
    db, ids = sqlite_store
    runs = _by_id(read_mlflow(db, ReadOptions()))
    assert ids["discarded"] not in runs
    alpha = runs[ids["alpha"]].metadata
    assert alpha["store"] == "sqlite" and alpha["experiment"] == "pretrain"
    assert alpha["params"] == {"gpu": "A100-SXM4-80GB", "n_params": "124000000"}
    assert alpha["tags"]["team"] == "infra" and alpha["status"] == "FINISHED"
    assert runs[ids["gamma"]].name == TRICKY_NAME
    [gamma] = read_mlflow(db, ReadOptions(runs=[ids["gamma"]]))
    assert gamma.series("val/accuracy")[0].tolist() == [s * 100 for s in range(20)]
    [beta] = read_mlflow(db, ReadOptions(runs=["beta"]))
    assert beta.metadata["run_id"] == ids["beta"]
    with pytest.raises(UnreadableInputError, match=r"'nope'.*available runs: .*beta"):
        read_mlflow(db, ReadOptions(runs=["nope"]))


@pytest.mark.slow
def test_sqlite_without_index_and_latest_metrics_cross_check(
    sqlite_store: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, ids = sqlite_store
    copy = tmp_path / "copy.db"
    shutil.copyfile(db, copy)
    con = sqlite3.connect(copy)
    for (name,) in con.execute(
        "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='metrics' "
        "AND sql IS NOT NULL"
    ).fetchall():
        con.execute(f'DROP INDEX "{name}"')
    con.execute(
        "UPDATE latest_metrics SET step = 999 WHERE run_uuid = ? AND key = 'lr'", (ids["alpha"],)
    )
    cur = con.execute(  # a value that is not a number (SQLite keeps whatever it is given)
        "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
        "VALUES ('lr', 'oops', ?, ?, 60, 0)",
        (T0, ids["alpha"]),
    )
    bad_rowid = cur.lastrowid
    con.commit()
    con.close()
    plain = _by_id(read_mlflow(db, ReadOptions()))
    scanned = _by_id(
        read_mlflow(copy, ReadOptions())
    )  # one full scan instead of a query per metric
    for rid, run in plain.items():
        assert (
            scanned[rid]
            .frame.sort("metric", maintain_order=True)
            .equals(run.frame.sort("metric", maintain_order=True))
        )
    [odd] = [i for i in scanned[ids["alpha"]].data_quality if i.kind == "store-mismatch"]
    assert odd.details["last_step_differs"] == ["lr"]
    [bad] = [i for i in scanned[ids["alpha"]].data_quality if i.kind == "bad-record"]
    assert bad.location == f"metrics rowid {bad_rowid}" and "'lr'" in bad.message


# ---- mlflow-export-import ---------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(
    file_store: tuple[Path, dict[str, str]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Path, MlflowClient, dict[str, str]]]:
    pytest.importorskip("mlflow_export_import")
    root, ids = file_store
    out = tmp_path_factory.mktemp("export")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        mp.setenv("MLFLOW_TRACKING_URI", f"file:{root}")
        from mlflow_export_import.experiment.export_experiment import ExperimentExporter
        from mlflow_export_import.run.export_run import RunExporter

        client = _client(f"file:{root}")
        assert RunExporter(client).export_run(ids["alpha"], str(out / "run"))
        exp = client.get_experiment_by_name("pretrain")
        assert exp is not None
        ExperimentExporter(client).export_experiment(exp.experiment_id, str(out / "experiment"))
        yield out / "run", out / "experiment", client, ids


@pytest.mark.slow
def test_export_run_agrees_with_mlflow_client(
    exported: tuple[Path, Path, MlflowClient, dict[str, str]],
) -> None:
    run_dir, _exp_dir, client, ids = exported
    assert detect_format(run_dir) == "mlflow"
    assert detect_format(run_dir / "run.json") == "mlflow"
    [run] = read_mlflow(run_dir, ReadOptions())
    assert run.name == "alpha" and run.metadata["store"] == "export"
    assert run.metadata["params"]["n_params"] == "124000000"
    for key in client.get_run(ids["alpha"]).data.metrics:
        expected = [
            (m.step, m.value, m.timestamp) for m in client.get_metric_history(ids["alpha"], key)
        ]
        got = _history(run, key)
        assert len(got) == len(expected)
        assert all(
            g[0] == e[0] and g[2] == e[2] and _same(g[1], e[1])
            for g, e in zip(got, expected, strict=True)
        )
    loss = run.series("train/loss")[1]
    assert math.isnan(loss[10]) and loss[20] == math.inf and loss[30] == -math.inf


@pytest.mark.slow
def test_export_experiment_gives_each_run(
    exported: tuple[Path, Path, MlflowClient, dict[str, str]],
) -> None:
    _run_dir, exp_dir, _, ids = exported
    assert detect_format(exp_dir) == "mlflow"
    runs = read_mlflow(exp_dir, ReadOptions())
    assert sorted(r.metadata["run_id"] for r in runs) == sorted([ids["alpha"], ids["beta"]])
    assert {r.metadata["experiment"] for r in runs} == {"pretrain"}
    [beta] = read_mlflow(exp_dir, ReadOptions(runs=["beta"]))
    assert beta.frame.height == 40 + 25 + 10


@pytest.mark.slow
def test_export_shapes_other_than_the_current_one(
    exported: tuple[Path, Path, MlflowClient, dict[str, str]], tmp_path: Path
) -> None:
    """Older exports: a flat object; metrics as a list of {key, value, timestamp, step};
    or only each metric's last value."""
    import json

    run_dir, _exp_dir, _, _ids = exported
    doc: dict[str, Any] = json.loads((run_dir / "run.json").read_text())["mlflow"]
    listed = [{"key": k, **rec} for k, recs in doc["metrics"].items() for rec in recs]
    flat = {"info": doc["info"], "params": doc["params"], "tags": doc["tags"], "metrics": listed}
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "run.json").write_text(json.dumps(flat))
    [a] = read_mlflow(tmp_path / "flat", ReadOptions())
    [b] = read_mlflow(run_dir, ReadOptions())
    assert a.frame.equals(b.frame) and a.metadata["params"] == b.metadata["params"]

    latest = {**flat, "metrics": {"train/loss": 1.25, "lr": 1e-4}}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "run.json").write_text(json.dumps(latest))
    [c] = read_mlflow(tmp_path / "old", ReadOptions())
    assert c.series("train/loss")[1].tolist() == [1.25]
    assert any(i.kind == "no-history" for i in c.data_quality)

    (tmp_path / "wrong").mkdir()
    (tmp_path / "wrong" / "run.json").write_text(json.dumps({"run_id": "x", "info": {}}))
    with pytest.raises(UnreadableInputError, match="not an mlflow-export-import run export"):
        read_mlflow(tmp_path / "wrong", ReadOptions())


def test_trainlens_does_not_import_mlflow() -> None:
    package = Path(__file__).resolve().parents[1] / "trainlens" / "readers" / "mlflow"
    sources = sorted(package.glob("*.py"))
    assert sources
    for src in sources:
        text = src.read_text()
        assert "import mlflow" not in text and "from mlflow" not in text, src


# ---- bad input: one sentence naming the file, never a traceback ----------------------------


@pytest.mark.parametrize("which", ["run", "experiment"])
def test_meta_yaml_pyyaml_rejects_is_one_sentence_naming_the_file(
    file_store: tuple[Path, dict[str, str]], tmp_path: Path, which: str
) -> None:
    root, ids = file_store
    store = tmp_path / "mlruns"
    shutil.copytree(root, store)
    run_dir = next(p.parent for p in store.rglob("meta.yaml") if p.parent.name == ids["beta"])
    meta = (run_dir if which == "run" else run_dir.parent) / "meta.yaml"
    meta.write_text(meta.read_text() + "status: [3\nrun_name: {oops\n")  # not YAML
    runs = _by_id(read_mlflow(store, ReadOptions()))
    beta = runs[ids["beta"]]
    [note] = [d for d in beta.data_quality if d.kind == "bad-metadata"]
    assert note.source == str(meta)
    assert note.message.startswith("not valid YAML (line ") and "\n" not in note.message
    assert "Traceback" not in note.message
    # every metric is still read; the name falls back to the mlflow.runName tag
    assert beta.name == "beta" and beta.frame.height > 0
    if which == "run":
        assert beta.metadata["status"] is None  # only meta.yaml knows it
    else:  # the experiment's other run carries the same note; its own meta.yaml is fine
        alpha = runs[ids["alpha"]]
        assert [d.source for d in alpha.data_quality if d.kind == "bad-metadata"] == [str(meta)]
        assert alpha.metadata["status"] == "FINISHED" and alpha.metadata["experiment"] is None


def test_run_folder_without_metric_files_is_a_clear_error(
    file_store: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, ids = file_store
    store = tmp_path / "mlruns"
    shutil.copytree(root, store)
    run_dir = next(p.parent for p in store.rglob("meta.yaml") if p.parent.name == ids["beta"])
    shutil.rmtree(run_dir / "metrics")
    with pytest.raises(UnreadableInputError) as err:
        read_mlflow(run_dir, ReadOptions())
    msg = str(err.value)
    assert msg.startswith(f"{run_dir}: no metrics logged") and ids["beta"] in msg
    assert "\n" not in msg


@pytest.mark.parametrize("damage", ["overwritten", "truncated"])
def test_corrupt_sqlite_database_is_one_sentence_naming_the_file(
    sqlite_store: tuple[Path, dict[str, str]], tmp_path: Path, damage: str
) -> None:
    db, _ids = sqlite_store
    data = db.read_bytes()
    bad = tmp_path / "mlflow.db"
    if damage == "overwritten":  # the header page kept, every page after it garbage
        bad.write_bytes(data[:4096] + b"\x5a" * (len(data) - 4096))
    else:
        bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(UnreadableInputError) as err:
        read_mlflow(bad, ReadOptions())
    msg = str(err.value)
    assert msg.startswith(f"{bad}: cannot read the MLflow database: ") and "\n" not in msg


@pytest.mark.slow  # sqlite3 waits its 5 s busy timeout before it gives up
def test_locked_sqlite_database_is_one_sentence_naming_the_file(
    sqlite_store: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, _ids = sqlite_store
    copy = tmp_path / "mlflow.db"
    shutil.copy(db, copy)
    writer = sqlite3.connect(copy, isolation_level=None)
    try:
        writer.execute("BEGIN EXCLUSIVE")  # another process in the middle of a write
        with pytest.raises(UnreadableInputError) as err:
            read_mlflow(copy, ReadOptions())
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert str(err.value) == f"{copy}: cannot read the MLflow database: database is locked"
    assert read_mlflow(copy, ReadOptions())  # readable again once the writer is done
