"""Hostile pickles: each runs code when loaded (a marker file proves it, in a child
process), and the audit must call it CKPT007 without running it; real checkpoints from
real writers must stay clean; memo and opcode bombs must end fast on one budget per
checkpoint (CKPT011) and leave the next checkpoint audited."""

from __future__ import annotations

import argparse
import functools
import io
import pathlib
import pickle
import resource
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from trainlens.checkpoints import PickleBudget, audit, inventory
from trainlens.checkpoints._allowlist import ALLOWED
from trainlens.cli import main

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

# --- opcodes, spelled out (what a hand-made payload is made of) -------------------------

P2, P4, STOP, REDUCE, MARK, TUPLE = b"\x80\x02", b"\x80\x04", b".", b"R", b"(", b"t"


def glob(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def text(s: str) -> bytes:
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def tup(*items: bytes) -> bytes:
    return MARK + b"".join(items) + TUPLE


def call(fn: bytes, *args: bytes) -> bytes:
    return fn + tup(*args) + REDUCE


def _sh(marker: Path) -> str:
    return f"touch {marker}"


def _py(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('ran')"


def _os_system(m: Path) -> bytes:
    return P2 + call(glob("os", "system"), text(_sh(m))) + STOP


def _eval(m: Path) -> bytes:
    return P2 + call(glob("builtins", "eval"), text(_py(m))) + STOP


def _exec(m: Path) -> bytes:
    return P2 + call(glob("builtins", "exec"), text(_py(m))) + STOP


def _getattr(m: Path) -> bytes:  # getattr(open, "__call__")(marker, "w")
    bound = call(glob("builtins", "getattr"), glob("builtins", "open"), text("__call__"))
    return P2 + bound + tup(text(str(m)), text("w")) + REDUCE + STOP


def _import(m: Path) -> bytes:  # getattr(__import__("os"), "system")(cmd)
    os_mod = call(glob("builtins", "__import__"), text("os"))
    system = call(glob("builtins", "getattr"), os_mod, text("system"))
    return P2 + system + tup(text(_sh(m))) + REDUCE + STOP


def _subprocess(m: Path) -> bytes:
    return P2 + call(glob("subprocess", "getoutput"), text(_sh(m))) + STOP


def _inst(m: Path) -> bytes:  # protocol 0: MARK, the argument, INST module name
    return b"(V" + _sh(m).encode() + b"\nios\nsystem\n" + STOP


def _obj(m: Path) -> bytes:  # MARK, the class, its arguments, OBJ
    return P2 + MARK + glob("os", "system") + text(_sh(m)) + b"o" + STOP


def _resolve_name(m: Path) -> bytes:
    system = call(glob("pkgutil", "resolve_name"), text("os:system"))
    return P2 + system + tup(text(_sh(m))) + REDUCE + STOP


def _rot13(encode: bytes, direction: str) -> Callable[[Path], bytes]:
    """STACK_GLOBAL on strings a call computes: rot13("bf") is "os", of "flfgrz" "system"."""

    def payload(m: Path) -> bytes:
        mod = call(encode, text("bf"), text(direction))
        name = call(encode, text("flfgrz"), text(direction))
        return P4 + mod + name + b"\x93" + tup(text(_sh(m))) + REDUCE + STOP

    return payload


def _pipepager(m: Path) -> bytes:
    return P2 + call(glob("pydoc", "pipepager"), text("x"), text(_sh(m))) + STOP


def _cprofile(m: Path) -> bytes:
    return P2 + call(glob("cProfile", "run"), text(_py(m))) + STOP


def _methodcaller(m: Path) -> bytes:  # methodcaller("system", cmd)(importlib.import_module("os"))
    caller = call(glob("_operator", "methodcaller"), text("system"), text(_sh(m)))
    os_mod = call(glob("importlib", "import_module"), text("os"))
    return P2 + caller + tup(os_mod) + REDUCE + STOP


def _setstate(m: Path) -> bytes:
    """BUILD puts exec in a Namespace's __dict__ as __setstate__; a second BUILD calls it."""
    ns = glob("argparse", "Namespace") + b")\x81"  # NEWOBJ: no __init__
    state = b"}" + text("__setstate__") + glob("builtins", "exec") + b"s"
    return P2 + ns + state + b"b" + text(_py(m)) + b"b" + STOP


def _ext(m: Path) -> bytes:  # EXT1 240: whatever the loader registered (copyreg.add_extension)
    return P2 + b"\x82\xf0" + tup(text(_sh(m))) + REDUCE + STOP


#: (payload, what the audit must name, code the child runs before loading it)
PAYLOADS: dict[str, tuple[Callable[[Path], bytes], str, str]] = {
    "os.system": (_os_system, "os.system", ""),
    "builtins.eval": (_eval, "builtins.eval", ""),
    "builtins.exec": (_exec, "builtins.exec", ""),
    "builtins.getattr": (_getattr, "builtins.getattr", ""),
    "builtins.__import__": (_import, "builtins.__import__", ""),
    "subprocess": (_subprocess, "subprocess.getoutput", ""),
    "INST": (_inst, "os.system", ""),
    "OBJ": (_obj, "os.system", ""),
    "pkgutil.resolve_name": (_resolve_name, "pkgutil.resolve_name", ""),
    "rot13 codecs.decode": (_rot13(glob("codecs", "decode"), "rot13"), "STACK_GLOBAL", ""),
    # _codecs.encode is on the list (protocol 2's bytes): only its latin1 use is
    "rot13 _codecs.encode": (_rot13(glob("_codecs", "encode"), "rot13"), "STACK_GLOBAL", ""),
    "pydoc.pipepager": (_pipepager, "pydoc.pipepager", ""),
    "cProfile.run": (_cprofile, "cProfile.run", ""),
    "_operator.methodcaller": (_methodcaller, "_operator.methodcaller", ""),
    "BUILD __setstate__": (_setstate, "'__setstate__' through BUILD", ""),
    "EXT1": (
        _ext,
        "extension code 240",
        "import copyreg; copyreg.add_extension('posix', 'system', 240)",
    ),
}


def _load_in_child(blob: Path, prelude: str) -> None:
    code = f"{prelude}\nimport pickle, sys\npickle.load(open(sys.argv[1], 'rb'))"
    subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, timeout=60)


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_each_payload_really_runs_code_when_loaded(tmp_path: Path, name: str) -> None:
    """The payloads are real: a plain pickle.load (in a child process) writes the marker."""
    make, _, prelude = PAYLOADS[name]
    proof = tmp_path / "proof"
    (tmp_path / "p.pkl").write_bytes(make(proof))
    _load_in_child(tmp_path / "p.pkl", prelude)
    assert proof.exists(), name


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_each_payload_is_ckpt007_and_never_run(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make, named, _ = PAYLOADS[name]
    marker = tmp_path / "marker"
    (tmp_path / "ckpt_step_7.pt").write_bytes(make(marker))
    inv, found, _ = audit(tmp_path, with_run=False)
    (c,) = inv.checkpoints
    assert c.status == "unsafe", c.problems
    assert named in c.problems[0].message, c.problems[0].message
    assert [f.code for f in found] == ["CKPT007"]
    assert main(["checkpoints", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "CKPT007" in out and named in out
    assert not marker.exists()


def _torch_zip_with(path: Path, pickle_bytes: bytes) -> None:
    """A real torch.save archive whose data.pkl is replaced (every other member kept)."""
    torch.save({"w": torch.ones(3)}, path)
    with zipfile.ZipFile(path) as zf:
        members = [(i, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(path, "w") as zf:
        for info, data in members:
            zf.writestr(info, pickle_bytes if info.filename.endswith("/data.pkl") else data)


def test_a_pickle_nested_in_a_torch_zip_member_is_ckpt007(tmp_path: Path) -> None:
    """data.pkl of a torch .pt calls pickle.loads on bytes holding a second payload."""
    marker = tmp_path / "marker"
    inner = _os_system(marker)
    outer = P2 + call(glob("pickle", "loads"), b"C" + bytes([len(inner)]) + inner) + STOP
    _torch_zip_with(tmp_path / "ckpt_step_3.pt", outer)
    (c,) = inventory(tmp_path).checkpoints
    assert c.status == "unsafe"
    (p,) = c.problems
    assert p.file == "ckpt_step_3.pt:ckpt_step_3/data.pkl" and "pickle.loads" in p.message
    assert not marker.exists()


def test_an_allowed_callable_returning_a_callable_is_not_called(tmp_path: Path) -> None:
    """REDUCE on the result of a call (here collections.OrderedDict(), harmless, but the
    walk cannot know what a call returns) is refused by position, not by name."""
    blob = P2 + call(glob("collections", "OrderedDict")) + tup() + REDUCE + STOP
    (tmp_path / "ckpt_step_1.pt").write_bytes(blob)
    (c,) = inventory(tmp_path).checkpoints
    assert c.status == "unsafe" and "call a value computed at load time" in c.problems[0].message


def test_a_class_allowed_only_without_init_is_refused_when_called(tmp_path: Path) -> None:
    blob = P2 + call(glob("transformers.training_args", "TrainingArguments"), text("/x")) + STOP
    (tmp_path / "ckpt_step_1.pt").write_bytes(blob)
    (c,) = inventory(tmp_path).checkpoints
    assert c.status == "unsafe" and "without its __init__" in c.problems[0].message


# --- real checkpoints stay clean -------------------------------------------------------


@functools.cache  # one optimizer step costs ~6 s the first time (torch.optim's imports)
def _real_values() -> dict[str, object]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "numpy": {
            "array": np.arange(6.0).reshape(2, 3),
            "f32": np.float32(2.5),
            "i64": np.int64(3),
            "rng": np.random.get_state(),
            "objects": np.array([1, "a"], dtype=object),
        },
        "torch": {
            "bf16": torch.ones(2, dtype=torch.bfloat16),
            "param": torch.nn.Parameter(torch.ones(2)),
            "device": torch.device("cpu"),
            "dtype": torch.float16,
            "size": torch.Size([2, 3]),
            "version": torch.__version__,
        },
        "python": {
            "set": {1, 2},
            "frozenset": frozenset([3]),
            "slice": slice(1, 2),
            "complex": 1j,
            "bytearray": bytearray(b"x"),
            "bytes": b"xy",
            "empty": b"",
            "range": range(3),
            "namespace": argparse.Namespace(lr=0.1),
            "path": pathlib.PurePosixPath("/data/run"),
        },
    }


def test_torch_save_of_real_state_is_clean(tmp_path: Path) -> None:
    values = _real_values()
    torch.save(values["model"], tmp_path / "model_step_1.pt")
    torch.save(values["optimizer"], tmp_path / "optim_step_2.pt")
    torch.save(values, tmp_path / "all_step_3.pt")
    torch.save(values, tmp_path / "legacy_step_4.pt", _use_new_zipfile_serialization=False)
    got = inventory(tmp_path).checkpoints
    assert [(c.step, c.status) for c in got] == [(s, "ok") for s in (1, 2, 3, 4)], [
        c.problems for c in got
    ]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_of_numpy_and_python_values_is_clean_in_every_protocol(
    tmp_path: Path, protocol: int
) -> None:
    values = _real_values()
    blob = pickle.dumps({"numpy": values["numpy"], "python": values["python"]}, protocol)
    (tmp_path / "state_step_5.pkl").write_bytes(blob)
    (c,) = inventory(tmp_path).checkpoints
    assert c.status == "ok", c.problems


def test_the_allow_list_holds_everything_torch_weights_only_allows() -> None:
    """The list is torch's and more: a name torch adds (a new rebuild function) shows here."""
    from torch._weights_only_unpickler import _get_allowed_globals

    ours = {f"{m}.{n}" for m, names in ALLOWED.items() for n in names}
    missing = sorted(set(_get_allowed_globals()) - ours)
    assert not missing, missing


@pytest.mark.slow
def test_hf_trainer_and_lightning_checkpoints_are_clean(tmp_path: Path) -> None:
    """rng_state.pth, optimizer.pt, scheduler.pt, training_args.bin (HF Trainer) and a
    Lightning .ckpt with a Namespace and a Path in its hyper-parameters."""
    transformers = pytest.importorskip("transformers")
    L = pytest.importorskip("lightning")
    cfg = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=16)
    ids = torch.randint(0, 64, (8, 16), generator=torch.Generator().manual_seed(0))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        max_steps=2,
        save_steps=2,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    data = [{"input_ids": x, "labels": x} for x in ids]
    transformers.Trainer(
        model=transformers.GPT2LMHeadModel(cfg), args=args, train_dataset=data
    ).train()

    class Tiny(L.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self, cli: argparse.Namespace, root: pathlib.Path) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: list[object], _: int) -> object:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> object:
            return torch.optim.Adam(self.parameters())

    x = torch.randn(8, 4)
    trainer = L.Trainer(
        max_steps=2,
        default_root_dir=str(tmp_path / "pl"),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=4)
    trainer.fit(Tiny(argparse.Namespace(lr=0.1), pathlib.Path("/data")), loader)

    hf = inventory(tmp_path / "hf").checkpoints
    assert [(c.kind, c.status) for c in hf] == [("hf-trainer", "ok")], [c.problems for c in hf]
    pl = inventory(tmp_path / "pl").checkpoints
    assert [(c.kind, c.status) for c in pl] == [("lightning", "ok")], [c.problems for c in pl]


# --- budget bombs ----------------------------------------------------------------------

_MIB = 2**20


def memo_bomb() -> bytes:
    """64 MiB of MEMOIZE: a load keeps 67 million memo entries (gigabytes)."""
    return P4 + b"]" + b"\x94" * (64 * _MIB) + STOP


def opcode_bomb(mib: int = 64) -> bytes:
    """An empty list fetched and dropped 22 million times (64 MiB): opcodes, no memo."""
    return P4 + b"]\x94" + b"h\x000" * (mib * _MIB // 3) + STOP


def small_opcode_bomb() -> bytes:
    """8 MiB, 2.8 million opcodes: under the budget alone, 16 of them far over it."""
    return opcode_bomb(8)


def _deflated_torch_zip(path: Path, members: list[bytes]) -> None:
    """A torch-shaped archive whose pickles are deflated: 64 MiB in ~300 KB."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr(f"{path.stem}/version", "3\n")
        for k, blob in enumerate(members):
            name = "data.pkl" if k == 0 else f"extra{k}.pkl"
            zf.writestr(f"{path.stem}/{name}", blob)


def _timed(fn: Callable[[], object]) -> tuple[object, float, float]:
    """``fn()``, the CPU seconds it took (wall time on a machine shared by 8 test runs is
    3-4x that), and how much it raised the process's peak RSS (MiB)."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    got = fn()
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return got, cpu, (after.ru_maxrss - before.ru_maxrss) / 1024


@pytest.mark.parametrize(
    ("kind", "make", "count"),
    [("memo", memo_bomb, 1), ("opcodes", opcode_bomb, 1), ("zip of 16", small_opcode_bomb, 16)],
)
def test_bombs_end_fast_on_one_budget_and_the_next_checkpoint_is_audited(
    tmp_path: Path,
    kind: str,
    make: Callable[[], bytes],
    count: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bomb = make()
    _deflated_torch_zip(tmp_path / "ckpt_step_1.pt", [bomb] * count)
    del bomb
    assert (tmp_path / "ckpt_step_1.pt").stat().st_size < 2 * _MIB
    torch.save(_real_values()["model"], tmp_path / "ckpt_step_2.pt")
    (tmp_path / "ckpt_step_3.pt").write_bytes(_exec(tmp_path / "marker"))

    (inv, found, _), seconds, grown_mib = _timed(lambda: audit(tmp_path, with_run=False))
    assert seconds < 5, seconds  # measured 0.5-1.7 s of CPU
    assert grown_mib < 300, grown_mib  # the member itself (64 MiB) and the memo slots
    by_step = {c.step: c for c in inv.checkpoints}
    assert by_step[1].status == "over-budget", by_step[1].problems
    (p,) = by_step[1].problems
    assert p.file.startswith("ckpt_step_1.pt:ckpt_step_1/") and "audit stopped at" in p.message
    assert by_step[2].status == "ok" and by_step[3].status == "unsafe"
    codes = {f.code for f in found}  # CKPT005 too: three files of three sizes
    assert {"CKPT007", "CKPT011"} <= codes and "CKPT001" not in codes
    assert main(["checkpoints", str(tmp_path)]) == 1
    assert "CKPT011" in capsys.readouterr().out


def test_the_budget_is_one_for_all_members_and_can_be_raised(tmp_path: Path) -> None:
    """16 members of 100,000 opcodes each: each under a budget of 1 million, together
    over it; a budget of 2 million reads them all."""
    member = P2 + b"]q\x00" + b"h\x000" * 50_000 + STOP
    _deflated_torch_zip(tmp_path / "ckpt_step_1.pt", [member] * 16)
    (c,) = inventory(tmp_path, pickle_budget=PickleBudget(opcodes=1_000_000)).checkpoints
    assert c.status == "over-budget" and "1,000,000 opcodes" in c.problems[0].message
    assert c.problems[0].file == "ckpt_step_1.pt:ckpt_step_1/extra9.pkl"  # the 10th
    (c,) = inventory(tmp_path, pickle_budget=PickleBudget(opcodes=2_000_000)).checkpoints
    assert c.status == "ok", c.problems


def test_a_raw_pickle_is_walked_in_place(tmp_path: Path) -> None:
    """A 1 GiB bytes payload inside a raw pickle (a sparse file) is skipped, not read."""
    size = 2**30
    path = tmp_path / "state_step_1.pkl"
    with path.open("wb") as fh:
        fh.write(P4 + b"\x8e" + struct.pack("<Q", size))
        fh.seek(size, 1)
        fh.write(STOP)
    budget = PickleBudget(bytes=2**40)
    (c,), seconds, grown_mib = _timed(lambda: inventory(tmp_path, pickle_budget=budget).checkpoints)
    assert c.status == "ok", c.problems  # type: ignore[attr-defined]
    assert seconds < 2 and grown_mib < 64, (seconds, grown_mib)


def test_payload_bytes_are_from_this_module() -> None:
    """Sanity: the hand-written opcodes parse as pickles (pickletools, no loading)."""
    import pickletools

    for name, (make, _, _) in PAYLOADS.items():
        ops = [op.name for op, _, _ in pickletools.genops(io.BytesIO(make(Path("/m"))))]
        assert ops[-1] == "STOP", name
