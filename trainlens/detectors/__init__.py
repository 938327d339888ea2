"""The detector registry: one module per detector, run over a Run, configured by Config.

A detector is a public module of this package (its name does not start with ``_``; ``base``
is the shared contract, not a detector) that defines:

- ``CODES``: ``{code: name}`` of the findings it can emit (family prefix + number);
- ``Params``: a frozen dataclass of its thresholds with documented defaults, each field
  preceded by a ``#:`` comment (docs/gen_detectors.py puts them in its docs page);
- ``detect(run, params, ctx) -> list[Finding]``: a pure function; it raises
  :class:`~trainlens.detectors.base.Skip` with a reason when the run lacks its metrics;
- a module docstring with the sections What it flags / Why it matters / Default
  thresholds / Known false positives / Example (tests check they are there).

Adding a detector is adding such a module (and its cases file under
tests/detector_cases/); nothing else lists detectors.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import re
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from trainlens.core.dataclass import dataclass, field
from trainlens.core.errors import ConfigError, did_you_mean
from trainlens.core.findings import Finding, Severity
from trainlens.core.run import Run
from trainlens.detectors.base import Context, Skip

if TYPE_CHECKING:  # imported where used: importing a detector's helpers needs no TOML
    from trainlens.core.config import Config

DOC_SECTIONS = (
    "What it flags",
    "Why it matters",
    "Default thresholds",
    "Known false positives",
    "Example",
)


#: the module attributes that make a public module of this package a detector
CONTRACT = ("CODES", "Params", "detect")

#: the finding-code families (DESIGN.md), in the order detectors are listed: non-finite
#: values first (they make every later number meaningless), then the optimizer's signals
#: (LR, gradients), the loss, then system and data signals. Detectors are listed by the
#: family of their first code, then its number; findings at one step and severity, and
#: the "skipped" lines, keep that order. A new family goes here (a test checks every code
#: has its family listed).
FAMILIES = (
    "NAN",
    "LR",
    "GRAD",
    "LOSS",
    "ENT",
    "TPUT",
    "MEM",
    "VAL",
    "TENSOR",
    "DATA",
    "MFU",
    "CKPT",
    "REF",  # the gate's golden-curve checks (trainlens/gate/reference.py)
)

_CODE = re.compile(r"([A-Z]+)(\d{3})")


def family(code: str) -> str:
    """``GRAD`` for ``GRAD001``; ValueError for a code not spelled family + 3 digits."""
    m = _CODE.fullmatch(code)
    if m is None:
        raise ValueError(f"finding code {code!r} is not a family prefix and 3 digits")
    return m.group(1)


def listing_key(codes: dict[str, str]) -> tuple[int, str]:
    """Where a detector with these codes is listed among the others (its first code)."""
    first = next(iter(codes))
    fam = family(first)
    return (FAMILIES.index(fam) if fam in FAMILIES else len(FAMILIES), first)


def load(name: str) -> ModuleType:
    return importlib.import_module(f"trainlens.detectors.{name}")


def module_names() -> list[str]:
    """The public module names of this package (a directory listing; nothing imported)."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules(__path__)
        if not m.name.startswith("_") and m.name != "base"
    )


def is_detector(module: ModuleType) -> bool:
    return all(hasattr(module, attr) for attr in CONTRACT)


@functools.cache
def _discovered() -> tuple[str, ...]:
    mods = {name: load(name) for name in module_names()}
    found = [name for name, mod in mods.items() if is_detector(mod)]
    return tuple(sorted(found, key=lambda n: (*listing_key(mods[n].CODES), n)))


def available() -> list[str]:
    """The detectors, in the order their findings are listed (:func:`listing_key`).

    Discovered once per process: every public module of this package that meets the
    contract. ``analyze`` imports every detector anyway to run it, so discovering by
    importing costs no start-up time (measured in the issue-14 notes)."""
    return list(_discovered())


@dataclass
class DetectionResult:
    findings: list[Finding] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # detector -> reason
    ran: list[str] = field(default_factory=list)


def _code_kept(code: str, detector: str, cfg: Config) -> bool:
    """select / ignore take codes (GRAD001), families (GRAD) or detector names."""

    def match(pattern: str) -> bool:
        p = pattern.upper()
        return code.startswith(p) or p == detector.upper()

    if cfg.ignore and any(match(p) for p in cfg.ignore):
        return False
    if cfg.select:
        return any(match(p) for p in cfg.select)
    return True


def is_selected(detector: str, codes: dict[str, str], cfg: Config) -> bool:
    """Whether select/ignore leave any of this detector's codes to report."""
    return any(_code_kept(code, detector, cfg) for code in codes)


def make_params(name: str, module: ModuleType, overrides: dict[str, Any]) -> Any:
    if not overrides:
        return _default_params(module.Params)
    params_cls = module.Params
    known = {f.name: f for f in dataclasses.fields(params_cls)}
    for key in overrides:
        if key not in known:
            hint = did_you_mean(key, known)
            raise ConfigError(f"unknown parameter {key!r} for detector {name!r}{hint}")
    try:
        return dataclasses.replace(params_cls(), **overrides)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad parameters for detector {name!r}: {exc}") from None


@functools.cache
def _default_params(params_cls: type) -> Any:
    """A detector's default parameters, made once per process: each ``Params`` is a frozen
    dataclass of numbers, strings and tuples, so one instance serves every run (a wide
    one took ~10 µs to build, twice, per detector and run)."""
    return params_cls()


