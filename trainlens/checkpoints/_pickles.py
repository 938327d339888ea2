"""Read a pickle's opcodes without running it: what it would import, and its string keys.

Never unpickled: :func:`pickletools.genops` decodes one opcode at a time and executes
none (no object is built, no ``__reduce__`` called, no module imported). What a load
*would* call is named by its ``GLOBAL`` / ``STACK_GLOBAL`` opcodes; a name from the deny
list below (the modules and builtins that run code, read or write files, or reach the
network) makes the file unsafe to load, as picklescan (used by the Hugging Face Hub)
judges it. A ``weights_only`` torch.load would refuse such a file too, but it still
parses attacker bytes in a Python process; an opcode walk needs nothing but the bytes.
"""

from __future__ import annotations

import io
import pickletools
from dataclasses import dataclass, field

#: modules whose every name runs code or touches the system when called from a pickle
_UNSAFE_MODULES = frozenset(
    {
        "os",
        "posix",
        "nt",
        "subprocess",
        "sys",
        "socket",
        "shutil",
        "runpy",
        "importlib",
        "pickle",
        "_pickle",
        "marshal",
        "types",
        "code",
        "codeop",
        "pty",
        "webbrowser",
        "asyncio",
        "multiprocessing",
        "ctypes",
        "pdb",
        "bdb",
        "timeit",
        "urllib",
        "http",
        "ftplib",
        "smtplib",
        "telnetlib",
        "requests",
        "platform",
        "signal",
        "tempfile",
        "io",
        "_io",
    }
)
#: builtins that run code or open files (``builtins.dict`` and the like are harmless)
_UNSAFE_BUILTINS = frozenset(
    {
        "eval",
        "exec",
        "execfile",
        "compile",
        "open",
        "getattr",
        "setattr",
        "delattr",
        "__import__",
        "globals",
        "locals",
        "vars",
        "input",
        "breakpoint",
        "apply",
    }
)
#: single callables elsewhere that load more pickles, fetch code, or reach any attribute
_UNSAFE_NAMES = frozenset(
    {
        "torch.load",
        "torch.serialization.load",
        "torch.jit.load",
        "torch.hub.load",
        "torch.hub.load_state_dict_from_url",
        "torch.hub.download_url_to_file",
        "numpy.load",
        "numpy.testing._private.utils.runstring",
        "operator.attrgetter",
        "operator.methodcaller",
        "functools.reduce",
    }
)
_STRINGS = frozenset(
    {
        "SHORT_BINUNICODE",
        "BINUNICODE",
        "BINUNICODE8",
        "UNICODE",
        "SHORT_BINSTRING",
        "BINSTRING",
        "STRING",
    }
)
_INTS = frozenset({"BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1", "LONG4"})
_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})


@dataclass
class PickleScan:
    """What the opcodes of one pickle say (empty when it did not parse; see ``error``)."""

    globals: list[str] = field(default_factory=list)  # "module.name", in order, unique
    strings: set[str] = field(default_factory=set)
    #: the first integer after each string key (``global_step`` -> 800); a dict's key and
    #: its int value are adjacent opcodes in every protocol torch and Lightning write
    int_after: dict[str, int] = field(default_factory=dict)
    #: every (string, following ints) where the string ends with ``suffix`` (DCP storage
    #: files: relative_path, offset, length)
    refs: list[tuple[str, list[int]]] = field(default_factory=list)
    error: str | None = None
    end: int = 0  # offset just past STOP

    @property
    def unsafe(self) -> list[str]:
        return [g for g in self.globals if is_unsafe(g)]


def is_unsafe(qualified: str) -> bool:
    module, _, name = qualified.rpartition(".")
    if qualified in _UNSAFE_NAMES:
        return True
    top = module.split(".", 1)[0]
    if top in ("builtins", "__builtin__"):
        return name in _UNSAFE_BUILTINS
    return top in _UNSAFE_MODULES


def scan(data: bytes, *, ref_suffix: str | None = None, start: int = 0) -> PickleScan:
    """Walk the opcodes of the pickle at offset ``start`` of ``data`` (never executing
    them); ``end`` is the offset just past its STOP."""
    out = PickleScan()
    memo: dict[int, object] = {}
    recent: list[object] = []  # values pushed lately (strings matter: STACK_GLOBAL's args)
    pending: str | None = None  # last string seen, waiting for an int
    ref: tuple[str, list[int]] | None = None
    seen: set[str] = set()
    stream = io.BytesIO(data)
    stream.seek(start)
    try:
        for op, arg, pos in pickletools.genops(stream):
            name = op.name
            value: object = None
            if name in _STRINGS:
                value = arg.decode("latin-1") if isinstance(arg, bytes) else arg
            elif name in _GETS:
                value = memo.get(int(arg))  # type: ignore[arg-type]
            elif name in _PUTS:
                memo[int(arg)] = recent[-1] if recent else None  # type: ignore[arg-type]
                continue
            elif name == "MEMOIZE":
                memo[len(memo)] = recent[-1] if recent else None
                continue
            elif name in _INTS and isinstance(arg, int):
                if pending is not None:
                    out.int_after.setdefault(pending, arg)
                    pending = None
                if ref is not None and len(ref[1]) < 2:
                    ref[1].append(arg)
                recent.append(arg)
                continue
            elif name in ("GLOBAL", "INST") and isinstance(arg, str):
                _add_global(out, seen, arg.replace(" ", "."))
            elif name == "STACK_GLOBAL" and len(recent) >= 2:
                mod, attr = recent[-2], recent[-1]
                if isinstance(mod, str) and isinstance(attr, str):
                    _add_global(out, seen, f"{mod}.{attr}")
            elif name == "STOP":
                out.end = (pos or 0) + 1
                break
            if isinstance(value, str):
                out.strings.add(value)
                pending = value
                if ref_suffix and value.endswith(ref_suffix):
                    ref = (value, [])
                    out.refs.append(ref)
            recent.append(value)
            if len(recent) > 8:
                del recent[:-4]
    except ValueError as exc:  # genops: unknown opcode, or the bytes end before STOP
        out.error = str(exc)
    return out


def _add_global(out: PickleScan, seen: set[str], qualified: str) -> None:
    if qualified.startswith("__builtin__."):  # protocol 2 (torch.save) spells builtins so
        qualified = "builtins." + qualified[len("__builtin__.") :]
    if qualified not in seen:
        seen.add(qualified)
        out.globals.append(qualified)
