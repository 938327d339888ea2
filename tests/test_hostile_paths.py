"""Paths named inside files stay inside the tree the user named (issue 23, item 3).

A sharded index's ``weight_map``, DCP's ``.metadata``, a ``latest`` pointer, an MLflow
store's run folders and files, a W&B run's files: each is written by the real library,
then made to name a file outside (``../..``, an absolute path, ``/proc/self/environ``,
a symlink leading out). A sentinel file sits outside with known bytes. Each escape is
reported (CKPT010 for checkpoints, an ``outside-path`` note for readers), the sentinel's
bytes never reach the output, and no ``open`` / ``stat`` ever touches it (recorded by
wrapping them).
"""

from __future__ import annotations

import builtins
import io
import json
import os
import pickle
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURE_RUNS, run_wandb_offline
from trainlens.checkpoints import audit, inventory
from trainlens.cli import main
from trainlens.core.paths import OutsideTree, confine, confined, is_inside

SECRET = b"SENTINEL-outside-7f3a9c!" * 4
#: what the old audit printed for a "shard" that is the sentinel: its first 8 bytes as a
#: header length
SECRET_AS_LENGTH = f"{struct.unpack('<Q', SECRET[:8])[0]:,}"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the tree the user names, with files a hostile name points at."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.safetensors").write_bytes(SECRET)
    (d / "secret.distcp").write_bytes(SECRET * 64)
    (d / "global_step9").mkdir()
    (d / "global_step9" / "mp_rank_00_model_states.pt").write_bytes(SECRET)
    return d


@pytest.fixture
def touched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every path opened or stat'ed while the test runs: ("open" / "stat", the path as the
    call resolves it)."""
    seen: list[tuple[str, str]] = []
    real_open, real_io_open, real_os_open, real_stat = builtins.open, io.open, os.open, os.stat

    def note(path: object, follow: bool = True, kind: str = "open") -> None:
        if isinstance(path, (str, bytes, os.PathLike)):
            text = os.fsdecode(path)
            seen.append((kind, os.path.realpath(text) if follow else os.path.abspath(text)))

    def wrapped_open(file: Any, *a: Any, **k: Any) -> Any:
        note(file)
        return real_open(file, *a, **k)

    def wrapped_io_open(file: Any, *a: Any, **k: Any) -> Any:
        note(file)
        return real_io_open(file, *a, **k)

    def wrapped_os_open(path: Any, *a: Any, **k: Any) -> Any:
        note(path)
        return real_os_open(path, *a, **k)

    def wrapped_stat(path: Any, *a: Any, **k: Any) -> Any:
        note(path, k.get("follow_symlinks", True), "stat")
        return real_stat(path, *a, **k)

    monkeypatch.setattr(builtins, "open", wrapped_open)
    monkeypatch.setattr(io, "open", wrapped_io_open)
    monkeypatch.setattr(os, "open", wrapped_os_open)
    monkeypatch.setattr(os, "stat", wrapped_stat)
    return seen


def _never_touched(
    seen: list[tuple[str, str]], *places: Path | str, kinds: tuple[str, ...] = ("open", "stat")
) -> None:
    for place in places:
        real = os.path.realpath(place)
        hits = [p for k, p in seen if k in kinds and is_inside(real, p)]
        assert not hits, f"{place} was {'/'.join(kinds)}ed: {hits[:3]}"


#: the command also looks for a run in the folder (the CKPT findings that need its
#: steps): that generic walk stats a linked folder to see whether it is one, and opens
#: nothing outside; the audit itself neither opens nor stats anything outside
OPENS = ("open",)


def _cli_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The command's exit code and its output (stdout, then stderr)."""
    capsys.readouterr()  # what the writers printed before
    code = main(args)
    out = capsys.readouterr()
    return code, out.out + out.err


# --- the rule ---------------------------------------------------------------------------


