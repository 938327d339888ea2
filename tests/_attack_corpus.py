"""A held-out attack corpus for issue 23, generated into a temporary folder (no payload is
committed): pickles, paths, names and records built with techniques the
``tests/test_hostile_*.py`` suites do not use, each with what the CLI must do with it.

Each builder writes its files under ``root`` and returns an :class:`Attack`: the CLI
commands to run on it and what a clean answer is. The runner (``test_attack_corpus.py``)
checks every answer the same way: exit 0, 1 or 2, no traceback, no signal, no hang, no
marker file (code ran), no outside secret in the output, every XML file parses, no raw
control character in text output, and, where given, the verdict and the values kept.

Run as a script (``python tests/_attack_corpus.py --serve``) it is the runner's fork
server: it imports the CLI once, then forks one child per command, so a command is a real
process (a signal or a hang is seen as such) that costs milliseconds, not an interpreter
start (2-3 s on a loaded box).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import select
import signal
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SECRET = "TOP-SECRET-7f3a9c"


@dataclass
class Attack:
    commands: list[list[str]]
    marker: Path | None = None  # created only if input code ran
    unsafe: bool | None = None  # True: CKPT007 expected; False: must not be called unsafe
    xml: list[Path] = field(default_factory=list)  # files that must parse as XML
    outputs: list[Path] = field(default_factory=list)  # text files checked like stdout
    values: tuple[Path, int] | None = None  # a converted frame and its expected row count
    note: str | None = None  # a word the output must hold (the line of a bad record)


# --- pickle opcodes, spelled out -------------------------------------------------------


def _g(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _u(s: str) -> bytes:
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _call(fn: bytes, *args: bytes) -> bytes:
    return fn + b"(" + b"".join(args) + b"tR"


def _touch(marker: Path) -> str:
    return f"touch {marker}"


def _ckpt(root: Path, blob: bytes, name: str = "ckpt_step_7.pt") -> Path:
    d = root / "ckpts"
    d.mkdir(exist_ok=True)
    (d / name).write_bytes(blob)
    return d


def _check(d: Path) -> list[list[str]]:
    return [["checkpoints", str(d)], ["checkpoints", str(d), "--json"]]


def _pickle_attack(root: Path, blob: bytes, marker: Path, unsafe: bool | None = True) -> Attack:
    return Attack(_check(_ckpt(root, blob)), marker=marker, unsafe=unsafe)


def p0_inst_unicode_args(root: Path) -> Attack:
    """Protocol 0 text only: INST with a UNICODE (raw-unicode-escape) argument."""
    m = root / "marker"
    cmd = _touch(m).replace(" ", "\\u0020")
    return _pickle_attack(root, b"(V" + cmd.encode() + b"\nios\nsystem\n.", m)


def p0_escaped_dunder_key(root: Path) -> Attack:
    """Protocol 0 STRING ``'__setstate\\x5f_'`` is ``__setstate__`` once pickle decodes
    its escapes: BUILD sets it on an OrderedDict, a second BUILD calls it."""
    m = root / "marker"
    blob = (
        b"ccollections\nOrderedDict\n)R"
        + b"(S'__setstate\\x5f_'\nc_codecs\nencode\ndb"
        + b"S'x'\nb."
    )
    return _pickle_attack(root, blob, m)


def p1_escaped_dunder_slots(root: Path) -> Attack:
    """The same through BUILD's (dict, slots) form: setattr of an escaped dunder."""
    m = root / "marker"
    blob = b"ccollections\nOrderedDict\n)R" + b"(N(S'\\x5f_class__'\nccollections\nCounter\ndtb."
    return _pickle_attack(root, blob, m)


def reconstructor_disallowed_class(root: Path) -> Attack:
    m = root / "marker"
    blob = b"\x80\x02" + _call(
        _g("copyreg", "_reconstructor"), _g("subprocess", "Popen"), _g("builtins", "object"), b"N"
    )
    return _pickle_attack(root, blob + b".", m)


def rebuild_from_type_codec(root: Path) -> Attack:
    """``_rebuild_from_type_v2(func, type, args, state)`` calls ``func(*args)``: here
    ``_codecs.encode("x", "rot13")``, the codec check of a direct call passed by."""
    m = root / "marker"
    blob = b"\x80\x02" + _call(
        _g("torch._tensor", "_rebuild_from_type_v2"),
        _g("_codecs", "encode"),
        _g("torch", "Tensor"),
        b"(" + _u("x") + _u("rot13") + b"t",
        b"}",
    )
    return _pickle_attack(root, blob + b".", m)


