"""``dataclass`` for trainlens's own classes: the standard library's fields, with the
methods it would generate built without compiling them at class creation.

Python 3.11's ``dataclasses.dataclass`` writes the source of every method it adds and
compiles it: ``__init__``, ``__repr__`` and ``__eq__``, and for a frozen class
``__hash__``, ``__setattr__`` and ``__delattr__`` too, one ``exec`` each: 0.7 ms a plain
class of 8 fields, 1.0 ms a frozen one. An ``analyze`` of a TensorBoard file defines 59
trainlens dataclasses (half of them never made) and spent 45 ms of its ~460 in that
(issue 28). Here ``dataclasses`` itself builds the fields (``init=False, repr=False,
eq=False``: 0.1 ms), so ``fields()``, ``replace()``, ``asdict()``, defaults and
``field()``'s options are its own. ``__init__`` is the source ``dataclasses`` would write
(the same defaults, factories, ``field(init=False)``, frozen assignment, ``InitVar`` and
``__post_init__``), compiled on the class's first instance (0.2-0.4 ms: most of what a
class cost); until then a stand-in with the same signature and annotations calls it.
``__repr__``, ``__eq__``, ``__hash__`` and the frozen ``__setattr__`` / ``__delattr__``
are closures over the field names that do what the generated ones do (3.11's:
``__eq__`` compares tuples of the fields, so a field holding the same NaN object is
equal to itself). A method the class defines itself is kept, as ``dataclasses`` keeps
it; ``__dataclass_params__`` records the options asked for.

What this does not build it hands to ``dataclasses.dataclass`` whole: ``order``,
``unsafe_hash``, ``slots``, ``weakref_slot``, ``match_args=False``, and a class that is
frozen with dataclass bases or has a frozen one (``dataclasses`` checks that frozenness
agrees across the bases). tests/test_dataclass.py holds each class shape to what
``dataclasses`` makes of it. mypy sees ``dataclasses.dataclass`` itself.
"""

import abc
import dataclasses
import inspect
import sys
from _thread import get_ident
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

__all__ = ["dataclass", "field"]

_FIELD = dataclasses._FIELD  # type: ignore[attr-defined]  # (what dataclasses marks fields by)
_FIELD_INITVAR = dataclasses._FIELD_INITVAR  # type: ignore[attr-defined]
_MISSING: Any = dataclasses.MISSING


class _HasDefaultFactory:
    """An ``__init__`` parameter's default when its field has a factory (as in
    ``dataclasses``: the signature shows ``=<factory>``)."""

    def __repr__(self) -> str:
        return "<factory>"


_HAS_DEFAULT_FACTORY = _HasDefaultFactory()


def _dataclass(
    cls: type | None = None,
    /,
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
) -> Any:
    """``dataclasses.dataclass``, as ``@dataclass`` or ``@dataclass(...)``."""
    options: dict[str, Any] = {
        "init": init,
        "repr": repr,
        "eq": eq,
        "order": order,
        "unsafe_hash": unsafe_hash,
        "frozen": frozen,
        "match_args": match_args,
        "kw_only": kw_only,
        "slots": slots,
        "weakref_slot": weakref_slot,
    }

    def wrap(c: type) -> type:
        return _process(c, options)

    return wrap if cls is None else wrap(cls)