def test_confine_refuses_every_way_out(tmp_path: Path, outside: Path) -> None:
    base = tmp_path / "tree"
    (base / "sub").mkdir(parents=True)
    (base / "sub" / "w.bin").write_bytes(b"x")
    (base / "in_link").symlink_to(base / "sub" / "w.bin")
    (base / "out_link").symlink_to(outside / "secret.safetensors")
    (base / "out_dir").symlink_to(outside)
    os.mkfifo(base / "fifo")
    assert confine(base, "sub/w.bin") == (base / "sub" / "w.bin").resolve()
    assert confine(base, "sub/../sub/w.bin") == (base / "sub" / "w.bin").resolve()
    assert confine(base, "in_link") == (base / "sub" / "w.bin").resolve()  # a link inside
    assert confine(base, "not/there.bin").name == "there.bin"  # missing: the caller's call
    refused = {
        "/proc/self/environ": "absolute",
        str(outside / "secret.safetensors"): "absolute",
        "../outside/secret.safetensors": "climbs out",
        "sub/../../outside": "climbs out",
        "out_link": "symlink",
        "out_dir/secret.safetensors": "symlink",
        "fifo": "FIFO",
        "a\0b": "NUL",
        "": "empty",
    }
    for named, why in refused.items():
        with pytest.raises(OutsideTree, match=why):
            confine(base, named)
        assert confined(base, named) is None


# --- checkpoints ------------------------------------------------------------------------


