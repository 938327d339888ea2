"""``trainlens checkpoints``: checkpoints written by the real libraries (torch.save,
safetensors, transformers' sharded save_pretrained, torch.distributed.checkpoint), then
damaged; each damage found and named. Nothing in a checkpoint is ever run."""

from __future__ import annotations

import ast
import json
import os
import pickle
import resource
import struct
import time
import zipfile
from pathlib import Path

import pytest

from trainlens.checkpoints import Params, RunSteps, audit, findings, inventory
from trainlens.cli import main

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

PKG = Path(__file__).resolve().parents[1] / "trainlens"


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _train_state(with_optimizer: bool = True) -> dict[str, object]:
    model = _model()
    state: dict[str, object] = {"model": model.state_dict(), "step": 1}
    if with_optimizer:
        opt = torch.optim.Adam(model.parameters())
        model(torch.randn(2, 16)).sum().backward()
        opt.step()
        state["optimizer"] = opt.state_dict()
    return state


def _member_data_offset(path: Path, member: str) -> int:
    """Where a zip member's bytes start (its local header says how long name and extra are)."""
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(member))
    raw = path.read_bytes()
    h = info.header_offset
    n, m = struct.unpack("<HH", raw[h + 26 : h + 30])
    return h + 30 + n + m


def _flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def _by_name(inv_path: Path) -> dict[str, object]:
    return {c.name: c for c in inventory(inv_path).checkpoints}


# --- intact checkpoints, real writers ---------------------------------------------------


def test_torch_save_zip_is_found_with_its_step_and_audited_intact(tmp_path: Path) -> None:
    torch.save(_train_state(), tmp_path / "ckpt_step_300.pt")
    torch.save(_model().state_dict(), tmp_path / "model.pt")  # no step: a model, not listed
    inv = inventory(tmp_path)
    assert [(c.name, c.kind, c.step, c.status) for c in inv.checkpoints] == [
        ("ckpt_step_300.pt", "torch", 300, "ok")
    ]
    c = inv.checkpoints[0]
    assert c.size == (tmp_path / "ckpt_step_300.pt").stat().st_size
    assert c.optimizer is True  # the pickle's 'optimizer' key, found by its opcodes
    assert abs((c.wall_time or 0) - time.time()) < 600


def test_safetensors_and_sharded_index_written_by_transformers(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "step_500", max_shard_size="20KB")
    safetensors_torch.save_file(_model().state_dict(), tmp_path / "weights_step_700.safetensors")
    shards = sorted((tmp_path / "step_500").glob("model-*.safetensors"))
    assert len(shards) > 2
    inv = inventory(tmp_path)
    got = {c.name: (c.kind, c.step, c.status) for c in inv.checkpoints}
    assert got == {
        "step_500/model.safetensors.index.json": ("safetensors-sharded", 500, "ok"),
        "weights_step_700.safetensors": ("safetensors", 700, "ok"),
    }
    sharded = inv.checkpoints[0]
    assert sharded.size >= sum(s.stat().st_size for s in shards)

    # damage: one shard gone, one cut by 10 bytes, one with a byte of its header changed
    shards[0].unlink()
    shards[1].write_bytes(shards[1].read_bytes()[:-10])
    raw = bytearray(shards[2].read_bytes())
    at = raw.index(b'"data_offsets":[') + len(b'"data_offsets":[')
    raw[at] = ord("7") if raw[at] != ord("7") else ord("8")  # the first tensor moves
    shards[2].write_bytes(bytes(raw))
    c = _by_name(tmp_path)["step_500/model.safetensors.index.json"]
    by_file = {p.file: (p.status, p.message) for p in c.problems}  # type: ignore[attr-defined]
    assert by_file[shards[0].name][0] == "missing"
    assert by_file[shards[1].name][0] == "truncated"
    assert "header needs" in by_file[shards[1].name][1]
    assert by_file[shards[2].name][0] == "corrupt"
    assert c.status == "corrupt"  # type: ignore[attr-defined]


