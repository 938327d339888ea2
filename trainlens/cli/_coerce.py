"""Argument values of plain types converted without pydantic.

typer 0.2x converts every parameter's value through a pydantic ``TypeAdapter`` built on
the parameter's first use: importing pydantic and building the adapters of ``analyze``'s
22 parameters cost about 60 ms of CPU on every command (measured on this project's
machine, issue 28), more than reading a 100-step run. trainlens' commands take only
``str``, ``int``, ``float``, ``bool``, ``Path`` and lists of them, without bounds or
parsers; for those the value is converted here, the way typer's adapters convert it
(tests/test_cli_startup.py compares the two on the values below and on every command's
parameters). Anything else — another type, a bound, a parser, a value these do not take
(``--gpus abc``, ``1_000``) — goes to typer's own coercion, so its results and its error
messages stay typer's.

Where typer has no such internals (older or later releases) nothing is changed."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args, get_origin

#: what int() and float() read exactly as pydantic's lax mode does; anything else (spaces,
#: underscores, other digits, inf/nan words) is left to typer's own coercion
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class Unplain(Exception):
    """The value is not one this module converts: typer's own coercion takes it."""


def _to_str(value: Any) -> str:
    if type(value) is not str:
        raise Unplain
    return value


def _to_bool(value: Any) -> bool:
    if type(value) is not bool:
        raise Unplain  # (a flag's text from an environment variable: typer reads it)
    return value


def _to_int(value: Any) -> int:
    if type(value) is int:
        return value
    if type(value) is not str or _INT.fullmatch(value) is None:
        raise Unplain
    try:
        return int(value)
    except ValueError:  # (more digits than int() takes: typer says so)
        raise Unplain from None


def _to_float(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is not str or _FLOAT.fullmatch(value) is None:
        raise Unplain
    out = float(value)
    if not math.isfinite(out):
        raise Unplain
    return out


def leaf_converter(annotation: Any, info: Any) -> Callable[..., Any] | None:
    """How a value of ``annotation`` (one item, not a list) is converted here, or None
    when typer's own coercion must do it. A Path's converter takes ``(value, param, ctx)``:
    typer's checks of the path (``exists``, ``dir_okay``, …) run on it as typer runs them."""
    if getattr(info, "parser", None) is not None:
        return None
    if annotation is str:
        return _to_str
    if annotation is bool:
        return _to_bool
    bounded = info.min is not None or info.max is not None or info.clamp
    if annotation is int and not bounded:
        return _to_int
    if annotation is float and not bounded:
        return _to_float
    if isinstance(annotation, type) and issubclass(annotation, Path) and info.path_type is None:
        from typer._param_types import coerce_cli_path

        def to_path(value: Any, param: Any, ctx: Any) -> Any:
            if type(value) is not str:
                raise Unplain
            return coerce_cli_path(
                annotation(value), info, path_type=annotation, param=param, ctx=ctx
            )

        to_path.takes_param = True  # type: ignore[attr-defined]
        return to_path
    return None


class PlainParam:
    """typer's runtime-parameter contract (``coerce(value, param, ctx)``) for a plain type;
    ``fallback`` builds typer's own, used for any value not converted here."""

    def __init__(
        self, convert: Callable[..., Any], is_list: bool, fallback: Callable[[], Any]
    ) -> None:
        self.convert = convert
        self.is_list = is_list
        self.fallback = fallback
        self.with_param = getattr(convert, "takes_param", False)

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:  # (typer's RuntimeParam.coerce, which needs no adapter)
            return () if multi else None
        try:
            if self.is_list:
                if not isinstance(value, (list, tuple)):
                    raise Unplain
                return [self._one(v, param, ctx) for v in value]
            if multi:
                raise Unplain
            return self._one(value, param, ctx)
        except Unplain:
            return self.fallback().coerce(value, param=param, ctx=ctx)

    def _one(self, value: Any, param: Any, ctx: Any) -> Any:
        return self.convert(value, param, ctx) if self.with_param else self.convert(value)


def plain_param(descriptor: Any, fallback: Callable[[], Any]) -> PlainParam | None:
    """A PlainParam for a parameter typer described, or None (typer's own then)."""
    if getattr(descriptor, "file_annotation", None) is not None:
        return None
    annotation, info = descriptor.annotation, descriptor.parameter_info
    is_list = get_origin(annotation) is list
    if is_list:
        args = get_args(annotation)
        if len(args) != 1:
            return None
        annotation = args[0]
    elif get_origin(annotation) is not None:
        return None
    convert = leaf_converter(annotation, info)
    return None if convert is None else PlainParam(convert, is_list, fallback)


def install(core: Any) -> bool:
    """Route typer's parameters of plain types through :class:`PlainParam`; False (and
    nothing changed) when this typer has no ``_TyperParameter.get_runtime_param``."""
    param_cls = getattr(core, "_TyperParameter", None)
    original = getattr(param_cls, "get_runtime_param", None)
    if param_cls is None or original is None or getattr(original, "plain", False):
        return False

    def get_runtime_param(self: Any) -> Any:
        cached = self.__dict__.get("_trainlens_plain")
        if cached is None:
            descriptor = getattr(self, "type_descriptor", None)
            plain = None if descriptor is None else plain_param(descriptor, lambda: original(self))
            cached = self.__dict__["_trainlens_plain"] = plain or False
        return cached or original(self)

    get_runtime_param.plain = True  # type: ignore[attr-defined]
    param_cls.get_runtime_param = get_runtime_param
    return True