def test_index_weight_map_naming_files_outside_is_refused_unopened(
    tmp_path: Path,
    outside: Path,
    touched: list[tuple[str, str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    folder = tmp_path / "run" / "step_500"
    folder.mkdir(parents=True)
    # five shards as save_pretrained(max_shard_size=...) leaves them, and their index (the
    # index is the one thing mutated: it is what names paths)
    shards = [f"model-{i:05d}-of-00005.safetensors" for i in range(1, 6)]
    weight_map = {}
    for i, shard in enumerate(shards):
        st.save_file({f"layer.{i}.weight": torch.ones(8, 8) * i}, folder / shard)
        weight_map[f"layer.{i}.weight"] = shard
    index = {"metadata": {"total_size": 5 * 256}, "weight_map": weight_map}
    index_path = folder / "model.safetensors.index.json"
    hostile = {
        shards[0]: "../../outside/secret.safetensors",
        shards[1]: str(outside / "secret.safetensors"),
        shards[2]: "/proc/self/environ",
    }
    index["weight_map"] = {t: hostile.get(s, s) for t, s in index["weight_map"].items()}
    index_path.write_text(json.dumps(index, indent=2))
    (folder / shards[3]).unlink()  # a shard that is a symlink to the sentinel
    (folder / shards[3]).symlink_to(outside / "secret.safetensors")
    touched.clear()

    code, out = _cli_json(["checkpoints", str(tmp_path / "run"), "--json"], capsys)
    assert code == 1
    assert SECRET[:8].decode() not in out and SECRET_AS_LENGTH not in out
    _never_touched(touched, outside, "/proc/self/environ", kinds=OPENS)
    touched.clear()
    inventory(tmp_path / "run")
    _never_touched(touched, outside, "/proc/self/environ")
    doc, _ = json.JSONDecoder().raw_decode(out)
    (ckpt,) = doc["checkpoints"]
    assert ckpt["integrity"] == "outside"
    outside_files = {p["file"]: p["message"] for p in ckpt["problems"] if p["status"] == "outside"}
    assert set(outside_files) == {
        "../../outside/secret.safetensors",
        str(outside / "secret.safetensors"),
        "/proc/self/environ",
        shards[3],
    }
    assert "climbs out of the folder" in outside_files["../../outside/secret.safetensors"]
    assert "absolute path" in outside_files["/proc/self/environ"]
    assert "symlink" in outside_files[shards[3]]
    assert all("not opened" in m for m in outside_files.values())
    (finding,) = [f for f in doc["findings"] if f["code"] == "CKPT010"]
    assert finding["name"] == "path-outside-checkpoint" and finding["severity"] == "error"
    assert "do not load it" in finding["message"] and "(and 3 more)" in finding["message"]
    # the shards that stayed inside are still audited whole
    assert not [p for p in ckpt["problems"] if p["status"] != "outside"]


def test_symlinks_in_a_checkpoint_folder_leading_out_are_reported(
    tmp_path: Path, outside: Path, touched: list[tuple[str, str]]
) -> None:
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    folder = tmp_path / "run" / "checkpoint-100"
    folder.mkdir(parents=True)
    st.save_file({"w": torch.ones(4, 4)}, folder / "model.safetensors")
    (folder / "alias.safetensors").symlink_to(folder / "model.safetensors")  # inside: fine
    (folder / "extra.safetensors").symlink_to(outside / "secret.safetensors")
    (folder / "data").symlink_to(outside)
    touched.clear()
    inv, found, _ = audit(tmp_path / "run", with_run=False)
    _never_touched(touched, outside)
    (c,) = inv.checkpoints
    assert c.status == "outside"
    assert sorted((p.status, p.file) for p in c.problems) == [
        ("outside", "data"),
        ("outside", "extra.safetensors"),
    ]
    assert all("symlink leading out" in p.message for p in c.problems)
    assert [f.code for f in found] == ["CKPT010"]


def test_dcp_metadata_naming_storage_outside_is_refused_unstatted(
    tmp_path: Path, outside: Path, touched: list[tuple[str, str]]
) -> None:
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    from torch.distributed.checkpoint.filesystem import FileSystemReader, _StorageInfo

    folder = tmp_path / "run" / "step_40"
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    with pytest.warns(UserWarning):  # "assuming the intent is to save in a single process"
        dcp.save({"model": model.state_dict()}, checkpoint_id=str(folder))
    # the test's own file, written a moment ago: loaded here to rewrite it as DCP would
    md = FileSystemReader(str(folder)).read_metadata()
    names = iter(["../../outside/secret.distcp", str(outside / "secret.distcp")])
    for key, info in list(md.storage_data.items()):
        md.storage_data[key] = _StorageInfo(next(names, info.relative_path), info.offset, 4)
    with (folder / ".metadata").open("wb") as fh:
        pickle.dump(md, fh)
    touched.clear()
    inv, found, _ = audit(tmp_path / "run", with_run=False)
    _never_touched(touched, outside)
    (c,) = inv.checkpoints
    files = sorted(p.file for p in c.problems if p.status == "outside")
    assert files == sorted(["../../outside/secret.distcp", str(outside / "secret.distcp")])
    assert "CKPT010" in [f.code for f in found]


def test_latest_pointers_naming_a_folder_outside_are_not_followed(
    tmp_path: Path,
    outside: Path,
    touched: list[tuple[str, str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    torch = pytest.importorskip("torch")
    run = tmp_path / "run"
    for step in (10, 20):
        (run / f"global_step{step}").mkdir(parents=True)
        torch.save({"w": torch.ones(2)}, run / f"global_step{step}" / "mp_rank_00_model_states.pt")
    (run / "latest").write_text("../outside/global_step9\n")
    # HF + DeepSpeed: checkpoint-N/latest names global_stepN inside it
    hf = run / "checkpoint-30"
    hf.mkdir()
    torch.save({"w": torch.ones(2)}, hf / "pytorch_model.bin")
    (hf / "latest").write_text(str(outside / "global_step9"))
    touched.clear()
    code, out = _cli_json(["checkpoints", str(run), "--json"], capsys)
    _never_touched(touched, outside, kinds=OPENS)
    touched.clear()
    inventory(run)
    _never_touched(touched, outside)
    assert code == 1 and SECRET[:8].decode() not in out
    doc, _ = json.JSONDecoder().raw_decode(out)
    (ptr,) = doc["pointers"]
    assert ptr["resolved"] is None and "climbs out" in ptr["refused"]
    by_code = [f for f in doc["findings"] if f["code"] == "CKPT010"]
    assert len(by_code) == 2  # the pointer, and checkpoint-30's own latest
    assert any("rewrite the pointer" in f["message"] for f in by_code)
    assert not [f for f in doc["findings"] if f["code"] == "CKPT002"]  # said once, as CKPT010
    hf_ckpt = next(c for c in doc["checkpoints"] if c["name"] == "checkpoint-30")
    assert [p["status"] for p in hf_ckpt["problems"]] == ["outside"]
    # a pointer inside is followed as before
    (run / "latest").write_text("global_step20")
    inv = inventory(run)
    assert inv.pointers[0].resolved == str(run / "global_step20") and not inv.pointers[0].refused


# --- MLflow -----------------------------------------------------------------------------


@pytest.fixture
def mlflow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """(store, a second store elsewhere), each with one run of train/loss by the client."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    roots = []
    for name, value in (("mlruns", 1.0), ("elsewhere", 777.25)):
        root = tmp_path / name
        client = MlflowClient(tracking_uri=f"file:{root}")
        exp = client.create_experiment("e")
        run = client.create_run(exp, run_name=name)
        for step in range(4):
            client.log_metric(run.info.run_id, "train/loss", value + step, step=step)
        client.log_param(run.info.run_id, "lr", "0.001")
        roots.append(root)
    yield roots[0], roots[1]


def _run_dir(store: Path) -> Path:
    return next(p.parent for p in store.glob("*/*/meta.yaml") if "run_id" in p.read_text())


def test_mlflow_links_and_artifact_uris_outside_the_store_are_not_read(
    mlflow_store: tuple[Path, Path],
    outside: Path,
    touched: list[tuple[str, str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from trainlens.readers import read_runs

    store, elsewhere = mlflow_store
    run_dir = _run_dir(store)
    meta = run_dir / "meta.yaml"
    meta.write_text(
        meta.read_text().replace(
            "artifact_uri: ", f"artifact_uri: file://{outside}/artifacts # was: ", 1
        )
    )
    other = _run_dir(elsewhere)
    (run_dir.parent / "a0linked").symlink_to(other)  # a run folder of another store
    (outside / "loss").write_text("1700000000000 123.456 0\n")
    (run_dir / "metrics" / "stolen").symlink_to(outside / "loss")
    (run_dir / "params" / "token").symlink_to(outside / "secret.safetensors")
    touched.clear()
    (run,) = read_runs([str(store)])
    _never_touched(touched, outside, elsewhere)
    assert sorted(run.frame.get_column("metric").unique().to_list()) == ["train/loss"]
    assert run.frame.get_column("value").to_list() == [1.0, 2.0, 3.0, 4.0]
    assert "token" not in run.metadata["params"] and run.metadata["params"]["lr"] == "0.001"
    assert str(outside) in run.metadata["artifact_uri"]  # kept as text, never opened
    notes = {Path(i.source).name: i.message for i in run.data_quality if i.kind == "outside-path"}
    assert set(notes) == {"a0linked", "stolen", "token"}
    assert all("not read" in m for m in notes.values())
    code, out = _cli_json(["analyze", str(store), "--json"], capsys)
    assert code in (0, 1) and SECRET[:8].decode() not in out and "123.456" not in out


# --- W&B --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("wandb_paths")
    writer = Path(__file__).with_name("_wandb_writer.py")
    run_wandb_offline(writer, root, f"healthy={FIXTURE_RUNS / 'healthy_cosine'}")
    return next((root / "healthy" / "wandb").glob("offline-run-*"))


def test_wandb_run_files_linked_out_of_the_run_are_not_read(
    wandb_run: Path, tmp_path: Path, outside: Path, touched: list[tuple[str, str]]
) -> None:
    import shutil

    from trainlens.readers import read_runs

    run_dir = tmp_path / "wandb" / wandb_run.name
    shutil.copytree(wandb_run, run_dir, symlinks=True)
    (before,) = read_runs([str(run_dir)])
    log = next(run_dir.glob("run-*.wandb"))
    shutil.copy(log, outside / "other.wandb")  # a whole log: read twice if followed
    (run_dir / "run-zzzz.wandb").symlink_to(outside / "other.wandb")
    (outside / "summary.json").write_text(json.dumps({"token": SECRET[:8].decode()}))
    summary = run_dir / "files" / "wandb-summary.json"
    summary.unlink(missing_ok=True)
    summary.symlink_to(outside / "summary.json")
    touched.clear()
    (after,) = read_runs([str(run_dir)])
    # nothing outside the run folder is opened: no link, and no file the log's own file
    # records name (trainlens reads the transaction log and two files it knows by name)
    _never_touched(touched, outside)
    logs = [p for _k, p in touched if p.endswith(".wandb")]
    assert logs and all(is_inside(os.path.realpath(run_dir), p) for p in logs)
    assert after.frame.height == before.frame.height
    assert "summary" not in after.metadata
    notes = [i for i in after.data_quality if i.kind == "outside-path"]
    assert sorted(Path(i.source).name for i in notes) == ["run-zzzz.wandb", "wandb-summary.json"]
    assert all("not read" in i.message and "symlink" in i.message for i in notes)