def rebuild_from_type_nested(root: Path) -> Attack:
    """The same one level deeper: a rebuild that calls a rebuild that calls the codec."""
    m = root / "marker"
    inner = b"(" + _g("_codecs", "encode") + _g("torch", "Tensor")
    inner += b"(" + _u("x") + _u("rot13") + b"t}t"
    blob = b"\x80\x02" + _call(
        _g("torch._tensor", "_rebuild_from_type_v2"),
        _g("torch._tensor", "_rebuild_from_type_v2"),
        _g("torch", "Tensor"),
        inner,
        b"}",
    )
    return _pickle_attack(root, blob + b".", m)


def rebuild_tensor_not_storage(root: Path) -> Attack:
    """``_rebuild_tensor_v2`` given an OrderedDict for a storage: a load fails, nothing
    runs; the audit may say what it likes, without a crash."""
    m = root / "marker"
    od = _call(_g("collections", "OrderedDict"))
    blob = b"\x80\x02" + _call(
        _g("torch._utils", "_rebuild_tensor_v2"),
        od,
        b"K\x00",
        b"K\x01\x85",
        b"K\x01\x85",
        b"\x89",
        od,
    )
    return _pickle_attack(root, blob + b".", m, unsafe=None)


def build_on_a_class(root: Path) -> Attack:
    """BUILD whose target is a global (a class), not an object the pickle made: a load
    sets attributes on the class itself (``setattr(pathlib.PurePath, 'open', …)``)."""
    m = root / "marker"
    blob = b"\x80\x02" + _g("pathlib", "PurePosixPath")
    blob += b"N}" + _u("joinpath") + _g("collections", "Counter") + b"s\x86b."
    return _pickle_attack(root, blob, m)


def functools_partial(root: Path) -> Attack:
    m = root / "marker"
    part = _call(_g("functools", "partial"), _g("os", "system"), _u(_touch(m)))
    return _pickle_attack(root, b"\x80\x02" + part + b")R.", m)


