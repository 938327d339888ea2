"""trainlens.core.dataclass against the standard library's dataclasses: each class shape
is made by both, and everything a caller can see must come out the same (fields, the
signature and doc, defaults, what each method does and the errors it raises)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import math
import pickle
import pprint
import re
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import trainlens.core.dataclass
from trainlens.core.dataclass import dataclass

REPO = Path(__file__).resolve().parent.parent
_MODULES = itertools.count()

# Each shape: the source of its classes (``dataclass`` is the decorator under test) and
# the calls made of them: (class, args, kwargs).
SHAPES: dict[str, tuple[str, list[tuple[str, tuple[Any, ...], dict[str, Any]]]]] = {
    "plain": (
        """
@dataclass
class C:
    '''A point.'''
    x: int
    y: float = 2.5
    name: str = "p"
class Outer:
    @dataclass(frozen=True)
    class Inner:
        x: int = 0
Inner = Outer.Inner
""",
        [
            ("C", (1,), {}),
            ("C", (1, 3.0, "q"), {}),
            ("C", (), {}),
            ("C", (1, 2, 3, 4), {}),
            ("C", (1,), {"x": 2}),
            ("C", (1,), {"z": 2}),
            ("Inner", (), {}),
        ],
    ),
    "frozen, no docstring, string annotations": (
        """
from __future__ import annotations
@dataclass(frozen=True)
class C:
    x: int
    tags: tuple[str, ...] = ()
    extra: dict[str, float] = field(default_factory=dict, compare=False)
""",
        [("C", (1,), {}), ("C", (1, ("a",)), {"extra": {"k": 1.0}}), ("C", (), {"y": 1})],
    ),
    "field options": (
        """
import math
@dataclass
class C:
    a: list = field(default_factory=list)
    b: int = field(default=3, repr=False)
    c: float = field(default=math.nan, compare=False)
    d: str = field(default="d", init=False)
    e: list = field(default_factory=lambda: [1], init=False, repr=False, compare=False)
    f: int = field(default=0, metadata={"unit": "steps"}, hash=False)
""",
        [("C", (), {}), ("C", ([1, 2], 4), {"c": 1.0, "f": 5}), ("C", (), {"d": "x"})],
    ),
    "frozen with hash options": (
        """
@dataclass(frozen=True)
class C:
    '''Doc.'''
    a: int
    b: float = field(default=1.0, hash=False)
    c: str = field(default="c", compare=False)
    d: int = field(default=4, compare=False, hash=True)
""",
        [("C", (1,), {}), ("C", (1, float("nan")), {}), ("C", (2, 3.0, "x", 5), {})],
    ),
    "no fields, frozen and not": (
        """
@dataclass
class A:
    pass
@dataclass(frozen=True)
class B:
    '''Empty.'''
""",
        [("A", (), {}), ("B", (), {}), ("B", (1,), {})],
    ),
    "a field named self": (
        """
@dataclass(frozen=True)
class C:
    self: int
    other: int = 0
""",
        [("C", (1,), {}), ("C", (), {"self": 2, "other": 3})],
    ),
    "post_init and InitVar": (
        """
@dataclasses.dataclass
class Log:
    seen: list = field(default_factory=list)
LOG = Log()
@dataclass
class C:
    x: int
    scale: InitVar[float] = 2.0
    y: float = field(init=False, default=0.0)
    def __post_init__(self, scale):
        self.y = self.x * scale
        LOG.seen.append(self.x)
@dataclass(frozen=True)
class F:
    x: int
    def __post_init__(self):
        object.__setattr__(self, "double", 2 * self.x)
""",
        [("C", (1,), {}), ("C", (2, 3.0), {}), ("C", (), {"x": 1, "y": 1}), ("F", (4,), {})],
    ),
    "kw_only and KW_ONLY": (
        """
@dataclass(kw_only=True)
class A:
    x: int
    y: int = 1
@dataclass
class B:
    x: int
    _: KW_ONLY
    y: int = 2
    z: int
@dataclass
class C:
    x: int = 0
    y: int = field(kw_only=True)
""",
        [
            ("A", (), {"x": 1}),
            ("A", (1,), {}),
            ("B", (1,), {"z": 3}),
            ("B", (1, 2, 3), {}),
            ("C", (), {"y": 1}),
        ],
    ),
    "ClassVar": (
        """
