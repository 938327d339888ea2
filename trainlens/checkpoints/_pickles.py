"""Read a pickle's opcodes without running it: what a load would do, and its string keys.

Never unpickled, nothing imported: the walk below decodes one opcode at a time and
keeps, for each stack slot, only what it statically is — a literal string or int, a
global's name, a tuple of such, a dict (and whether its keys are plain names), or
"computed at load time". That is enough to decide, as an unpickler would see it:

- every global (GLOBAL, STACK_GLOBAL, INST) must be on the allow-list
  (:mod:`._allowlist`), for the use the pickle makes of it (called, made without
  ``__init__``, looked up as an enum, or only named);
- STACK_GLOBAL's module and name must be literal strings (a name computed at load time,
  e.g. ``_codecs.encode("bf", "rot13")`` → ``"os"``, cannot be checked, so it is unsafe);
- what REDUCE, NEWOBJ, OBJ and INST call must be such a global (calling a value a call
  returned is unsafe), and the few allowed functions that call an argument get one that
  may be called;
- BUILD's state must be written out in the file and set no dunder attribute (setting
  ``__setstate__`` and building again calls it);
- EXT1/2/4 (a global from copyreg's extension registry, named nowhere in the file) is
  unsafe.

A hand-written walk rather than :func:`pickletools.genops`: it models the stack as it
goes, reads each opcode's argument in place (a 2 GB ``BINBYTES8`` in a mapped file is
skipped, not copied), and charges the checkpoint's shared
:class:`~trainlens.checkpoints._budget.Spend`. Measured (bench/pickle_walk.py, one
run): 1.3x genops' time on a torch ``data.pkl`` (genops only decodes), 1.1x on a memo
bomb; the deny-list scan it replaced (genops plus its own bookkeeping) cost 1.9 µs an
opcode where this costs 0.4-1.3 µs. The walk keeps one 8-byte slot a memo entry.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import mmap
from collections.abc import Sequence

from trainlens.checkpoints._allowlist import CALL, ENUM, NEW, use_of
from trainlens.checkpoints._budget import Spend
from trainlens.core.dataclass import dataclass, field

#: strings longer than this are not kept as keys or names (a name is never this long)
_MAX_KEPT = 4096
#: the walk looks at its budget (opcodes, memo, clock) once every this many opcodes
#: (about 6 ms of walking; a memo can outgrow its limit by this much, 128 KiB)
_CHECK_EVERY = 1 << 14


class _Computed:
    """A value known only at load time: a call's result, a persistent id's object."""

    __slots__ = ()


class _Literal:
    """A value written in the file that the audit does not need (float, bytes, list …)."""

    __slots__ = ()


COMPUTED, LITERAL = _Computed(), _Literal()


class _Global:
    __slots__ = ("name", "use")

    def __init__(self, name: str, use: str | None) -> None:
        self.name, self.use = name, use


class _Dict:
    """A dict built by the pickle; ``bad`` says why it may not be a BUILD state."""

    __slots__ = ("bad",)

    def __init__(self) -> None:
        self.bad: str | None = None


@dataclass
class PickleScan:
    """What the opcodes of one pickle say (see ``error`` when it did not parse)."""

    globals: list[str] = field(default_factory=list)  # "module.name", in order, unique
    #: globals a load would import that are not on the allow-list, in order, unique
    disallowed: list[str] = field(default_factory=list)
    #: other things a load would do that cannot be allowed, e.g. "call a value
    #: computed at load time (REDUCE at byte 91)"
    tricks: list[str] = field(default_factory=list)
    strings: set[str] = field(default_factory=set)
    #: the first integer after each string key (``global_step`` -> 800); a dict's key and
    #: its int value are adjacent opcodes in every protocol torch and Lightning write
    int_after: dict[str, int] = field(default_factory=dict)
    #: every (string, following ints) where the string ends with ``suffix`` (DCP storage
    #: files: relative_path, offset, length)
    refs: list[tuple[str, list[int]]] = field(default_factory=list)
    error: str | None = None
    spent: str | None = None  # the budget limit the walk stopped on
    end: int = 0  # offset just past STOP

    @property
    def unsafe(self) -> list[str]:
        return self.disallowed + self.tricks

    def verdict(self) -> str | None:
        """'loading it would import posix.system (not on the allow-list) …', or None."""
        parts = []
        if self.disallowed:
            names = self.disallowed[:4] + (["…"] if len(self.disallowed) > 4 else [])
            parts.append(f"import {', '.join(names)} (not on the allow-list)")
        parts += self.tricks[:3]
        return f"loading it would {'; '.join(parts)}; not loaded" if parts else None


class _Stop(Exception):
    """The walk ends: the budget ran out, or the bytes do not parse."""


def scan(
    data: bytes | mmap.mmap,
    *,
    ref_suffix: str | None = None,
    start: int = 0,
    spend: Spend | None = None,
) -> PickleScan:
    """Walk the pickle at offset ``start`` of ``data`` (bytes or an mmap), never executing
    it, charging ``spend``; ``end`` is the offset just past its STOP."""
    walk = _Walk(data, start, spend or Spend(), ref_suffix)
    try:
        walk.run()
    except _Stop:
        if not walk.out.end:
            walk.out.spent = walk.spend.spent
    except (IndexError, UnicodeDecodeError, ValueError) as exc:
        walk.out.error = f"{type(exc).__name__} at byte {walk.at}: {exc}"
    return walk.out


class _Walk:
    def __init__(self, data: bytes | mmap.mmap, start: int, spend: Spend, ref: str | None):
        self.data, self.i, self.at = data, start, start
        self.spend = spend
        self.ref_suffix = ref
        self.out = PickleScan()
        self.stack: list[object] = []
        self.marks: list[int] = []
        self.memo: list[object] = []
        self.sparse: dict[int, object] = {}  # memo keys past the dense run
        self.proto = 0
        self.pending: str | None = None  # last string seen, waiting for an int
        self.refs: tuple[str, list[int]] | None = None
        self.seen: set[str] = set()
        self.cache: dict[tuple[str, str], _Global] = {}

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:  # one branch per opcode, on purpose
        data, stack, memo = self.data, self.stack, self.memo
        spend = self.spend
        n = len(data)
        end = min(n, self.i + spend.bytes_left())
        ops = spend.budget.opcodes - spend.opcodes
        memo_left = spend.budget.memo - spend.memo
        i = at = self.i
        count = 0
        if spend.spent is not None or spend.out_of_time():  # spent on an earlier pickle
            raise _Stop
        check = min(ops, _CHECK_EVERY)  # the opcode count of the next look at the budget
        try:
            while True:
                if i >= end:
                    at = i
                    if end < n:
                        spend.spent = f"{spend.budget.bytes:,} bytes"
                        raise _Stop
                    raise ValueError("the pickle ends before its STOP opcode")
                count += 1
                if count > check:
                    self._check(count, ops, memo_left)
                    check = min(ops, count + _CHECK_EVERY)
                at = i
                op = data[i]
                i += 1
                if op == 0x71:  # BINPUT
                    key = data[i]
                    i += 1
                    if key < len(memo):
                        memo[key] = stack[-1]
                    else:
                        self._put(key)
                elif op == 0x68:  # BINGET
                    key = data[i]
                    i += 1
                    value = memo[key] if key < len(memo) else self._get(key)
                    stack.append(value)
                    if isinstance(value, str):
                        self._seen_string(value)
                elif op == 0x94:  # MEMOIZE
                    if self.sparse:
                        self._put(len(memo) + len(self.sparse))
                    else:
                        memo.append(stack[-1])
                elif op == 0x72:  # LONG_BINPUT
                    self._put(int.from_bytes(data[i : i + 4], "little"))
                    i += 4
                elif op == 0x6A:  # LONG_BINGET
                    value = self._get(int.from_bytes(data[i : i + 4], "little"))
                    i += 4
                    stack.append(value)
                    if isinstance(value, str):
                        self._seen_string(value)
                elif op == 0x8C or op == 0x58 or op == 0x8D:  # SHORT_BINUNICODE/BINUNICODE/8
                    if op == 0x8C:
                        size, i = data[i], i + 1
                    else:
                        width = 4 if op == 0x58 else 8
                        size = int.from_bytes(data[i : i + width], "little")
                        i += width
                    if size <= _MAX_KEPT:
                        self._string(bytes(data[i : i + size]).decode("utf-8", "surrogatepass"))
                    else:
                        stack.append(LITERAL)
                    i += size
                elif op == 0x55 or op == 0x54:  # SHORT_BINSTRING, BINSTRING (Python 2 str)
                    if op == 0x55:
                        size, i = data[i], i + 1
                    else:
                        size = int.from_bytes(data[i : i + 4], "little", signed=True)
                        i += 4
                    if size <= _MAX_KEPT:
                        self._string(bytes(data[i : i + size]).decode("latin-1"))
                    else:
                        stack.append(LITERAL)
                    i += max(0, size)
                elif op == 0x4B:  # BININT1
                    self._int(data[i])
                    i += 1
                elif op == 0x4D:  # BININT2
                    self._int(int.from_bytes(data[i : i + 2], "little"))
                    i += 2
                elif op == 0x4A:  # BININT
                    self._int(int.from_bytes(data[i : i + 4], "little", signed=True))
                    i += 4
                elif op == 0x8A or op == 0x8B:  # LONG1, LONG4
                    width = 1 if op == 0x8A else 4
                    size = int.from_bytes(data[i : i + width], "little", signed=op == 0x8B)
                    i += width
                    if 0 <= size <= 8:
                        self._int(int.from_bytes(data[i : i + size], "little", signed=True))
                    else:
                        stack.append(LITERAL)
                    i += max(0, size)
                elif op == 0x28:  # MARK
                    self.marks.append(len(stack))
                elif op == 0x29:  # EMPTY_TUPLE
                    stack.append(())
                elif op == 0x85:  # TUPLE1
                    stack[-1] = (stack[-1],)
                elif op == 0x86:  # TUPLE2
                    stack[-2:] = [(stack[-2], stack[-1])]
                elif op == 0x87:  # TUPLE3
                    stack[-3:] = [(stack[-3], stack[-2], stack[-1])]
                elif op == 0x74:  # TUPLE
                    stack.append(tuple(self._pop_mark()))
                elif op == 0x7D:  # EMPTY_DICT
                    stack.append(_Dict())
                elif op == 0x64:  # DICT
                    items = self._pop_mark()
                    d = _Dict()
                    self._keys(d, items[0::2])
                    stack.append(d)
                elif op == 0x73:  # SETITEM
                    item_key = stack[-2]
                    del stack[-2:]
                    target = stack[-1]
                    if isinstance(target, _Dict):
                        self._keys(target, (item_key,))
                elif op == 0x75:  # SETITEMS
                    items = self._pop_mark()
                    target = stack[-1]
                    if isinstance(target, _Dict):
                        self._keys(target, items[0::2])
                elif op == 0x5D or op == 0x8F:  # EMPTY_LIST, EMPTY_SET
                    stack.append(LITERAL)
                elif op == 0x61:  # APPEND
                    stack.pop()
                elif op == 0x65 or op == 0x90:  # APPENDS, ADDITEMS
                    self._pop_mark()
                elif op == 0x6C or op == 0x91:  # LIST, FROZENSET
                    self._pop_mark()
                    stack.append(LITERAL)
                elif op in (0x4E, 0x88, 0x89):  # NONE, NEWTRUE, NEWFALSE
                    stack.append(LITERAL)
                elif op == 0x47:  # BINFLOAT
                    stack.append(LITERAL)
                    i += 8
                elif op in (0x43, 0x42, 0x8E, 0x96):  # SHORT_BINBYTES, BINBYTES(8), BYTEARRAY8
                    width = {0x43: 1, 0x42: 4, 0x8E: 8, 0x96: 8}[op]
                    size = int.from_bytes(data[i : i + width], "little")
                    i += width + size  # skipped in place, never copied
                    stack.append(LITERAL)
                elif op == 0x52:  # REDUCE
                    self.at = at
                    args = stack.pop()
                    self._call(stack[-1], args, "REDUCE")
                    stack[-1] = COMPUTED
                elif op == 0x62:  # BUILD
                    self.at = at
                    self._build(stack.pop())
                    if isinstance(stack[-1], _Global):  # setattr on the class itself
                        self._trick(f"set attributes of {stack[-1].name} itself (BUILD)")
                elif op == 0x81:  # NEWOBJ
                    self.at = at
                    args = stack.pop()
                    self._call(stack[-1], args, "NEWOBJ")
                    stack[-1] = COMPUTED
                elif op == 0x92:  # NEWOBJ_EX
                    self.at = at
                    del stack[-1]  # kwargs
                    args = stack.pop()
                    self._call(stack[-1], args, "NEWOBJ")
                    stack[-1] = COMPUTED
                elif op == 0x93:  # STACK_GLOBAL
                    self.at = at
                    name = stack.pop()
                    module = stack[-1]
                    if isinstance(module, str) and isinstance(name, str):
                        stack[-1] = self._global(module, name)
                    else:
                        self._trick(
                            "import a global whose name is computed at load time (STACK_GLOBAL)"
                        )
                        stack[-1] = COMPUTED
                elif op == 0x63:  # GLOBAL
                    self.at = at
                    module, i = self._name_line(i)
                    name, i = self._name_line(i)
                    stack.append(self._global(module, name))
                elif op == 0x69:  # INST
                    self.at = at
                    module, i = self._name_line(i)
                    name, i = self._name_line(i)
                    args = tuple(self._pop_mark())
                    self._call(self._global(module, name), args, "INST")
                    stack.append(COMPUTED)
                elif op == 0x6F:  # OBJ
                    self.at = at
                    items = self._pop_mark()
                    self._call(items[0], tuple(items[1:]), "OBJ")
                    stack.append(COMPUTED)
                elif op in (0x82, 0x83, 0x84):  # EXT1, EXT2, EXT4
                    self.at = at
                    width = {0x82: 1, 0x83: 2, 0x84: 4}[op]
                    code = int.from_bytes(data[i : i + width], "little")
                    i += width
                    self._trick(
                        f"import the global registered as extension code {code} in copyreg "
                        f"(EXT{width}), which the file does not name"
                    )
                    stack.append(COMPUTED)
                elif op == 0x51:  # BINPERSID: torch's storages; its loader decides
                    stack[-1] = COMPUTED
                elif op == 0x80:  # PROTO
                    self.proto = data[i]
                    i += 1
                elif op == 0x95:  # FRAME: a length, nothing to do
                    i += 8
                elif op == 0x2E:  # STOP
                    self.out.end = i
                    raise _Stop
                elif op == 0x30:  # POP
                    if self.marks and self.marks[-1] == len(stack):
                        self.marks.pop()
                    else:
                        stack.pop()
                elif op == 0x31:  # POP_MARK
                    self._pop_mark()
                elif op == 0x32:  # DUP
                    stack.append(stack[-1])
                elif op == 0x97:  # NEXT_BUFFER
                    stack.append(LITERAL)
                elif op == 0x98:  # READONLY_BUFFER: marks the buffer read-only
                    pass
                else:
                    i = self._text_op(op, i)
        finally:
            self.at = at
            spend.opcodes += min(count, max(ops, 0))
            spend.bytes += min(i, end) - self.i
            spend.memo += len(memo) + len(self.sparse)
            self.i = i

    def _check(self, count: int, ops: int, memo_left: int) -> None:
        """Every few thousand opcodes: the opcode and memo counts, and the clock."""
        spend = self.spend
        if count > ops:
            spend.spent = f"{spend.budget.opcodes:,} opcodes"
            raise _Stop
        if len(self.memo) + len(self.sparse) > memo_left:
            spend.spent = f"{spend.budget.memo:,} memo entries"
            raise _Stop
        if spend.out_of_time():
            raise _Stop

    # -- opcodes of protocol 0 (one text line of argument) --------------------------------

    def _line(self, i: int) -> tuple[bytes, int]:
        """The text argument at ``i`` (up to its newline) and the offset past it; a long
        one (protocol 0's strings hold whole arrays) comes back empty, found by
        ``find`` without being copied."""
        j = self.data.find(b"\n", i)
        if j < 0:
            raise ValueError("a text argument runs past the end of the pickle")
        return (bytes(self.data[i:j]) if j - i <= _MAX_KEPT else b""), j + 1

    def _name_line(self, i: int) -> tuple[str, int]:
        raw, i = self._line(i)
        if not raw:
            raise ValueError("a module or name line that is empty or too long")
        return raw.decode("utf-8", "surrogatepass"), i

    def _text_op(self, op: int, i: int) -> int:
        if op not in (0x49, 0x4C, 0x46, 0x53, 0x56, 0x67, 0x70, 0x50):
            raise ValueError(f"unknown opcode 0x{op:02x}")
        start = i
        raw, i = self._line(i)
        if not raw and op in (0x53, 0x56) and i - start > 1:  # a long string: not a key
            self.stack.append(LITERAL)
        elif op == 0x49 or op == 0x4C:  # INT, LONG
            digits = raw.rstrip(b"L")
            if digits in (b"00", b"01"):
                self.stack.append(LITERAL)  # protocol 0's False and True
            else:
                self._int(int(digits))
        elif op == 0x53:  # STRING: a quoted repr, its escapes decoded as pickle does
            # ('__setstate\\x5f_' is the dunder a BUILD state may not set)
            if len(raw) >= 2 and raw[0] == raw[-1] and raw[:1] in (b"'", b'"'):
                raw = raw[1:-1]
            self._string(codecs.escape_decode(raw)[0].decode("latin-1"))
        elif op == 0x56:  # UNICODE
            self._string(raw.decode("raw-unicode-escape"))
        elif op == 0x67:  # GET
            value = self._get(int(raw))
            self.stack.append(value)
            if isinstance(value, str):
                self._seen_string(value)
        elif op == 0x70:  # PUT
            self._put(int(raw))
        elif op == 0x50:  # PERSID
            self.stack.append(COMPUTED)
        else:  # FLOAT
            self.stack.append(LITERAL)
        return i

    # -- values ---------------------------------------------------------------------------

    def _string(self, value: str) -> None:
        self.stack.append(value)
        self._seen_string(value)

    def _seen_string(self, value: str) -> None:
        out = self.out
        out.strings.add(value)
        self.pending = value
        if self.ref_suffix and value.endswith(self.ref_suffix):
            self.refs = (value, [])
            out.refs.append(self.refs)

    def _int(self, value: int) -> None:
        self.stack.append(value)
        if self.pending is not None:
            self.out.int_after.setdefault(self.pending, value)
            self.pending = None
        if self.refs is not None and len(self.refs[1]) < 2:
            self.refs[1].append(value)

    def _put(self, key: int) -> None:
        memo = self.memo
        if key < len(memo):
            memo[key] = self.stack[-1]
        elif key == len(memo) and not self.sparse:
            memo.append(self.stack[-1])
        else:  # out of order: kept apart (and counted the same)
            self.sparse[key] = self.stack[-1]

    def _get(self, key: int) -> object:
        if key < len(self.memo):
            return self.memo[key]
        if key in self.sparse:
            return self.sparse[key]
        raise ValueError(f"memo key {key} was never stored")

    def _pop_mark(self) -> list[object]:
        if not self.marks:
            raise ValueError("no MARK to pop to")
        k = self.marks.pop()
        items = self.stack[k:]
        del self.stack[k:]
        return items

    def _keys(self, d: _Dict, keys: Sequence[object]) -> None:
        for key in keys:
            if isinstance(key, str):
                if len(key) > 4 and key.startswith("__") and key.endswith("__"):
                    d.bad = d.bad or f"set the attribute {key!r} through BUILD"
            elif key is COMPUTED:
                d.bad = d.bad or "set an attribute whose name is computed at load time (BUILD)"

    # -- what a load would do -------------------------------------------------------------

    def _trick(self, what: str) -> None:
        what = f"{what} at byte {self.at}"
        if len(self.out.tricks) < 16:
            self.out.tricks.append(what)

    def _global(self, module: str, name: str) -> _Global:
        key = (module, name)
        found = self.cache.get(key)
        if found is not None:
            return found
        if self.proto < 3:  # pickle renames Python 2 names before it imports them
            module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        qualified = f"{module}.{name}"
        found = self.cache[key] = _Global(qualified, use_of(module, name))
        if qualified not in self.seen:
            self.seen.add(qualified)
            self.out.globals.append(qualified)
            if found.use is None:
                self.out.disallowed.append(qualified)
        return found

    def _call(self, fn: object, args: object, how: str) -> None:
        if not isinstance(fn, _Global):
            self._trick(f"call a value computed at load time ({how})")
            return
        use = fn.use
        if use is None:  # named already as not on the allow-list
            return
        if use == CALL:
            self._checked_args(fn.name, args)
        elif use == NEW:
            if how != "NEWOBJ":
                self._trick(f"call {fn.name}, which may only be made without its __init__")
        elif use == ENUM:
            if not (isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], str | int)):
                self._trick(f"call {fn.name} with other than one literal value ({how})")
        else:
            self._trick(f"call {fn.name}, which may only be named ({how})")

    def _checked_args(self, name: str, args: object) -> None:
        """The allowed functions that call or look up by one of their arguments."""
        if name == "_codecs.encode":
            ok = isinstance(args, tuple) and len(args) == 2 and args[1] in ("latin1", "latin-1")
            if not ok:
                self._trick("encode text with a codec other than latin1 (_codecs.encode)")
        elif name == "copyreg._reconstructor":
            ok = isinstance(args, tuple) and len(args) == 3
            cls, base = (args[0], args[1]) if ok else (None, None)  # type: ignore[index]
            ok = ok and isinstance(cls, _Global) and cls.use in (CALL, NEW)
            ok = ok and isinstance(base, _Global)
            ok = ok and (base.name == "builtins.object" or (cls.use == CALL and base.use == CALL))  # type: ignore[union-attr]
            if not ok:
                self._trick("rebuild an object of a class not allowed (copyreg._reconstructor)")
        elif name in ("torch._tensor._rebuild_from_type_v2", "collections.defaultdict"):
            first = args[0] if isinstance(args, tuple) and args else None
            if not (isinstance(first, _Global) and first.use == CALL):
                self._trick(f"have {name} call what may not be called")
            elif name.startswith("torch.") and isinstance(args, tuple) and len(args) > 2:
                # it calls first(*args[2]): the same checks as a direct call of first
                self._checked_args(first.name, args[2])

    def _build(self, state: object) -> None:
        """BUILD updates the object's ``__dict__`` (and, from a ``(dict, slots)`` pair, sets
        attributes) unless its class has ``__setstate__``: a dunder key there, or a state
        an allowed call computed (``builtins.dict([("__setstate__", …)])``), is how a
        pickle makes a later BUILD call what it chose."""
        if state is COMPUTED:
            self._trick("set an object's state computed at load time (BUILD)")
        elif isinstance(state, _Dict):
            if state.bad:
                self._trick(state.bad)
        elif isinstance(state, tuple) and len(state) == 2:
            first, slots = state
            if isinstance(first, _Dict) and first.bad:
                self._trick(first.bad)
            if isinstance(slots, _Dict) and slots.bad:
                self._trick(slots.bad)
            elif slots is COMPUTED and (first is LITERAL or isinstance(first, _Dict)):
                self._trick("set attributes computed at load time (BUILD)")
