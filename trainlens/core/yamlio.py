"""YAML, read safely and within bounds: the one place trainlens parses YAML.

Every YAML file trainlens reads (MLflow's ``meta.yaml``, a W&B ``config.yaml``, Hydra's
``.hydra/config.yaml``, Lightning's ``hparams.yaml``) goes through :func:`read_yaml`:

- PyYAML's safe loader (the C one when PyYAML was built with libyaml): no tag ever
  builds an object. Tags it does not know (``!!python/tuple``, ``!!python/object:…``,
  which Lightning writes into ``hparams.yaml``, or any ``!custom`` tag) are read as the
  plain list, mapping or string under them instead of failing the whole file.
- Bounded: a file over :data:`MAX_BYTES` is refused unread; the node graph is composed
  first (aliases stay shared references there, so composing is linear in the file) and
  refused when, with every alias expanded, it would hold more than :data:`MAX_NODES`
  nodes or nest deeper than :data:`MAX_DEPTH`, or refers to itself. PyYAML's
  constructor shares aliased objects, but everything downstream (``str``, JSON output,
  walking a config for keys) expands them: a 595-byte "billion laughs" ``meta.yaml``
  grew past 1 GB that way. Measured: that file is refused in under a millisecond.

A refusal or a syntax error is a :class:`RefusedFile` whose message is one sentence
naming the file; callers turn it into a data-quality note.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from trainlens.core.errors import UnreadableInputError

if TYPE_CHECKING:  # imported where a file is parsed: PyYAML's import is ~10 ms of
    # start-up, and most runs have no YAML file beside them (issue 28)
    import yaml

#: run configs and MLflow metadata are kilobytes; past that, reading costs seconds
#: (measured: a 440 KB config takes about 1 s to compose, check and construct)
MAX_BYTES = 2 << 20
#: nodes once every alias is expanded: a config with a million values is not a config,
#: and walking one costs about a second
MAX_NODES = 1_000_000
#: nesting; real configs nest under 10 levels, and PyYAML's constructor recurses per level
MAX_DEPTH = 100


class RefusedFile(UnreadableInputError):
    """A config or metadata file trainlens would not (or could not) read: too big, not
    valid YAML/JSON, an alias bomb. The message is one sentence naming the file."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _plain(loader: Any, node: yaml.Node) -> Iterator[Any]:
    # a generator, as SafeConstructor's own collection constructors are: the object is
    # handed out before its children are filled, so self-references stay possible
    import yaml

    if isinstance(node, yaml.MappingNode):
        yield from loader.construct_yaml_map(node)
    elif isinstance(node, yaml.SequenceNode):
        yield from loader.construct_yaml_seq(node)
    else:
        yield loader.construct_scalar(node)


def make_loader(base: type) -> type:
    """``base`` (a safe loader) with unknown tags read as the plain data under them; a
    subclass, so PyYAML's own SafeLoader is left as it is."""
    loader: Any = type("TrainlensYamlLoader", (base,), {})
    loader.add_constructor(None, _plain)
    return cast(type, loader)


# the C loader when PyYAML was built with libyaml (measured 3x faster on a 440 KB
# config); never a loader that builds objects. Made on first use (:func:`_loader`)
_Loader: type | None = None


def _loader() -> type:
    global _Loader
    if _Loader is None:
        import yaml

        _Loader = make_loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return _Loader


def _measure(root: yaml.Node) -> str | None:
    """Why the node graph is too big once aliases are expanded (None when it is fine).

    Sizes and heights are memoized per node, so this costs one visit per node of the
    composed graph however many times an alias repeats it."""
    import yaml

    kinds = (yaml.MappingNode, yaml.SequenceNode)
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node, *kinds)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            height[key] = 1 + max((height[id(k)] for k in kids), default=0)
            open_.discard(key)
            if size[key] > MAX_NODES:
                return f"more than {MAX_NODES:,} values once its aliases are expanded"
            if height[key] > MAX_DEPTH:
                return f"nested more than {MAX_DEPTH} levels deep"
            continue
        if key in size:
            continue
        if key in open_:
            return "an alias refers to the node that contains it"
        open_.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node, *kinds) if id(k) not in size)
    return None


def _children(
    node: yaml.Node, mapping: type[yaml.MappingNode], sequence: type[yaml.SequenceNode]
) -> list[yaml.Node]:
    if isinstance(node, mapping):
        return [n for pair in node.value for n in pair]
    if isinstance(node, sequence):
        return list(node.value)
    return []


def parse_yaml(text: str, origin: str) -> Any:
    """One YAML document as plain Python data (None for an empty document)."""
    import yaml

    try:
        return _parse(text, origin)
    except yaml.MarkedYAMLError as exc:
        where = f" (line {exc.problem_mark.line + 1})" if exc.problem_mark else ""
        why = " ".join(str(exc.problem or exc).split())
        raise RefusedFile(origin, f"not valid YAML{where}: {why}") from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        # ReaderError: a control character (the pure-Python loader checks on creation);
        # ValueError: a timestamp like 2024-13-45, an int past Python's digit limit;
        # TypeError: a mapping used as a key; RecursionError: the pure-Python composer
        why = " ".join(str(exc).split())
        raise RefusedFile(origin, f"not read: {type(exc).__name__}: {why}") from None


def _parse(text: str, origin: str) -> Any:
    loader = _loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        why = _measure(node)
        if why is not None:
            raise RefusedFile(origin, f"not read: {why}")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_bounded(path: str | Path) -> str:
    """The text of a small file (a config, a meta.yaml), refused past :data:`MAX_BYTES`."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise RefusedFile(str(p), f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise RefusedFile(str(p), f"not read: larger than {MAX_BYTES >> 20} MiB")
    return data.decode("utf-8", errors="replace")


def read_yaml(path: str | Path) -> Any:
    """The YAML document in ``path`` as plain Python data, within the bounds above."""
    return parse_yaml(read_bounded(path), str(path))


__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "RefusedFile",
    "parse_yaml",
    "read_bounded",
    "read_yaml",
]