from typing import ClassVar
@dataclass
class C:
    LIMIT: ClassVar[int] = 10
    x: int = 1
""",
        [("C", (), {}), ("C", (5,), {})],
    ),
    "inheritance, not frozen": (
        """
@dataclass
class Base:
    '''Base.'''
    a: int
    b: str = "b"
@dataclass
class Sub(Base):
    c: float = 0.5
    b: str = "overridden"
@dataclass(eq=False)
class NoEq(Base):
    d: int = 1
class Plain(Base):
    pass
""",
        [
            ("Sub", (1,), {}),
            ("Sub", (1, "x", 2.0), {}),
            ("NoEq", (1,), {}),
            ("Plain", (1,), {}),
        ],
    ),
    "inheritance, frozen": (
        """
@dataclass(frozen=True)
class Base:
    a: int
@dataclass(frozen=True)
class Sub(Base):
    b: int = 2
class Plain(Base):
    pass
""",
        [("Sub", (1,), {}), ("Plain", (1,), {})],
    ),
    "frozen from a plain base": (
        """
@dataclass
class Base:
    a: int
@dataclass(frozen=True)
class Sub(Base):
    b: int = 2
""",
        [],
    ),
    "plain from a frozen base": (
        """
@dataclass(frozen=True)
class Base:
    a: int
@dataclass
class Sub(Base):
    b: int = 2
""",
        [],
    ),
    "a default before a required field": (
        """
@dataclass
class C:
    x: int = 0
    y: int
""",
        [],
    ),
    "frozen over a class's own __setattr__": (
        """
@dataclass(frozen=True)
class C:
    x: int
    def __setattr__(self, name, value):
        pass
""",
        [],
    ),
    "the class's own methods": (
        """
@dataclass(frozen=True)
class C:
    x: int
    def __repr__(self):
        return "mine"
    def __eq__(self, other):
        return True
@dataclass
class D:
    x: int
    def __init__(self, x):
        self.x = -x
    def __hash__(self):
        return 7
@dataclass(frozen=True)
class E:
    x: int
    def __hash__(self):
        return 8
""",
        [("C", (1,), {}), ("D", (1,), {}), ("E", (1,), {})],
    ),
    "options off": (
        """
@dataclass(eq=False)
class A:
    x: int = 1
@dataclass(repr=False, init=False)
class B:
    x: int = 1
@dataclass(frozen=True, eq=False)
class F:
    x: int = 1
""",
        [("A", (), {}), ("B", (), {}), ("F", (), {})],
    ),
    "options handed to dataclasses": (
        """
@dataclass(order=True, frozen=True)
class O:
    x: int
    y: int = 0
@dataclass(unsafe_hash=True)
class U:
    x: int
@dataclass(slots=True, frozen=True)
class S:
    x: int
@dataclass(match_args=False)
class M:
    x: int
""",
        [("O", (1,), {}), ("U", (1,), {}), ("S", (1,), {}), ("M", (1,), {})],
    ),
    "a field holding its own object": (
        """
@dataclass
class Node:
    name: str
    child: object = None
