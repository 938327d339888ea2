"""Configuration: ``[tool.trainlens]`` in pyproject.toml or a ``trainlens.toml``.

Precedence: defaults < file < explicit flags. Unknown keys are an error that names the
key (and, where it is close to a known one, suggests it). Detector-specific keys are
checked by the detector registry, which knows each detector's parameters.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from trainlens.core.dataclass import dataclass, field
from trainlens.core.errors import ConfigError, did_you_mean
from trainlens.core.paths import special_kind

TOP_KEYS = {
    "select": "detector codes or families to run (default: all)",
    "ignore": "detector codes or families to skip",
    "severity": "per-code severity overrides, e.g. {GRAD002 = 'warning'}",
    "detectors": "per-detector parameters, e.g. [tool.trainlens.detectors.grad_spikes]",
    "aliases": "extra metric aliases: {'my/loss' = 'train/loss'}",
    "schedule": "the declared LR schedule (shape, warmup_steps, peak_lr, min_lr, ...)",
    "model": "model and hardware: n_params, gpu, n_gpus, dtype, layers, heads, ...",
    "fail_on": "analyze: exit 1 at or above this severity (info/warning/error/none)",
    "gate": "trainlens gate rules ([tool.trainlens.gate])",
    "report": "report options (smoothing, ...)",
    "checkpoints": "the run's checkpoint folder (default: found beside the run); false: none",
    "watch": "trainlens watch settings ([tool.trainlens.watch]: poll, notify, exit_on, ...)",
    "perplexity": (
        "summary perplexity: 'auto' (only for a per-token language-model loss), true or false"
    ),
}

# a [tool.trainlens] / [tool.trainlens.x] header or a dotted tool.trainlens key, found
# in a pyproject.toml that does not parse
_TOOL_TABLE = re.compile(r"^\s*\[*\s*tool\s*\.\s*[\"']?trainlens\b", re.MULTILINE)

PERPLEXITY_SETTINGS: tuple[bool | str, ...] = ("auto", True, False)


@dataclass
class Config:
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    severity: dict[str, str] = field(default_factory=dict)
    detectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    schedule: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    #: model keys a command-line flag set, and the flag (``{"dtype": "--dtype"}``): the
    #: rest of ``model`` came from the config file
    model_flags: dict[str, str] = field(default_factory=dict)
    fail_on: str | None = None
    gate: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    watch: dict[str, Any] = field(default_factory=dict)
    checkpoints: str | bool | None = None  # None: look beside the run
    perplexity: bool | str = "auto"
    path: Path | None = None

    def apply_flags(self, select: list[str] | None, ignore: list[str] | None) -> None:
        """``--select`` replaces the configured list; ``--ignore`` adds to it (what the
        config ignores on purpose stays ignored), in ``analyze`` and ``gate`` alike."""
        if select:
            self.select = [s.upper() for s in select]
        if ignore:
            self.ignore = [
                *self.ignore,
                *(s.upper() for s in ignore if s.upper() not in self.ignore),
            ]


def parse_config(table: dict[str, Any], *, origin: str = "config") -> Config:
    cfg = Config()
    for key, value in table.items():
        if key not in TOP_KEYS:
            raise ConfigError(
                f"{origin}: unknown key {key!r} in [tool.trainlens]{did_you_mean(key, TOP_KEYS)}"
            )
        if key in {"select", "ignore"}:
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{origin}: {key!r} must be a list of detector codes")
            setattr(cfg, key, [v.upper() for v in value])
        elif key == "fail_on":
            if not isinstance(value, str):
                raise ConfigError(f"{origin}: 'fail_on' must be a string")
            cfg.fail_on = value
        elif key == "checkpoints":
            if value is True or not isinstance(value, (str, bool)):
                raise ConfigError(
                    f"{origin}: 'checkpoints' must be a folder or false, not {value!r}"
                )
            cfg.checkpoints = value
        elif key == "perplexity":
            if isinstance(value, str):
                value = value.strip().lower()
            if not any(
                value is v or (isinstance(v, str) and value == v) for v in PERPLEXITY_SETTINGS
            ):
                raise ConfigError(
                    f"{origin}: 'perplexity' must be true, false or \"auto\", not {value!r}"
                )
            cfg.perplexity = value
        else:
            if not isinstance(value, dict):
                raise ConfigError(f"{origin}: {key!r} must be a table")
            setattr(cfg, key, dict(value))
    return cfg


def find_config_file(start: Path | None = None) -> Path | None:
    """trainlens.toml, or a pyproject.toml with [tool.trainlens], in ``start`` or above."""
    import tomllib  # imported here: only reading a file needs it

    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "trainlens.toml"
        if candidate.is_file():
            return candidate
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            try:
                text = pyproject.read_text("utf-8")
            except UnicodeDecodeError:
                raise ConfigError(f"{pyproject}: not UTF-8 text") from None
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                # A pyproject that names trainlens but does not parse is the config in use,
                # broken: skipping it dropped its fail_on and a gate passed that should fail.
                if _TOOL_TABLE.search(text):
                    raise ConfigError(f"{pyproject}: not valid TOML ({exc})") from None
                continue
            if "trainlens" in data.get("tool", {}):
                return pyproject
    return None


def load_config(path: Path | str | None = None, *, search: bool = True) -> Config:
    """Load the config at ``path``, or the nearest one from the working directory."""
    if path is None:
        if not search:
            return Config()
        found = find_config_file()
        if found is None:
            return Config()
        path = found
    path = Path(path)
    kind = special_kind(path)
    if kind is not None:  # (is_file is False for a FIFO: it is there, but never a config)
        raise ConfigError(f"{path} is {kind}, not a config file trainlens can read")
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    import tomllib

    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("trainlens", {})
    else:
        # trainlens.toml: top-level keys, or a [tool.trainlens] table
        table = data.get("tool", {}).get("trainlens", data)
    cfg = parse_config(table, origin=str(path))
    cfg.path = path
    return cfg