def _process(cls: type, options: dict[str, Any]) -> type:
    if (
        options["order"]
        or options["unsafe_hash"]
        or options["slots"]
        or options["weakref_slot"]
        or not options["match_args"]
        or _frozen_matters(cls, options["frozen"])
    ):
        return dataclasses.dataclass(cls, **options)
    init, frozen, eq = options["init"], options["frozen"], options["eq"]
    class_hash = cls.__dict__.get("__hash__", _MISSING)
    explicit_hash = not (
        class_hash is _MISSING or (class_hash is None and "__eq__" in cls.__dict__)
    )
    no_doc = not cls.__doc__
    if no_doc:  # (else dataclasses would make it from a signature without __init__)
        cls.__doc__ = "-"
    # the fields, their defaults as class attributes, __match_args__: dataclasses' own
    dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=options["kw_only"])
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    for name in ("init", "repr", "eq", "frozen"):
        setattr(params, name, options[name])
    every = list(cls.__dataclass_fields__.values())  # type: ignore[attr-defined]
    fields = [f for f in every if f._field_type is _FIELD]
    if init:
        _init(cls, every, frozen)
    if options["repr"]:
        _add(cls, "__repr__", _repr_for(tuple(f.name for f in fields if f.repr)))
    if eq:
        _add(cls, "__eq__", _eq_for(_values_of(tuple(f.name for f in fields if f.compare))))
    if frozen:
        names = tuple(f.name for f in fields)
        for fn in _frozen_for(cls, names):
            if _add(cls, fn.__name__, fn):
                raise TypeError(f"Cannot overwrite attribute {fn.__name__} in class {cls.__name__}")
    if eq and not explicit_hash:
        hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        cls.__hash__ = _named(cls, _hash_for(_values_of(hashed))) if frozen else None  # type: ignore[assignment]
    if no_doc:
        try:
            text_sig = str(inspect.signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            text_sig = ""
        cls.__doc__ = cls.__name__ + text_sig
    abc.update_abstractmethods(cls)
    return cls


def _frozen_matters(cls: type, frozen: bool) -> bool:
    """Whether ``cls`` is frozen with dataclass bases or has a frozen one: dataclasses
    checks those against each other while it builds the fields."""
    for b in cls.__mro__[1:]:
        is_dataclass = getattr(b, "__dataclass_fields__", None) is not None
        if is_dataclass and (frozen or b.__dataclass_params__.frozen):  # type: ignore[attr-defined]
            return True
    return False


def _add(cls: type, name: str, fn: Any) -> bool:
    """Set ``fn`` unless the class defines ``name`` itself (True then), as dataclasses."""
    if name in cls.__dict__:
        return True
    setattr(cls, name, _named(cls, fn))
    return False


def _named(cls: type, fn: Any) -> Any:
    fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
    return fn


def _values_of(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function giving the tuple of an object's ``names`` attributes."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        only = names[0]
        return lambda obj: (getattr(obj, only),)
    return lambda obj: ()


def _repr_for(names: tuple[str, ...]) -> Callable[[Any], str]:
    running: set[tuple[int, int]] = set()

    def __repr__(self: Any) -> str:
        key = id(self), get_ident()
        if key in running:  # (a field that holds the object itself)
            return "..."
        running.add(key)
        try:
            inner = ", ".join([f"{n}={getattr(self, n)!r}" for n in names])
        finally:
            running.discard(key)
        return f"{self.__class__.__qualname__}({inner})"

    return __repr__


def _eq_for(values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hash_for(values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __hash__


def _frozen_for(cls: type, names: tuple[str, ...]) -> tuple[Callable[..., None], ...]:
    frozen_error = dataclasses.FrozenInstanceError
    owner: type = cls

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise frozen_error(f"cannot assign to field {name!r}")
        super(owner, self).__setattr__(name, value)  # type: ignore[arg-type]

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise frozen_error(f"cannot delete field {name!r}")
        super(owner, self).__delattr__(name)  # type: ignore[arg-type]

    return __setattr__, __delattr__


def _init(cls: type, every: list[dataclasses.Field[Any]], frozen: bool) -> None:
    """``__init__`` from the source ``dataclasses`` writes (3.11's ``_init_fn``)."""
    in_init = [f for f in every if f._field_type in (_FIELD, _FIELD_INITVAR)]  # type: ignore[attr-defined]
    std = [f for f in in_init if f.init and not f.kw_only]
    kw = [f for f in in_init if f.init and f.kw_only]
    seen_default = False
    for f in std:
        if not (f.default is _MISSING and f.default_factory is _MISSING):
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
    if "__init__" in cls.__dict__:  # (dataclasses checks the order, then keeps the class's)
        return
    self_name = "__dataclass_self__" if "self" in cls.__dataclass_fields__ else "self"  # type: ignore[attr-defined]
    post_init = hasattr(cls, "__post_init__")

    made: list[Callable[..., None]] = []
    by_fields = _FieldsInit(in_init, std, kw, frozen, post_init)

    def __init__(*args: Any, **kwargs: Any) -> None:
        # (no named self: a field may be called that)
        if not made:
            if by_fields.calls < COMPILE_AFTER and by_fields(args, kwargs):
                return
            made.append(_compiled_init(cls, in_init, std, kw, frozen, self_name, post_init))
        real = made[0]
        if cls.__dict__.get("__init__") is __init__:  # (from now on the class calls it)
            setattr(cls, "__init__", _named(cls, real))  # noqa: B010 - (mypy: cls.__init__)
        real(*args, **kwargs)

    # what introspection sees before the first call is what it sees after it
    param = inspect.Parameter
    own = [param(self_name, param.POSITIONAL_OR_KEYWORD)]
    own += [
        param(f.name, param.POSITIONAL_OR_KEYWORD, default=_default(f), annotation=f.type)
        for f in std
    ]
    own += [param(f.name, param.KEYWORD_ONLY, default=_default(f), annotation=f.type) for f in kw]
    __init__.__signature__ = inspect.Signature(own, return_annotation=None)  # type: ignore[attr-defined]
    __init__.__annotations__ = {f.name: f.type for f in (*std, *kw)} | {"return": None}
    __init__.__module__ = cls.__module__
    _add(cls, "__init__", __init__)


#: calls of a class's ``__init__`` made field by field before it is compiled: most classes
#: are made a few times (a detector's Params, a reader's options) and never pay the
#: compile; one made often (a Finding, an Alias) is compiled on its ninth instance
COMPILE_AFTER = 8


class _FieldsInit:
    """What the compiled ``__init__`` does, done by walking the fields: binds the
    arguments as its signature would, then sets each field in order (a factory called
    where the compiled one calls it, a frozen class's through ``object.__setattr__``) and
    calls ``__post_init__`` with the InitVars. Arguments its signature would refuse are
    left to the compiled one (False), so its error is the one raised."""

    def __init__(
        self,
        in_init: list[dataclasses.Field[Any]],
        std: list[dataclasses.Field[Any]],
        kw: list[dataclasses.Field[Any]],
        frozen: bool,
        post_init: bool,
    ) -> None:
        self.calls = 0
        self.std = tuple(f.name for f in std)
        self.named = {f.name for f in (*std, *kw)}
        self.required = tuple(
            f.name for f in (*std, *kw) if f.default is _MISSING and f.default_factory is _MISSING
        )
        self.fields = in_init
        # (an InitVar kept out of __init__ is a NameError of the compiled one: its own)
        self.odd = any(f._field_type is _FIELD_INITVAR and not f.init for f in in_init)  # type: ignore[attr-defined]
        self.frozen = frozen
        self.post_init = post_init

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        self.calls += 1
        if self.odd or not args or len(args) - 1 > len(self.std):
            return False
        given = dict(zip(self.std, args[1:], strict=False))
        for name, value in kwargs.items():
            if name not in self.named or name in given:
                return False
            given[name] = value
        if any(name not in given for name in self.required):
            return False
        obj = args[0]
        assign = object.__setattr__ if self.frozen else setattr
        initvars = []
        for f in self.fields:
            if f._field_type is _FIELD_INITVAR:  # type: ignore[attr-defined]
                initvars.append(given[f.name] if f.name in given else _default(f))
                continue
            if f.default_factory is not _MISSING:
                value = given.get(f.name, _HAS_DEFAULT_FACTORY) if f.init else _HAS_DEFAULT_FACTORY
                if value is _HAS_DEFAULT_FACTORY:
                    factory: Any = f.default_factory
                    value = factory()
            elif f.init:
                value = given.get(f.name, f.default)
            else:
                continue  # (the class attribute holds the default)
            assign(obj, f.name, value)
        if self.post_init:
            obj.__post_init__(*initvars)
        return True


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not _MISSING:
        return f.default
    if f.default_factory is not _MISSING:
        return _HAS_DEFAULT_FACTORY
    return inspect.Parameter.empty


def _compiled_init(
    cls: type,
    in_init: list[dataclasses.Field[Any]],
    std: list[dataclasses.Field[Any]],
    kw: list[dataclasses.Field[Any]],
    frozen: bool,
    self_name: str,
    post_init: bool,
) -> Callable[..., None]:
    """The ``__init__`` dataclasses would compile for ``cls``, compiled (0.2-0.4 ms a
    class: most of what a class cost, so only a class that is made pays it)."""
    local: dict[str, Any] = {f"_type_{f.name}": f.type for f in in_init}
    local.update(
        {
            "MISSING": _MISSING,
            "_HAS_DEFAULT_FACTORY": _HAS_DEFAULT_FACTORY,
            "__dataclass_builtins_object__": object,
            "_return_type": None,
        }
    )
    body = []
    for f in in_init:
        line = _field_init(f, frozen, local, self_name)
        if line:
            body.append(line)
    if post_init:
        initvars = ",".join(f.name for f in in_init if f._field_type is _FIELD_INITVAR)  # type: ignore[attr-defined]
        body.append(f"{self_name}.__post_init__({initvars})")
    args = [self_name, *(_init_param(f) for f in std)]
    if kw:
        args += ["*", *(_init_param(f) for f in kw)]
    text = "\n".join(f"  {b}" for b in body or ["pass"])
    src = (
        f"def __create_fn__({', '.join(local)}):\n"
        f" def __init__({','.join(args)})->_return_type:\n{text}\n"
        " return __init__"
    )
    module = sys.modules.get(cls.__module__)
    ns: dict[str, Any] = {}
    # (dont_inherit: this module's compiler flags must not reach the generated code)
    exec(compile(src, "<string>", "exec", dont_inherit=True), module.__dict__ if module else {}, ns)
    fn: Callable[..., None] = ns["__create_fn__"](**local)
    return fn


def _field_init(
    f: dataclasses.Field[Any], frozen: bool, local: dict[str, Any], self_name: str
) -> str | None:
    default_name = f"_dflt_{f.name}"
    if f.default_factory is not _MISSING:
        local[default_name] = f.default_factory
        if f.init:
            value = f"{default_name}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}"
        else:
            value = f"{default_name}()"
    elif f.init:
        if f.default is not _MISSING:
            local[default_name] = f.default
        value = f.name
    else:
        return None  # (the class attribute holds the default)
    if f._field_type is _FIELD_INITVAR:  # type: ignore[attr-defined]
        return None
    if frozen:
        return f"__dataclass_builtins_object__.__setattr__({self_name},{f.name!r},{value})"
    return f"{self_name}.{f.name}={value}"


def _init_param(f: dataclasses.Field[Any]) -> str:
    if f.default is not _MISSING:
        default = f"=_dflt_{f.name}"
    elif f.default_factory is not _MISSING:
        default = "=_HAS_DEFAULT_FACTORY"
    else:
        default = ""
    return f"{f.name}:_type_{f.name}{default}"


#: ``dataclasses.field`` itself, so a module takes both names from here
field = dataclasses.field

if TYPE_CHECKING:
    from dataclasses import dataclass as dataclass
else:
    dataclass = _dataclass