""",
        [("Node", ("n",), {})],
    ),
}


def _module(source: str, decorator: Callable[..., Any]) -> tuple[dict[str, Any], Any]:
    """Run ``source`` as a fresh module with ``decorator`` as ``dataclass``; its names,
    or the error making its classes raised."""
    mod = types.ModuleType(f"_dataclass_shape_{next(_MODULES)}")
    sys.modules[mod.__name__] = mod
    mod.__dict__.update(
        dataclass=decorator,
        dataclasses=dataclasses,
        field=dataclasses.field,
        InitVar=dataclasses.InitVar,
        KW_ONLY=dataclasses.KW_ONLY,
    )
    try:
        exec(compile(source, mod.__name__, "exec", dont_inherit=True), mod.__dict__)
    except Exception as exc:
        return mod.__dict__, (type(exc).__name__, str(exc))
    return mod.__dict__, None


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", fn())
    except Exception as exc:
        return (type(exc).__name__, str(exc))


def _class_facts(cls: type) -> dict[str, Any]:
    every = cls.__dataclass_fields__  # type: ignore[attr-defined]
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    methods = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")
    return {
        "fields": [
            (
                f.name,
                str(f.type),
                repr(f.default),
                f.default_factory is dataclasses.MISSING,
                f.init,
                f.repr,
                f.compare,
                f.hash,
                f.kw_only,
                dict(f.metadata),
            )
            for f in dataclasses.fields(cls)
        ],
        "pseudo-fields": [n for n in every if n not in {f.name for f in dataclasses.fields(cls)}],
        "signature": str(inspect.signature(cls)),
        "doc": cls.__doc__,
        "match_args": cls.__dict__.get("__match_args__"),
        "params": {
            k: getattr(params, k) for k in ("init", "repr", "eq", "order", "unsafe_hash", "frozen")
        },
        "hash is None": cls.__hash__ is None,  # type: ignore[comparison-overlap]
        "own methods": {
            m: getattr(cls.__dict__[m], "__qualname__", repr(cls.__dict__[m]))
            for m in methods
            if m in cls.__dict__
        },
        "init annotations": {
            k: str(v) for k, v in getattr(cls.__init__, "__annotations__", {}).items()
        },
        "init module": getattr(cls.__init__, "__module__", None) == cls.__module__,
        "class attributes": {k: repr(v) for k, v in vars(cls).items() if k in every},
        "slots": cls.__dict__.get("__slots__"),
    }


def _instance_facts(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    made = _outcome(lambda: cls(*args, **kwargs))
    if made[0] != "ok":
        return made

    def fresh() -> Any:
        return cls(*args, **kwargs)

    obj = made[1]
    names = [f.name for f in dataclasses.fields(cls)]
    first = names[0] if names else "absent"
    return {
        "vars": repr(sorted(vars(obj).items())) if hasattr(obj, "__dict__") else None,
        "repr": repr(obj),
        "equal to a twin": obj == fresh(),
        "equal to itself": obj == obj,  # (a NaN field)
        "not equal to a twin": obj != fresh(),
        "equal to another type": obj == object(),
        "hash": _outcome(lambda: hash(obj) == hash(fresh())),
        "hash value": _outcome(
            lambda: "by identity" if type(obj).__hash__ is object.__hash__ else hash(obj)
        ),
        "set a field": _outcome(lambda: setattr(fresh(), first, 1)),
        "set another name": _outcome(lambda: setattr(fresh(), "zz", 1)),
        "delete a field": _outcome(lambda: delattr(fresh(), first)),
        "replace": _outcome(lambda: repr(vars(dataclasses.replace(fresh())))),
        "asdict": _outcome(lambda: repr(dataclasses.asdict(fresh()))),
        "astuple": _outcome(lambda: repr(dataclasses.astuple(fresh()))),
        "pickle": _outcome(lambda: repr(pickle.loads(pickle.dumps(fresh())))),
        "double": getattr(obj, "double", None),
    }


def _facts(source: str, calls: list[Any], decorator: Callable[..., Any]) -> dict[str, Any]:
    ns, error = _module(source, decorator)
    if error is not None:
        return {"error": error}
    out: dict[str, Any] = {
        name: _class_facts(obj)
        for name, obj in ns.items()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and name != "Log"
    }
    for i, (name, args, kwargs) in enumerate(calls):
        # (each call on classes of their own: a refused call compiles the real __init__)
        own, _ = _module(source, decorator)
        out[f"call {i}: {name}{args}{kwargs}"] = _instance_facts(own[name], args, kwargs)
    for name in list(out):  # (what the first call may have changed)
        if not name.startswith("call "):
            cls = ns[name]
            out[name + " after the calls"] = {
                "signature": str(inspect.signature(cls)),
                "init signature": str(inspect.signature(cls.__init__)),
                "init qualname": getattr(cls.__init__, "__qualname__", None),
                "init annotations": str(getattr(cls.__init__, "__annotations__", None)),
            }
    if "LOG" in ns:
        out["post_init calls"] = ns["LOG"].seen
    if "Node" in ns:
        node = ns["Node"]("n")
        node.child = node
        out["recursive repr"] = repr(node)
    return out


def _normal(facts: dict[str, Any]) -> str:
    """The facts as text, the two modules' names and objects' addresses made one."""
    text = re.sub(r"_dataclass_shape_\d+", "shape", pprint.pformat(facts, width=100))
    return re.sub(r" at 0x[0-9a-f]+", "", text)


@pytest.mark.parametrize("compile_after", [0, 3, 10_000])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_class_shape_comes_out_as_dataclasses_makes_it(
    shape: str, compile_after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(``compile_after``: every instance made by the compiled ``__init__``, the first
    few field by field, or all of them field by field)"""
    monkeypatch.setattr(trainlens.core.dataclass, "COMPILE_AFTER", compile_after)
    source, calls = SHAPES[shape]
    ours = _normal(_facts(source, calls, dataclass))
    theirs = _normal(_facts(source, calls, dataclasses.dataclass))
    assert ours == theirs
    assert len(ours) > 60  # (something was compared: an error, or classes and calls)


