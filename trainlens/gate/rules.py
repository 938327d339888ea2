"""Rules as code: ``[tool.trainlens.gate]`` parsed into :class:`GateRules`, every key checked.

The top-level ``select``, ``ignore``, ``severity`` and ``detectors`` of the config apply to
the gate too; the gate table adds the fail level, per-run-glob overrides, outcome checks,
baseline thresholds and acknowledgements (docs/gate.md). An unknown key anywhere is a
:class:`~trainlens.core.errors.ConfigError` that names it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping
from typing import Any

from trainlens.core.config import Config
from trainlens.core.dataclass import dataclass, field
from trainlens.core.errors import ConfigError, did_you_mean
from trainlens.core.findings import FAIL_LEVELS, Finding, Severity
from trainlens.gate.codes import GATE_CODES

GATE_KEYS: dict[str, str] = {
    "fail_on": "exit 1 at or above this severity: none, info, warning, error (default error)",
    "checks": "outcome limits every run must meet ([tool.trainlens.gate.checks])",
    "baseline": "regression thresholds against --baseline ([tool.trainlens.gate.baseline])",
    "reference": "golden curves every run is compared with ([tool.trainlens.gate.reference])",
    "overrides": "per-run-glob severity / select / ignore / detectors / checks",
    "acknowledge": "known incidents: runs glob + code + steps + reason",
}
CHECK_KEYS: dict[str, str] = {
    "val_metric": "the validation metric the checks read (default val/loss)",
    "max_final_val_loss": "the last logged validation loss must be at most this",
    "max_best_val_loss": "the best validation loss must be at most this",
    "target_val_loss": "the target quality: the first step where val loss <= this",
    "max_steps_to_target": "the target must be reached by this step",
    "max_tokens_to_target": "... within this many tokens",
    "max_seconds_to_target": "... within this many seconds of wall clock",
    "min_mfu": "mean MFU at least this fraction (needs n_params and gpu)",
    "no_restarts": "true: a restart (step went backwards) fails the run",
    "checkpoint_at_end": "true: the run must end with an intact checkpoint (its last 10 %)",
    "best_val_checkpoint": "true: an intact checkpoint near the best val step must be kept",
}
BASELINE_KEYS: dict[str, str] = {
    "path": "the baseline run or stored summary JSON (relative to the config file)",
    "max_throughput_drop": "fraction of the baseline's mean tokens/s (default 0.05)",
    "max_val_loss_increase": "absolute increase of best or final val loss (default 0.01)",
    "max_time_to_target_increase": "fraction of the baseline's time to target (default 0.10)",
    "max_memory_growth": "fraction of the baseline's peak memory (default 0.10)",
}
REFERENCE_KEYS: dict[str, str] = {
    "paths": "reference runs (seeds) or one golden file, relative to the config file",
    "metrics": "curves compared besides the defaults (train/loss, val/loss, grad_norm, lr, "
    "step_time, tokens_per_sec, mem/allocated, mem/reserved)",
    "rtol": "one reference's relative tolerance: a number, or a table metric -> number",
    "atol": "absolute tolerance: a number, or a table metric -> number",
    "window": "trailing smoothing window in steps: a table metric -> steps",
    "z": "band units a candidate must leave a seed band by (default 4)",
    "align": "'step' (default) or 'tokens' (runs of different batch sizes; all log tokens)",
}
OVERRIDE_KEYS: dict[str, str] = {
    "runs": "a glob (or list of globs) matched against run names",
    "severity": "per-code severity for these runs",
    "select": "only these codes / families / detectors for these runs",
    "ignore": "skip these codes / families / detectors for these runs",
    "detectors": "per-detector parameters for these runs",
    "checks": "outcome check values for these runs",
}
ACK_KEYS: dict[str, str] = {
    "runs": "a glob (or list of globs) matched against run names",
    "code": "the finding code acknowledged",
    "steps": "[first, last]: the finding must start within this step range (default any)",
    "reason": "why it is acceptable (shown in every output)",
}


def _check_keys(table: Mapping[str, Any], known: Mapping[str, str], where: str) -> None:
    for key in table:
        if key not in known:
            raise ConfigError(f"unknown key {key!r} in {where}{did_you_mean(key, known)}")


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a table")
    return dict(value)


def _number(
    value: Any, key: str, where: str, *, low: float = 0.0, high: float | None = None
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key!r} in {where} must be a number, not {value!r}")
    x = float(value)
    if not (x >= low and (high is None or x <= high)):
        bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise ConfigError(f"{key!r} in {where} must be {bound}, not {value!r}")
    return x


def _globs(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"'runs' in {where} must be a glob or a list of globs")
    return tuple(value)


def _codes(value: Any, key: str, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{key!r} in {where} must be a list of codes, families or detectors")
    return [v.upper() for v in value]


def matches(name: str, globs: tuple[str, ...]) -> bool:
    """A run name against globs (``*`` also crosses ``/``; case-sensitive)."""
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


@dataclass(frozen=True)
class Checks:
    """Outcome limits; None (or False) means the check is off."""

    val_metric: str = "val/loss"
    max_final_val_loss: float | None = None
    max_best_val_loss: float | None = None
    target_val_loss: float | None = None
    max_steps_to_target: int | None = None
    max_tokens_to_target: float | None = None
    max_seconds_to_target: float | None = None
    min_mfu: float | None = None
    no_restarts: bool = False
    checkpoint_at_end: bool = False
    best_val_checkpoint: bool = False


def parse_checks(raw: Any, where: str, base: Checks | None = None) -> Checks:
    table = _table(raw, where)
    _check_keys(table, CHECK_KEYS, where)
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "val_metric":
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"'val_metric' in {where} must be a metric name")
            values[key] = value.strip()
        elif key in ("no_restarts", "checkpoint_at_end", "best_val_checkpoint"):
            if not isinstance(value, bool):
                raise ConfigError(f"{key!r} in {where} must be true or false")
            values[key] = value
        elif key == "min_mfu":
            values[key] = _number(value, key, where, high=1.0)
        elif key == "max_steps_to_target":
            values[key] = int(_number(value, key, where, low=1))
        elif key in ("max_final_val_loss", "max_best_val_loss", "target_val_loss"):
            values[key] = _number(value, key, where, low=-float("inf"))
        else:
            values[key] = _number(value, key, where)
    checks = dataclasses.replace(base or Checks(), **values)
    budgets = ("max_steps_to_target", "max_tokens_to_target", "max_seconds_to_target")
    if checks.target_val_loss is None:
        for key in budgets:
            if getattr(checks, key) is not None:
                raise ConfigError(f"{key!r} in {where} needs 'target_val_loss'")
    return checks


@dataclass(frozen=True)
class BaselineLimits:
    path: str | None = None
    max_throughput_drop: float = 0.05
    max_val_loss_increase: float = 0.01
    max_time_to_target_increase: float = 0.10
    max_memory_growth: float = 0.10


def parse_baseline(raw: Any, where: str, config_dir: str | None) -> BaselineLimits:
    table = _table(raw, where)
    _check_keys(table, BASELINE_KEYS, where)
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "path":
            if not isinstance(value, str) or not value:
                raise ConfigError(f"'path' in {where} must be a path")
            from pathlib import Path

            p = Path(value)
            if not p.is_absolute() and config_dir is not None:
                p = Path(config_dir) / p
            values[key] = str(p)
        elif key == "max_val_loss_increase":
            values[key] = _number(value, key, where)
        else:
            values[key] = _number(value, key, where, high=10.0)
    return BaselineLimits(**values)


@dataclass(frozen=True)
class ReferenceRules:
    paths: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    #: metric -> MetricRule field -> value ("*": every metric)
    tuning: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    z: float | None = None
    align: str = "step"

    def overrides(self) -> dict[str, dict[str, float]]:
        from trainlens.gate.golden import METRICS

        out: dict[str, dict[str, float]] = {}
        for metric, fields in self.tuning:
            targets = [*METRICS, *self.metrics] if metric == "*" else [metric]
            for m in targets:
                out.setdefault(m, {}).update(dict(fields))
        return out


def tolerance_table(raw: Any, key: str, where: str) -> dict[str, float]:
    """``0.05`` (every metric) or ``{"train/loss" = 0.05}``; also ``metric=value``."""
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return {"*": _number(raw, key, where, high=1e12)}
    table = _table(raw, f"{key!r} in {where}")
    return {str(m): _number(v, f"{key}.{m}", where, high=1e12) for m, v in table.items()}


def parse_reference(raw: Any, where: str, config_dir: str | None) -> ReferenceRules:
    table = _table(raw, where)
    _check_keys(table, REFERENCE_KEYS, where)
    paths: list[str] = []
    raw_paths = table.get("paths", [])
    if isinstance(raw_paths, str):
        raw_paths = [raw_paths]
    if not isinstance(raw_paths, list) or not all(isinstance(x, str) and x for x in raw_paths):
        raise ConfigError(f"'paths' in {where} must be a path or a list of paths")
    from pathlib import Path

    for value in raw_paths:
        p = Path(value)
        paths.append(str(Path(config_dir) / p if not p.is_absolute() and config_dir else p))
    metrics = table.get("metrics", [])
    if not isinstance(metrics, list) or not all(isinstance(m, str) and m for m in metrics):
        raise ConfigError(f"'metrics' in {where} must be a list of metric names")
    tuning: dict[str, dict[str, float]] = {}
    for key in ("rtol", "atol", "window"):
        if key in table:
            for m, v in tolerance_table(table[key], key, where).items():
                tuning.setdefault(m, {})[key] = v
    z = _number(table["z"], "z", where, high=1e3) if "z" in table else None
    align = table.get("align", "step")
    if align not in ("step", "tokens"):
        raise ConfigError(f"'align' in {where} must be 'step' or 'tokens', not {align!r}")
    return ReferenceRules(
        align=align,
        paths=tuple(paths),
        metrics=tuple(metrics),
        tuning=tuple((m, tuple(sorted(f.items()))) for m, f in tuning.items()),
        z=z,
    )


@dataclass(frozen=True)
class Override:
    runs: tuple[str, ...]
    severity: dict[str, str] = field(default_factory=dict)
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    detectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Acknowledgement:
    """A known incident: findings of ``code`` in matching runs starting within ``steps``."""

    index: int
    runs: tuple[str, ...]
    code: str
    reason: str
    steps: tuple[int, int] | None = None

    def covers(self, run: str, f: Finding) -> bool:
        if f.code != self.code or not matches(run, self.runs):
            return False
        if self.steps is None:
            return True
        return f.step_start is not None and self.steps[0] <= f.step_start <= self.steps[1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": list(self.runs),
            "code": self.code,
            "steps": list(self.steps) if self.steps else None,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class GateRules:
    fail_on: str | None = None
    checks: Checks = field(default_factory=Checks)
    baseline: BaselineLimits = field(default_factory=BaselineLimits)
    reference: ReferenceRules = field(default_factory=ReferenceRules)
    overrides: tuple[Override, ...] = ()
    acknowledge: tuple[Acknowledgement, ...] = ()

    def for_run(self, name: str, cfg: Config) -> tuple[Config, Checks]:
        """The config and checks one run is judged by: overrides whose glob matches, in
        order (later ones win for the same key)."""
        checks = self.checks
        for ov in self.overrides:
            if not matches(name, ov.runs):
                continue
            detectors = {k: dict(v) for k, v in cfg.detectors.items()}
            for det, params in ov.detectors.items():
                detectors[det] = {**detectors.get(det, {}), **params}
            cfg = dataclasses.replace(
                cfg,
                severity={**cfg.severity, **ov.severity},
                select=list(ov.select) if ov.select is not None else list(cfg.select),
                ignore=[*cfg.ignore, *ov.ignore],
                detectors=detectors,
            )
            if ov.checks:
                checks = dataclasses.replace(checks, **ov.checks)
        return cfg, checks


def known_codes() -> dict[str, str]:
    """Every code a finding can carry: the detectors' and the gate's."""
    from trainlens.detectors import available, load

    codes: dict[str, str] = {}
    for name in available():
        codes.update(load(name).CODES)
    codes.update(GATE_CODES)
    return codes


def _severity(raw: Any, where: str, codes: Mapping[str, str]) -> dict[str, str]:
    table = _table(raw, where)
    out: dict[str, str] = {}
    for code, sev in table.items():
        if code.upper() not in codes:
            raise ConfigError(
                f"unknown finding code {code!r} in {where}{did_you_mean(code.upper(), codes)}"
            )
        if not isinstance(sev, str):
            raise ConfigError(f"severity of {code!r} in {where} must be info, warning or error")
        out[code.upper()] = Severity.parse(sev).value
    return out


def validate_detectors(cfg: Config) -> None:
    """The registry's checks of detector names and parameters, with gate codes allowed in
    ``severity`` (the registry only knows detector codes)."""
    from trainlens.detectors import validate_config

    codes = known_codes()
    _severity(cfg.severity, "[tool.trainlens.severity]", codes)
    detector_only = {k: v for k, v in cfg.severity.items() if k.upper() not in GATE_CODES}
    validate_config(dataclasses.replace(cfg, severity=detector_only))


def parse_rules(cfg: Config) -> GateRules:
    """Validate ``cfg.gate`` (and the detector settings the gate uses) into GateRules."""
    origin = f"{cfg.path}: " if cfg.path else ""
    table = dict(cfg.gate)
    where = "[tool.trainlens.gate]"
    for key in table:
        if key not in GATE_KEYS:
            hint = did_you_mean(key, GATE_KEYS)
            raise ConfigError(f"{origin}unknown key {key!r} in {where}{hint}")
    codes = known_codes()
    try:
        validate_detectors(cfg)
        fail_on = table.get("fail_on")
        if fail_on is not None:
            if not isinstance(fail_on, str) or fail_on.lower() not in FAIL_LEVELS:
                raise ConfigError(
                    f"'fail_on' in {where} must be one of {', '.join(FAIL_LEVELS)}, not {fail_on!r}"
                )
            fail_on = fail_on.lower()
        checks = parse_checks(table.get("checks", {}), f"{where[:-1]}.checks]")
        config_dir = str(cfg.path.parent) if cfg.path else None
        baseline = parse_baseline(table.get("baseline", {}), f"{where[:-1]}.baseline]", config_dir)
        reference = parse_reference(
            table.get("reference", {}), f"{where[:-1]}.reference]", config_dir
        )

        overrides: list[Override] = []
        raw_overrides = table.get("overrides", [])
        if not isinstance(raw_overrides, list):
            raise ConfigError(f"'overrides' in {where} must be an array of tables")
        for i, raw in enumerate(raw_overrides, 1):
            ow = f"{where[:-1]}.overrides] entry {i}"
            t = _table(raw, ow)
            _check_keys(t, OVERRIDE_KEYS, ow)
            if "runs" not in t:
                raise ConfigError(f"{ow} needs 'runs' (a glob of run names)")
            detectors = _table(t.get("detectors", {}), f"'detectors' in {ow}")
            for det, params in detectors.items():
                detectors[det] = _table(params, f"'detectors.{det}' in {ow}")
            ov_checks = parse_checks(t.get("checks", {}), f"'checks' in {ow}", checks)
            changed = {k: getattr(ov_checks, k) for k in _table(t.get("checks", {}), ow)}
            ov = Override(
                runs=_globs(t["runs"], ow),
                severity=_severity(t.get("severity", {}), f"'severity' in {ow}", codes),
                select=_codes(t["select"], "select", ow) if "select" in t else None,
                ignore=_codes(t.get("ignore", []), "ignore", ow),
                detectors=detectors,
                checks=changed,
            )
            # the detector registry checks names and parameters of the merged config
            merged = dataclasses.replace(
                cfg,
                detectors={**cfg.detectors, **ov.detectors},
                severity={**cfg.severity, **ov.severity},
                select=list(ov.select) if ov.select is not None else list(cfg.select),
                ignore=[*cfg.ignore, *ov.ignore],
            )
            try:
                validate_detectors(merged)
            except ConfigError as exc:
                raise ConfigError(f"{ow}: {exc}") from None
            overrides.append(ov)

        acks: list[Acknowledgement] = []
        raw_acks = table.get("acknowledge", [])
        if not isinstance(raw_acks, list):
            raise ConfigError(f"'acknowledge' in {where} must be an array of tables")
        for i, raw in enumerate(raw_acks, 1):
            aw = f"{where[:-1]}.acknowledge] entry {i}"
            t = _table(raw, aw)
            _check_keys(t, ACK_KEYS, aw)
            for need in ("runs", "code", "reason"):
                if need not in t:
                    raise ConfigError(f"{aw} needs {need!r}")
            code = t["code"]
            if not isinstance(code, str) or code.upper() not in codes:
                raise ConfigError(f"unknown finding code {code!r} in {aw}")
            reason = t["reason"]
            if not isinstance(reason, str) or not reason.strip():
                raise ConfigError(f"'reason' in {aw} must say why the finding is acceptable")
            steps = t.get("steps")
            span: tuple[int, int] | None = None
            if steps is not None:
                if isinstance(steps, int) and not isinstance(steps, bool):
                    steps = [steps, steps]
                if (
                    not isinstance(steps, list)
                    or len(steps) != 2
                    or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps)
                    or steps[0] > steps[1]
                ):
                    raise ConfigError(f"'steps' in {aw} must be [first, last] with first <= last")
                span = (int(steps[0]), int(steps[1]))
            acks.append(
                Acknowledgement(
                    index=i - 1,
                    runs=_globs(t["runs"], aw),
                    code=code.upper(),
                    reason=reason.strip(),
                    steps=span,
                )
            )
    except ConfigError as exc:
        if origin and not str(exc).startswith(origin):
            raise ConfigError(f"{origin}{exc}") from None
        raise
    return GateRules(
        fail_on=fail_on,
        checks=checks,
        baseline=baseline,
        reference=reference,
        overrides=tuple(overrides),
        acknowledge=tuple(acks),
    )