def validate_config(cfg: Config) -> None:
    """Check detector names, parameters and severity codes in the config."""
    from trainlens.core.codes import GATE_CODES

    names = available()
    from trainlens.checkpoints.findings import CODES as CKPT_CODES

    all_codes: set[str] = set(GATE_CODES) | set(CKPT_CODES)
    for name in names:
        all_codes.update(load(name).CODES)
    for name, overrides in cfg.detectors.items():
        if name not in names:
            hint = did_you_mean(name, names)
            raise ConfigError(f"unknown detector {name!r} in [tool.trainlens.detectors]{hint}")
        make_params(name, load(name), overrides)
    for code, sev in cfg.severity.items():
        if code.upper() not in all_codes:
            hint = did_you_mean(code.upper(), all_codes)
            raise ConfigError(f"unknown finding code {code!r} in [tool.trainlens.severity]{hint}")
        Severity.parse(sev)
    check_selectors(cfg.select, "select", all_codes, names)
    check_selectors(cfg.ignore, "ignore", all_codes, names)


def check_selectors(
    entries: list[str], what: str, codes: set[str], detectors: Iterable[str] = ()
) -> None:
    """Each ``select`` / ``ignore`` entry names a finding code (``GRAD001``), a family
    (``GRAD``) or a detector (``grad_spikes``). Entries match codes by prefix, so a typo
    (``GRAD0001``) matched nothing and ``--select GRAD0001 --fail-on warning`` passed every
    run: an entry that names none of these is the user's mistake, never a quiet pass."""
    families = {code.rstrip("0123456789") for code in codes}
    known = codes | families | {d.upper() for d in detectors}
    for entry in entries:
        if entry.upper() in known:
            continue
        hint = did_you_mean(entry.upper(), sorted(known))
        raise ConfigError(
            f"{what}: {entry!r} is not a finding code, a family or a detector "
            f"(e.g. GRAD001, GRAD, grad_spikes){hint}"
        )


@dataclass
class _Outcome:
    """A detector's findings, or the Skip it raised, kept to be reported in its turn."""

    findings: list[Finding]
    skip: Skip | None = None

    def found(self) -> list[Finding]:
        if self.skip is not None:
            raise self.skip
        return self.findings


def _align_with_schedule(run: Run, cfg: Config, ctx: Context) -> _Outcome:
    """Run the LR detector and set ``ctx.step_offset`` from the offset it pinned."""
    module = load("lr_schedule")
    params = make_params("lr_schedule", module, cfg.detectors.get("lr_schedule", {}))
    try:
        found = module.detect(run, params, ctx)
    except Skip as why:
        return _Outcome([], why)
    for f in found:
        if f.code == module.OFFSET_CODE and f.evidence.get("aligned", True):
            ctx.step_offset = int(f.evidence.get("step_offset") or 0)
    return _Outcome(found)


def _one_finding_per_rise(findings: list[Finding], keep: set[str]) -> list[Finding]:
    """A loss spike that never came back (LOSS001) starting inside a rise that stayed up to
    the end (LOSS003) is that rise seen by another detector: one finding, the LOSS003, at
    the worse of the two severities (unless the config sets LOSS003's; ``keep``), with the
    spike's step in its evidence. Two findings of one event read as two problems."""
    rises = [f for f in findings if f.code == "LOSS003" and not f.evidence.get("recovered", True)]
    if not rises:
        return findings
    out: list[Finding] = []
    merged: dict[int, Finding] = {id(r): r for r in rises}
    for f in findings:
        home = next(
            (
                r
                for r in rises
                if f.code == "LOSS001"
                and f.evidence.get("recovered_step") is None
                and f.step_start is not None
                and (r.step_start or 0) <= f.step_start <= (r.step_end or 0)
            ),
            None,
        )
        if home is None:
            out.append(f)
            continue
        r = merged[id(home)]
        sev = r.severity if "LOSS003" in keep else max(r.severity, f.severity, key=_rank)
        evidence = {"spike_step": f.step_start, **r.evidence}
        merged[id(home)] = dataclasses.replace(r, severity=sev, evidence=evidence)
    return [merged.get(id(f), f) for f in out]


def _rank(s: Severity) -> int:
    return s.rank


def run_detectors(
    run: Run, cfg: Config | None = None, ctx: Context | None = None
) -> DetectionResult:
    """Run every selected detector; findings sorted by step, then severity."""
    from trainlens.core.config import Config

    cfg = cfg or Config()
    ctx = ctx or Context(schedule=dict(cfg.schedule), model=dict(cfg.model))
    result = DetectionResult()
    severity = {k.upper(): Severity.parse(v) for k, v in cfg.severity.items()}
    # the LR detector runs first when a schedule is declared: where it aligns a resumed
    # log with the plan (LR008), every detector compares the declared warmup and the plan
    # with the real steps (Context.step_offset), selected or not
    lr_result = _align_with_schedule(run, cfg, ctx) if ctx.schedule else None
    for name in available():
        module = load(name)
        if not is_selected(name, module.CODES, cfg):
            continue
        try:
            if name == "lr_schedule" and lr_result is not None:
                found = lr_result.found()
            else:
                params = make_params(name, module, cfg.detectors.get(name, {}))
                found = module.detect(run, params, ctx)
        except Skip as why:
            result.skipped[name] = str(why)
            continue
        result.ran.append(name)
        for f in found:
            if not _code_kept(f.code, name, cfg):
                continue
            if f.code in severity:
                f = f.with_severity(severity[f.code])
            result.findings.append(f)
    # one cross-signal step over every detector's loss events: what moved first
    from trainlens.detectors._causes import attach_causes

    result.findings = attach_causes(run, ctx, result.findings)
    result.findings = _one_finding_per_rise(result.findings, keep=set(severity))
    result.findings.sort(
        key=lambda f: (f.step_start if f.step_start is not None else -1, -f.severity.rank)
    )
    return result