def test_the_shapes_cover_what_they_claim() -> None:
    """The comparison above is only worth what it looks at: the shapes must reach each
    behaviour (a frozen error, an eq that is False, a hash, a recursive repr, ...)."""
    seen = [_facts(src, calls, dataclasses.dataclass) for src, calls in SHAPES.values()]
    flat = repr(seen)
    assert "FrozenInstanceError" in flat
    assert "cannot inherit frozen dataclass from a non-frozen one" in flat
    assert "non-default argument 'y' follows default argument" in flat
    assert "Cannot overwrite attribute __setattr__" in flat
    assert "Node(name='n', child=...)" in flat
    assert "= <factory>" in flat
    plain = _facts(*SHAPES["field options"], dataclasses.dataclass)
    assert plain["call 0: C(){}"]["hash"][0] == "TypeError"  # unhashable: eq, not frozen


def test_frozen_nan_fields_compare_as_dataclasses_compare_them() -> None:
    """3.11's generated ``__eq__`` compares tuples, so a field holding the same NaN object
    is equal to itself; two different NaN objects are not."""
    ns, _ = _module("@dataclass(frozen=True)\nclass C:\n    x: float\n", dataclass)
    nan = math.nan
    assert ns["C"](nan) == ns["C"](nan)
    assert ns["C"](float("nan")) != ns["C"](float("nan"))


def test_only_a_class_made_often_compiles_and_only_its_init(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The point of the module: defining a class compiles nothing (dataclasses compiles
    six methods for a frozen one); its first instances are made field by field, and the
    one after COMPILE_AFTER compiles ``__init__``, once."""
    import builtins

    compiled: list[str] = []
    real = builtins.compile

    def counting(source: Any, *args: Any, **kwargs: Any) -> Any:
        compiled.append(str(source)[:40])
        return real(source, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    ns, error = _module("", dataclass)  # (a module to define the classes in)
    assert error is None
    compiled.clear()

    class Frozen:
        __module__ = ns["__name__"]
        __annotations__ = {"a": int, "b": int}
        b = 1

    dataclass(frozen=True)(Frozen)
    assert compiled == []
    assert str(inspect.signature(Frozen)) == "(a: int, b: int = 1) -> None"
    stub = Frozen.__init__
    made = [Frozen(i) for i in range(trainlens.core.dataclass.COMPILE_AFTER)]  # type: ignore[call-arg]
    assert compiled == []
    assert made[-1] == Frozen(len(made) - 1, 1)  # type: ignore[call-arg]
    assert len(compiled) == 1
    assert Frozen.__init__ is not stub
    assert stub(object.__new__(Frozen), 3) is None  # (a stub kept elsewhere still works)
    assert len(compiled) == 1
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: 'a'"):
        Frozen()  # type: ignore[call-arg]


def _dataclass_imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "dataclasses":
            for alias in node.names:
                if alias.name == "dataclass":
                    yield f"{path.relative_to(REPO)}:{node.lineno}"


def test_trainlens_makes_its_dataclasses_with_its_own_decorator() -> None:
    """Every trainlens module takes ``dataclass`` from trainlens.core.dataclass (start-up:
    ~0.6 ms saved a class, issue 28); only that module uses the standard library's."""
    found = [
        where
        for path in sorted((REPO / "trainlens").rglob("*.py"))
        if path.name != "dataclass.py" or path.parent.name != "core"
        for where in _dataclass_imports(path)
    ]
    assert found == []
    users = [
        p
        for p in (REPO / "trainlens").rglob("*.py")
        if "from trainlens.core.dataclass import dataclass" in p.read_text()
    ]
    assert len(users) > 50