def test_torch_dcp_folder_checked_against_its_metadata(tmp_path: Path) -> None:
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    with pytest.warns(UserWarning):  # "assuming the intent is to save in a single process"
        dcp.save({"model": _model().state_dict()}, checkpoint_id=str(tmp_path / "step_40"))
    storage = next((tmp_path / "step_40").glob("*.distcp"))
    assert _by_name(tmp_path)["step_40"].status == "ok"  # type: ignore[attr-defined]
    storage.write_bytes(storage.read_bytes()[:100])
    c = _by_name(tmp_path)["step_40"]
    assert [(p.status, p.file) for p in c.problems] == [("truncated", storage.name)]  # type: ignore[attr-defined]
    storage.unlink()
    c = _by_name(tmp_path)["step_40"]
    assert [(p.status, p.file) for p in c.problems] == [("missing", storage.name)]  # type: ignore[attr-defined]


# --- damage, found and named ------------------------------------------------------------


def _three_saves(tmp_path: Path) -> list[Path]:
    paths = []
    for step in (100, 200, 300):
        path = tmp_path / f"ckpt_step_{step}.pt"
        torch.save(_train_state(), path)
        paths.append(path)
    return paths


def test_truncated_and_bit_flipped_torch_checkpoints_named(tmp_path: Path) -> None:
    p100, p200, p300 = _three_saves(tmp_path)
    p300.write_bytes(p300.read_bytes()[: p300.stat().st_size // 2])
    _flip(p200, _member_data_offset(p200, "data/0") + 5)
    inv = inventory(tmp_path)
    status = {c.step: c.status for c in inv.checkpoints}
    assert status == {100: "ok", 200: "corrupt", 300: "truncated"}
    bad = inv.by_path(str(p200))
    assert bad is not None and "data/0" in bad.problems[0].message
    assert "CRC" in bad.problems[0].message
    found = {f.step_start: f for f in findings(inv) if f.code == "CKPT001"}
    assert set(found) == {200, 300}
    # both name the newest intact checkpoint before them
    assert "go back to ckpt_step_100.pt (step 100, saved" in found[300].message
    assert found[300].evidence["restart_from"] == str(p100)


def test_a_flipped_byte_in_the_pickle_member_is_named_once(tmp_path: Path) -> None:
    p100, _, _ = _three_saves(tmp_path)
    _flip(p100, _member_data_offset(p100, "data.pkl") + 7)
    c = inventory(tmp_path).by_path(str(p100))
    assert c is not None and c.status == "corrupt"
    assert len(c.problems) == 1 and "data.pkl" in c.problems[0].message


def test_latest_pointer_to_nowhere_and_to_a_broken_checkpoint(tmp_path: Path) -> None:
    for step in (10, 20):
        folder = tmp_path / f"global_step{step}"
        folder.mkdir()
        torch.save(_train_state(), folder / "mp_rank_00_model_states.pt")
        torch.save(_train_state(), folder / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (tmp_path / "latest").write_text("global_step30")
    inv, found, _ = audit(tmp_path, with_run=False)
    assert [c.optimizer for c in inv.checkpoints] == [True, True]
    (ptr,) = [f for f in found if f.code == "CKPT002"]
    assert "global_step30" in ptr.message and "does not exist" in ptr.message
    assert "go back to global_step20" in ptr.message
    # now the pointer names a checkpoint that exists but is cut short
    (tmp_path / "latest").write_text("global_step20\n")
    state = tmp_path / "global_step20" / "mp_rank_00_model_states.pt"
    state.write_bytes(state.read_bytes()[:200])
    _, found, _ = audit(tmp_path, with_run=False)
    (ptr,) = [f for f in found if f.code == "CKPT002"]
    assert "which is truncated" in ptr.message and "go back to global_step10" in ptr.message


def test_megatron_pointer_and_iteration_folders(tmp_path: Path) -> None:
    for it in (1000, 2000):
        folder = tmp_path / f"iter_{it:07d}" / "mp_rank_00"
        folder.mkdir(parents=True)
        torch.save(_train_state(), folder / "model_optim_rng.pt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2000")
    inv, found, _ = audit(tmp_path, with_run=False)
    assert [(c.kind, c.step, c.status) for c in inv.checkpoints] == [
        ("megatron", 1000, "ok"),
        ("megatron", 2000, "ok"),
    ]
    assert inv.pointers[0].resolved == str(tmp_path / "iter_0002000")
    assert not found
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3000")
    _, found, _ = audit(tmp_path, with_run=False)
    assert [f.code for f in found] == ["CKPT002"]


def test_cadence_gap_and_size_drift(tmp_path: Path) -> None:
    for step in (100, 200, 300, 400, 700, 800):
        # the save at 400 lost its optimizer state: a third of the others' size
        torch.save(_train_state(with_optimizer=step != 400), tmp_path / f"ckpt_step_{step}.pt")
    found = findings(inventory(tmp_path))
    assert [(f.code, f.step_start) for f in found] == [("CKPT005", 400), ("CKPT003", 500)]
    gap = found[1]
    assert gap.evidence["missing"] == 2 and gap.evidence["interval"] == 100
    assert found[0].evidence["ratio"] < 0.5


def test_first_gap_is_not_a_cadence_gap(tmp_path: Path) -> None:
    """HF's save_total_limit keeps the best checkpoint and the latest few: a gap by design."""
    for step in (300, 800, 900, 1000):
        torch.save(_train_state(), tmp_path / f"ckpt_step_{step}.pt")
    assert [f.code for f in findings(inventory(tmp_path))] == []


def test_run_beside_checkpoints_gives_recency_and_save_stalls(tmp_path: Path) -> None:
    """A JSONL run (0.1 s a step) pausing 3 s after each save at 20, 40, 60, 80."""
    t, lines = 1.7e9, []
    for step in range(100):
        lines.append(json.dumps({"step": step, "loss": 1.0 / (step + 1), "time": t}))
        t += 0.1 + (3.0 if step in (20, 40, 60, 80) else 0.0)
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    for step in (20, 40, 60):
        torch.save(_train_state(), tmp_path / f"ckpt_step_{step}.pt")
    _, found, run = audit(tmp_path / "metrics.jsonl")
    assert run is not None and run.last_step == 99
    codes = {f.code: f for f in found}
    stall = codes["CKPT006"]
    # 3 saves x 3 s in a 21.9 s run
    assert stall.evidence["seconds_saving"] == pytest.approx(9.0, abs=0.01)
    assert stall.evidence["share_of_wall_time"] == pytest.approx(9.0 / 21.9, abs=0.01)
    assert stall.severity.value == "warning"
    recent = codes["CKPT004"]
    assert recent.evidence == {"last_step": 99, "newest_intact_step": 60}
    # the same, with the checkpoints kept apart from the log
    store = tmp_path / "store"
    store.mkdir()
    for p in tmp_path.glob("*.pt"):
        p.rename(store / p.name)
    _, apart, _ = audit(store, run_path=tmp_path / "metrics.jsonl")
    assert {f.code for f in apart} == {"CKPT004", "CKPT006"}
    assert main(["checkpoints", str(store), "--run", str(tmp_path / "nope.jsonl")]) == 2
    for p in store.glob("*.pt"):
        p.rename(tmp_path / p.name)
    # a save at 80 closes the gap at the end
    torch.save(_train_state(), tmp_path / "ckpt_step_80.pt")
    _, found, _ = audit(tmp_path / "metrics.jsonl")
    assert "CKPT004" not in {f.code for f in found}


def test_a_run_without_checkpoints_beside_it_is_not_judged(tmp_path: Path) -> None:
    lines = [json.dumps({"step": s, "loss": 1.0, "time": 1.7e9 + s}) for s in range(50)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    inv, found, run = audit(tmp_path / "metrics.jsonl")
    assert inv.checkpoints == [] and found == [] and run is None
    assert findings(inv, run=RunSteps(list(range(50)), [None] * 50)) == []


def test_hf_layout_found_from_the_log_folder_and_siblings_left_alone(tmp_path: Path) -> None:
    """HF logs into output_dir/runs/<date>/ and saves output_dir/checkpoint-N/: found two
    levels up; another run's checkpoints in a sibling subfolder are not this run's."""
    logs = tmp_path / "out" / "runs" / "Dec01"
    logs.mkdir(parents=True)
    (logs / "metrics.jsonl").write_text(json.dumps({"step": 5, "loss": 1.0}) + "\n")
    ckpt = tmp_path / "out" / "checkpoint-5"
    ckpt.mkdir()
    safetensors_torch.save_file(_model().state_dict(), ckpt / "model.safetensors")
    other = tmp_path / "out" / "other_run"
    other.mkdir()
    torch.save(_train_state(), other / "ckpt_step_3.pt")
    inv = inventory(logs / "metrics.jsonl")
    assert inv.root == str(tmp_path / "out")
    assert [(c.name, c.optimizer) for c in inv.checkpoints] == [("checkpoint-5", False)]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    safetensors_torch.save_file(_model().state_dict(), folder / "model.safetensors")
    (folder / "model.safetensors").chmod(0)
    (c,) = inventory(tmp_path).checkpoints
    assert [(p.status, p.file) for p in c.problems] == [("unreadable", "model.safetensors")]


def test_a_read_the_machine_refuses_is_a_problem_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the test above, where root reads everything: the refusal is simulated."""
    from trainlens.checkpoints import _audit

    def refuse(path: str, rel: str) -> None:
        raise PermissionError(13, "Permission denied", path)

    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    safetensors_torch.save_file(_model().state_dict(), folder / "model.safetensors")
    monkeypatch.setattr(_audit, "audit_safetensors", refuse)
    (c,) = inventory(tmp_path).checkpoints
    assert [(p.status, p.file) for p in c.problems] == [("unreadable", "model.safetensors")]
    assert "Permission denied" in c.problems[0].message


def test_params_move_the_thresholds() -> None:
    steps = RunSteps(steps=[0, 1, 2, 3], wall_times=[0.0, 1.0, 2.0, 3.0])
    assert steps.last_step == 3
    assert Params().recent_frac == 0.2 and Params(recent_frac=0.5).recent_frac == 0.5


# --- nothing in a checkpoint runs -------------------------------------------------------


class _Payload:
    """A pickle that writes a marker file when loaded (what a poisoned checkpoint does)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def test_code_running_pickle_in_a_checkpoint_is_reported_and_never_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the payload is real: loading a copy does write its marker
    proof = tmp_path / "proof"
    pickle.loads(pickle.dumps(_Payload(proof)))  # the test's own bytes
    assert proof.read_text() == "ran"

    marker = tmp_path / "marker"
    folder = tmp_path / "checkpoint-10"
    folder.mkdir()
    safetensors_torch.save_file(_model().state_dict(), folder / "model.safetensors")
    torch.save(_train_state()["optimizer"], folder / "optimizer.pt")
    with (folder / "rng_state.pth").open("wb") as fh:
        pickle.dump({"python": _Payload(marker)}, fh)  # a raw pickle
    torch.save({"step": 10, "extra": _Payload(marker)}, folder / "scheduler.pt")  # a torch zip

    inv, found, _ = audit(tmp_path, with_run=False)
    (c,) = inv.checkpoints
    assert c.status == "unsafe" and c.optimizer is True
    unsafe = {p.file for p in c.problems if p.status == "unsafe"}
    assert unsafe == {"rng_state.pth", "scheduler.pt:scheduler/data.pkl"}
    assert all("builtins.exec" in p.message for p in c.problems), c.problems
    assert [f.code for f in found] == ["CKPT007"]
    assert main(["checkpoints", str(tmp_path)]) == 1
    assert "CKPT007" in capsys.readouterr().out
    assert not marker.exists()


class _Calls:
    def __init__(self, fn: object, *args: object) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (self.fn, self.args)


@pytest.mark.parametrize(
    ("fn", "named"),
    [
        (os.system, "posix.system"),
        (torch.hub.load, "torch.hub.load"),
        (eval, "builtins.eval"),
    ],
)
def test_each_kind_of_code_running_call_is_named(tmp_path: Path, fn: object, named: str) -> None:
    torch.save({"x": _Calls(fn, "true")}, tmp_path / "ckpt_step_1.pt")
    (c,) = inventory(tmp_path).checkpoints
    assert c.status == "unsafe" and named in c.problems[0].message


def test_no_unpickling_anywhere_in_the_checkpoint_code() -> None:
    """The audit's promise, checked on its source: no pickle/torch import, no load call."""
    sources = [*sorted((PKG / "checkpoints").glob("*.py")), PKG / "cli" / "checkpoints.py"]
    assert len(sources) > 5
    for path in sources:
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                names = []
            for name in names:
                assert name.split(".")[0] not in {"pickle", "_pickle", "torch", "dill", "joblib"}, (
                    path.name,
                    name,
                )
            if isinstance(node, ast.Attribute) and node.attr in {"load", "loads", "Unpickler"}:
                # json.loads of a header or index is the only load there is
                assert isinstance(node.value, ast.Name) and node.value.id == "json", (
                    path.name,
                    ast.unparse(node),
                )


# --- bounded work on huge files ---------------------------------------------------------

_HUGE = 50 * 2**30


def _sparse_or_skip(path: Path, size: int) -> None:
    with path.open("r+b" if path.exists() else "wb") as fh:
        fh.truncate(size)
    if path.stat().st_blocks * 512 > 2**30:
        path.unlink()
        pytest.skip("the filesystem does not keep sparse files sparse")


def _audited_in_bounds(path: Path) -> list[object]:
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    inv = inventory(path)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert seconds < 5, seconds
    grown_mib = (after.ru_maxrss - before.ru_maxrss) / 1024  # KiB on Linux
    assert grown_mib < 64, grown_mib
    return list(inv.checkpoints)


def test_50_gb_sparse_torch_file_is_audited_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "ckpt_step_900.pt"
    torch.save(_train_state(), path)
    _sparse_or_skip(path, _HUGE)  # the archive, then 50 GB of zeros: its end record is gone
    (c,) = _audited_in_bounds(tmp_path)
    assert c.size == _HUGE and c.status == "truncated"  # type: ignore[attr-defined]


def test_50_gb_sparse_safetensors_is_audited_without_reading_it(tmp_path: Path) -> None:
    """A header declaring one 50 GB tensor, and a file exactly that long: intact, and the
    audit reads the header only."""
    n = _HUGE // 2  # BF16 elements
    header = json.dumps({"w": {"dtype": "BF16", "shape": [n], "data_offsets": [0, 2 * n]}})
    blob = header.encode()
    path = tmp_path / "model_step_900.safetensors"
    path.write_bytes(struct.pack("<Q", len(blob)) + blob)
    _sparse_or_skip(path, 8 + len(blob) + 2 * n)
    (c,) = _audited_in_bounds(tmp_path)
    assert c.status == "ok"  # type: ignore[attr-defined]
    with path.open("r+b") as fh:
        fh.truncate(8 + len(blob) + 2 * n - 1)
    (c,) = _audited_in_bounds(tmp_path)
    assert c.status == "truncated"  # type: ignore[attr-defined]


def test_crc_budget_leaves_members_unread_with_a_note(tmp_path: Path) -> None:
    (p100, _, _) = _three_saves(tmp_path)
    _flip(p100, _member_data_offset(p100, "data/0") + 5)
    inv = inventory(tmp_path, crc_budget=0)
    c = inv.by_path(str(p100))
    assert c is not None and c.status == "ok"  # not read: bit rot goes unseen ...
    assert any("CRC of" in n and "not checked" in n for n in c.notes)  # ... and says so


# --- the command ------------------------------------------------------------------------


def test_cli_exit_codes_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, p300 = _three_saves(tmp_path)
    assert main(["checkpoints", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "checkpoints under" in out and out.count(" ok ") == 3
    p300.write_bytes(p300.read_bytes()[:-100])
    assert main(["checkpoints", str(tmp_path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [c["integrity"] for c in doc["checkpoints"]] == ["ok", "ok", "truncated"]
    assert [f["code"] for f in doc["findings"]] == ["CKPT001"]
    assert doc["findings"][0]["evidence"]["restart_from"] == str(tmp_path / "ckpt_step_200.pt")
    assert main(["checkpoints", str(tmp_path), "--fail-on", "none"]) == 0
    capsys.readouterr()
    assert main(["checkpoints", str(tmp_path / "nope")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["checkpoints", str(tmp_path), "--fail-on", "bad"]) == 2


def test_not_a_checkpoint_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "ckpt_step_5.pt").write_bytes(b"hello, not a checkpoint")
    (tmp_path / "ckpt_step_6.pt").write_bytes(b"")
    got = {c.step: c.problems[0] for c in inventory(tmp_path).checkpoints}
    assert {s: p.status for s, p in got.items()} == {5: "corrupt", 6: "truncated"}
    assert "not a zip archive" in got[5].message and "empty" in got[6].message


def test_legacy_torch_format_is_scanned_through_all_its_pickles(tmp_path: Path) -> None:
    """torch's pre-1.6 format: five pickles, then raw tensor bytes. The object is the
    fourth pickle: a payload there is found, and intact ones are intact."""
    marker = tmp_path / "marker"
    torch.save(_train_state(), tmp_path / "a_step_1.pt", _use_new_zipfile_serialization=False)
    torch.save(
        {"x": _Payload(marker), "w": torch.ones(3)},
        tmp_path / "b_step_2.pt",
        _use_new_zipfile_serialization=False,
    )
    got = {c.step: c for c in inventory(tmp_path).checkpoints}
    assert got[1].status == "ok" and got[1].optimizer is True
    assert got[2].status == "unsafe" and "builtins.exec" in got[2].problems[0].message
    assert not marker.exists()