def numpy_object_array(root: Path) -> Attack:
    """An object-dtype ndarray unpickles its elements: one is ``os.system(...)``."""
    m = root / "marker"
    arr = _call(
        _g("numpy.core.multiarray", "_reconstruct"),
        _g("numpy", "ndarray"),
        b"K\x00\x85",
        b"C\x01b",
    )
    dtype = _call(_g("numpy", "dtype"), _u("O8"), b"\x89", b"\x88")
    dtype += b"(K\x03" + _u("|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK?tb"
    state = b"(K\x01K\x01\x85" + dtype + b"\x89]" + _call(_g("os", "system"), _u(_touch(m)))
    blob = b"\x80\x02" + arr + state + b"atb."
    return _pickle_attack(root, blob, m)


def getattr_through_memo(root: Path) -> Attack:
    """``builtins.getattr`` stored in the memo by BINPUT, fetched by BINGET and called."""
    m = root / "marker"
    blob = b"\x80\x02" + _g("builtins", "getattr") + b"q\x050"  # stored, popped
    blob += b"h\x05(" + _call(_g("builtins", "__import__"), _u("os")) + _u("system") + b"tR"
    blob += b"(" + _u(_touch(m)) + b"tR."
    return _pickle_attack(root, blob, m)


def load_from_bytes(root: Path) -> Attack:
    """``torch.storage._load_from_bytes`` is a torch.load of the bytes it is given."""
    m = root / "marker"
    inner = b"\x80\x02" + _call(_g("os", "system"), _u(_touch(m))) + b"."
    blob = b"\x80\x02" + _call(
        _g("torch.storage", "_load_from_bytes"), b"C" + bytes([len(inner)]) + inner
    )
    return _pickle_attack(root, blob + b".", m)


class _Evil:
    cmd = ""

    def __reduce_ex__(self, protocol: object) -> tuple[Callable[[str], int], tuple[str]]:
        return (os.system, (self.cmd,))


def _reduce_ex(protocol: int) -> Callable[[Path], Attack]:
    def build(root: Path) -> Attack:
        m = root / "marker"
        evil = _Evil()
        evil.cmd = _touch(m)
        return _pickle_attack(root, pickle.dumps(evil, protocol=protocol), m)

    build.__name__ = f"reduce_ex_protocol_{protocol}"
    return build


def newobj_ex(root: Path) -> Attack:
    m = root / "marker"
    blob = (
        b"\x80\x04" + _g("subprocess", "Popen") + b"(" + _u("touch") + _u(str(m)) + b"l\x85}\x92."
    )
    return _pickle_attack(root, blob, m)


def frame_lies(root: Path) -> Attack:
    """A FRAME that claims more bytes than the file holds, around a disallowed call."""
    m = root / "marker"
    body = _call(_g("os", "system"), _u(_touch(m))) + b"."
    blob = b"\x80\x04\x95" + struct.pack("<Q", 1 << 40) + body
    return _pickle_attack(root, blob, m)


def missing_stop(root: Path) -> Attack:
    """No STOP: pickle runs the call, then fails at the end; a cut file is not a safe one."""
    m = root / "marker"
    return _pickle_attack(root, b"\x80\x02" + _call(_g("os", "system"), _u(_touch(m))), m)


def _torch_zip(path: Path, replace: dict[str, bytes]) -> None:
    import zipfile

    import torch

    torch.save({"w": torch.ones(3)}, path)
    with zipfile.ZipFile(path) as zf:
        members = [(i, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(path, "w") as zf:
        for info, data in members:
            tail = info.filename.split("/", 1)[1]
            zf.writestr(info, replace.get(tail, data))


def two_pickles_in_data_pkl(root: Path) -> Attack:
    """data.pkl holds a clean pickle, then a second one torch never reads."""
    import torch

    m = root / "marker"
    d = root / "ckpts"
    d.mkdir()
    import io as _io

    buf = _io.BytesIO()
    torch.save({"w": torch.ones(3)}, buf)
    import zipfile

    with zipfile.ZipFile(_io.BytesIO(buf.getvalue())) as zf:
        name = next(n for n in zf.namelist() if n.endswith("data.pkl"))
        clean = zf.read(name)
    evil = b"\x80\x02" + _call(_g("os", "system"), _u(_touch(m))) + b"."
    _torch_zip(d / "ckpt_step_7.pt", {"data.pkl": clean + evil})
    return Attack(_check(d), marker=m, unsafe=None)


def pickle_in_serialization_id(root: Path) -> Attack:
    """A pickle where torch keeps text (``.data/serialization_id``): never unpickled."""
    m = root / "marker"
    d = root / "ckpts"
    d.mkdir()
    evil = b"\x80\x02" + _call(_g("os", "system"), _u(_touch(m))) + b"."
    _torch_zip(d / "ckpt_step_7.pt", {".data/serialization_id": evil, "byteorder": evil})
    return Attack(_check(d), marker=m, unsafe=None)


_TORCH_MAGIC = 0x1950A86A20F9469CFC6C


def legacy_second_pickle_protocol0(root: Path) -> Attack:
    """torch's legacy (pre-zip) format: ``torch.load`` unpickles the magic number, then the
    protocol version. Here the second is protocol 0 (no PROTO byte) and calls os.system."""
    m = root / "marker"
    blob = pickle.dumps(_TORCH_MAGIC, protocol=2)
    blob += b"(S'" + _touch(m).encode() + b"'\nios\nsystem\n."
    return Attack(_check(_ckpt(root, blob)), marker=m, unsafe=True)


def legacy_real(root: Path) -> Attack:
    """A real legacy-format file (torch.save without the zip): clean."""
    import torch

    d = root / "ckpts"
    d.mkdir()
    torch.save({"w": torch.ones(4)}, d / "ckpt_step_7.pt", _use_new_zipfile_serialization=False)
    return Attack(_check(d), unsafe=False)


def numpy_object_array_real(root: Path) -> Attack:
    """What numpy itself writes for an object array of plain values: it may be called
    unsafe (loading it needs the object-array machinery) but must not crash."""
    import numpy as np
    import torch

    d = root / "ckpts"
    d.mkdir()
    torch.save({"a": np.array([1, "x", None], dtype=object)}, d / "ckpt_step_7.pt")
    return Attack(_check(d), unsafe=None)


PICKLES: list[Callable[[Path], Attack]] = [
    p0_inst_unicode_args,
    p0_escaped_dunder_key,
    p1_escaped_dunder_slots,
    reconstructor_disallowed_class,
    rebuild_from_type_codec,
    rebuild_from_type_nested,
    rebuild_tensor_not_storage,
    build_on_a_class,
    functools_partial,
    numpy_object_array,
    getattr_through_memo,
    load_from_bytes,
    *(_reduce_ex(p) for p in (0, 1, 2, 5)),
    newobj_ex,
    frame_lies,
    missing_stop,
    two_pickles_in_data_pkl,
    pickle_in_serialization_id,
    legacy_second_pickle_protocol0,
    legacy_real,
    numpy_object_array_real,
]

# --- paths -------------------------------------------------------------------------------


def _outside_secret(root: Path) -> Path:
    secret = root / "secret"
    secret.write_text(SECRET * 4)
    return secret


def _sharded(root: Path, names: list[str]) -> Path:
    d = root / "tree" / "checkpoint-10"
    d.mkdir(parents=True)
    index = {"metadata": {}, "weight_map": {f"w{i}": n for i, n in enumerate(names)}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    return root / "tree"


def index_mixed_separators(root: Path) -> Attack:
    _outside_secret(root)
    return Attack(
        _check(_sharded(root, ["..\\..\\secret", "..\\/../../secret", "./..//../secret"]))
    )


def index_unicode_dots(root: Path) -> Attack:
    _outside_secret(root)
    names = [
        "\u2024\u2024/\u2024\u2024/secret",
        "\uff0e\uff0e/\uff0e\uff0e/secret",
        "..\u2215..\u2215secret",
    ]
    return Attack(_check(_sharded(root, names)))


def index_nul_and_long(root: Path) -> Attack:
    _outside_secret(root)
    return Attack(_check(_sharded(root, ["a\0/../../secret", "x" * 100_000, "d/" * 3000 + "f"])))


def symlink_loop(root: Path) -> Attack:
    tree = _sharded(root, ["loop_a", "loop_a/x"])
    d = tree / "checkpoint-10"
    os.symlink("loop_b", d / "loop_a")
    os.symlink("loop_a", d / "loop_b")
    os.symlink("self.pt", d / "self.pt")
    return Attack(_check(tree))


def latest_self(root: Path) -> Attack:
    tree = root / "tree"
    (tree / "global_step5").mkdir(parents=True)
    (tree / "latest").write_text("latest")
    (tree / "latest_checkpointed_iteration.txt").write_text("latest_checkpointed_iteration.txt")
    os.symlink("latest_universal", tree / "latest_universal")
    return Attack(_check(tree))


def run_folder_loop(root: Path) -> Attack:
    run = root / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(f'{{"step": {i}, "loss": 1.0}}\n' for i in range(5)))
    os.symlink("loop2.jsonl", run / "loop1.jsonl")
    os.symlink("loop1.jsonl", run / "loop2.jsonl")
    os.symlink("sub", run / "sub")
    return Attack([["analyze", str(run)], ["gate", str(run), "--format", "text"]])


PATHS = [
    index_mixed_separators,
    index_unicode_dots,
    index_nul_and_long,
    symlink_loop,
    latest_self,
    run_folder_loop,
]

# --- names in outputs ------------------------------------------------------------------

NAMES = {
    "combining": "loss\u0301\u0301\u0301\u0301\u20dd",
    "zero_width_joiner": "lo\u200dss\u200b\ufeff",
    "line_separator": "loss\u2028::error file=x::forged",
    "fullwidth_colons": "\uff1a\uff1aerror file=a.py\uff1a\uff1aforged",
    "csi_8bit": "loss\x9b2J\x9b31mred",
    "osc8_link": "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07",
    "nel_vt_ff": "a\x85b\x0bc\x0cd",
    "very_long": "L" * 12_000 + "\n::error::x",
    "svg_title_html": "</title><script>alert(1)</script><title>",
    "xml_noncharacter": "a\ufffe\uffffb\x00",
}


def _named_run(root: Path, names: list[str]) -> Path:
    """A run where each hostile name is a metric with a spike and a NaN (so it is named
    in findings, incidents, annotations and plots)."""
    run = root / "run"
    run.mkdir()
    lines = []
    for i in range(60):
        row: dict[str, object] = {"step": i, "loss": 1.0 / (i + 1)}
        for name in names:
            row[name] = 1e6 if i == 40 else float("nan") if i == 50 else 1.0 / (i + 1)
        lines.append(json.dumps(row))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return run


def _name_attack(name: str) -> Callable[[Path], Attack]:
    def build(root: Path) -> Attack:
        run, junit = _named_run(root, [NAMES[name]]), root / "gate.xml"
        return Attack(
            [
                ["analyze", str(run)],
                ["gate", str(run), "--format", "github"],
                ["gate", str(run), "--format", "junit", "--output", str(junit)],
            ],
            xml=[junit],
        )

    build.__name__ = f"name_{name}"
    return build


def names_in_report(root: Path) -> Attack:
    """Every hostile name in one report (one render: a report costs seconds): each SVG
    parses, report.md holds no raw control."""
    run, rep = _named_run(root, list(NAMES.values())), root / "rep"
    return Attack(
        [["report", str(run), "--output", str(rep)]], xml=[rep], outputs=[rep / "report.md"]
    )


# --- records -----------------------------------------------------------------------------


def _jsonl(root: Path, body: bytes, good: int, note: str | None = None) -> Attack:
    run = root / "m.jsonl"
    run.write_bytes(body)
    out = root / "frame.jsonl"
    return Attack(
        [["analyze", str(run)], ["convert", str(run), "--output", str(out)]],
        values=(out, good),
        note=note,
    )


def _good(n: int, start: int = 0) -> bytes:
    return b"".join(b'{"step": %d, "loss": %d.5}\n' % (i, i) for i in range(start, start + n))


def jsonl_megabyte_key(root: Path) -> Attack:
    key = "k" * 2**20
    return _jsonl(
        root, _good(3) + json.dumps({"step": 3, key: 1.0}).encode() + b"\n" + _good(3, 4), 6
    )


def jsonl_duplicate_keys(root: Path) -> Attack:
    return _jsonl(root, _good(3) + b'{"step": 3, "loss": 1.0, "loss": 2.0}\n' + _good(2, 4), 6)


def jsonl_deep_nesting(root: Path) -> Attack:
    deep = b'{"step": 3, "loss": 3.5, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    return _jsonl(root, _good(3) + deep + _good(3, 4), 6, note="line 4")


def jsonl_deep_unclosed(root: Path) -> Attack:
    deep = b'{"step": 3, "x": ' + b"[" * 100_000 + b"\n"
    return _jsonl(root, _good(3) + deep + _good(3, 4), 6, note="line 4")


def jsonl_huge_numbers(root: Path) -> Attack:
    body = _good(2) + b'{"step": 2, "loss": 1e999999, "a": -0, "b": -0.0}\n'
    body += b'{"step": 3, "loss": 1' + b"0" * 5000 + b'}\n{"step": 4, "loss": 1e-99999}\n'
    return _jsonl(root, body, None)  # type: ignore[arg-type]


def jsonl_bom_mid_file(root: Path) -> Attack:
    return _jsonl(root, _good(3) + b"\xef\xbb\xbf" + _good(3, 3), 6)


def jsonl_crlf_mix(root: Path) -> Attack:
    return _jsonl(root, _good(2) + _good(2, 2).replace(b"\n", b"\r\n") + b"\r" + _good(2, 4), 6)


def jsonl_bad_utf8_key(root: Path) -> Attack:
    body = _good(2) + b'{"step": 2, "lo\xff\xfess": 1.0, "loss": 2.5}\n' + _good(2, 3)
    return _jsonl(root, body, None)  # type: ignore[arg-type]


RECORDS = [
    jsonl_megabyte_key,
    jsonl_duplicate_keys,
    jsonl_deep_nesting,
    jsonl_deep_unclosed,
    jsonl_huge_numbers,
    jsonl_bom_mid_file,
    jsonl_crlf_mix,
    jsonl_bad_utf8_key,
]

ATTACKS: dict[str, Callable[[Path], Attack]] = {
    f.__name__: f
    for f in [*PICKLES, *PATHS, *(_name_attack(n) for n in NAMES), names_in_report, *RECORDS]
}

# --- the fork server ---------------------------------------------------------------------


def _child(argv: list[str], out: str, err: str, env: dict[str, str]) -> None:
    """In the forked child: the CLI's entry point with stdout/stderr sent to files."""
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8")
    sys.argv = ["trainlens", *argv]
    code = 3
    try:
        from trainlens.cli import entry

        entry()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # the runner sees the traceback in stderr, and exit 99
        import traceback

        traceback.print_exc()
        code = 99
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def serve() -> None:
    """One JSON request a line ({argv, out, err, timeout}), one JSON answer a line."""
    import trainlens.cli  # noqa: F401  (imported once, before any fork)

    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req["argv"], req["out"], req["err"], req.get("env", {}))
        deadline = time.monotonic() + req["timeout"]
        status, hung = 0, False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                hung = True
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                break
            select.select([], [], [], 0.01)
        answer = {
            "hung": hung,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        }
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    serve()
