"""Gate every source, in parallel over processes.

Each source is read and analyzed into :class:`RunReport` objects (plain dicts and small
dataclasses; no Run, no polars frame crosses a process boundary). ``jobs=1`` runs in
this process; more go to :mod:`trainlens.gate._pool`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainlens.core.config import Config
from trainlens.core.dataclass import dataclass
from trainlens.core.errors import TrainlensError, UnreadableInputError, UsageError
from trainlens.core.findings import Finding, Severity
from trainlens.core.incidents import Incident
from trainlens.core.names import AliasTable
from trainlens.core.run import Run
from trainlens.gate.baseline import Baseline, read_stored
from trainlens.gate.checks import Outcome, baseline_checks, checkpoint_checks, outcome_checks
from trainlens.gate.codes import CHECK_CODES, GATE_CODES
from trainlens.gate.discover import Source, discover
from trainlens.gate.golden import Golden
from trainlens.gate.result import (
    FAIL,
    PASS,
    SKIPPED,
    UNREADABLE,
    CheckResult,
    GateFinding,
    GateIncident,
    RunReport,
)
from trainlens.gate.rules import GateRules


@dataclass(frozen=True)
class GateJob:
    """What every worker needs, sent once per worker process."""

    cfg: Config
    rules: GateRules
    fail_rank: int
    baseline: Baseline | None = None
    detect: bool = True  # False: summary and outcomes only (reading a baseline)
    reference: Golden | None = None  # golden curves every run is compared with


def _code_detectors() -> dict[str, str]:
    from trainlens.detectors import available, load

    return {code: name for name in available() for code in load(name).CODES}


def _kept(code: str, cfg: Config) -> bool:
    """Gate codes honour ``ignore`` (code or family), like detector codes."""
    return not any(code.startswith(p.upper()) for p in cfg.ignore)


def gate_run(run: Run, name: str, job: GateJob) -> RunReport:
    """Judge one run: detectors, outcome checks, baseline checks, acknowledgements."""
    from trainlens.api import analyze_run, build_context
    from trainlens.detectors import available, is_selected, load
    from trainlens.summary import summarize

    t0 = time.perf_counter()
    cfg, checks = job.rules.for_run(name, job.cfg)
    report = RunReport(name=name, source=run.source, format=run.format, verdict=PASS)
    if not job.detect:
        ctx = build_context(run, cfg)
        # after build_context: a run config it could not understand is a note on the run
        report.data_quality = [d.to_dict() for d in run.data_quality]
        report.summary = summarize(run, perplexity=cfg.perplexity)
        from trainlens.gate.outcomes import outcome_metrics

        report.outcomes = outcome_metrics(run, report.summary, checks, ctx.model)
        report.seconds = time.perf_counter() - t0
        return report

    analysis = analyze_run(run, cfg)
    report.data_quality = [d.to_dict() for d in run.data_quality]
    from trainlens.gate.outcomes import outcome_metrics

    report.summary = analysis.summary
    report.outcomes = outcome_metrics(run, analysis.summary, checks, analysis.context.model)

    owner = _code_detectors()
    checks_out: list[CheckResult] = []
    found: list[tuple[Finding, str]] = []
    for det in available():
        if not is_selected(det, load(det).CODES, cfg):
            continue
        if det in analysis.skipped:
            checks_out.append(
                CheckResult(f"detector:{det}", "detector", SKIPPED, analysis.skipped[det])
            )
        else:
            checks_out.append(CheckResult(f"detector:{det}", "detector", PASS))
    for f in analysis.findings:
        # CKPT findings come from the checkpoint audit analyze runs beside the detectors
        check = "checkpoints" if f.code.startswith("CKPT") else owner.get(f.code, "unknown")
        found.append((f, f"detector:{check}"))

    outcomes: list[Outcome] = outcome_checks(checks, report.outcomes)
    val = report.outcomes.get("val_loss") or {}
    outcomes.extend(
        checkpoint_checks(
            checks,
            analysis.context.checkpoints,
            (analysis.summary.get("steps") or {}).get("last"),
            val.get("best_step"),
        )
    )
    if job.baseline is not None:
        base_name, base, why = job.baseline.pick(name)
        outcomes.extend(
            baseline_checks(job.rules.baseline, report.outcomes, base, base_name or "", why, checks)
        )
    if job.reference is not None:
        from trainlens.gate.reference import reference_checks

        outcomes.extend(reference_checks(job.reference, run))
    severity = {k.upper(): Severity.parse(v) for k, v in cfg.severity.items()}
    for oc in outcomes:
        code = oc.code or CHECK_CODES[oc.check.name]
        if not _kept(code, cfg):
            oc.check.status, oc.check.detail = SKIPPED, f"{code} ignored by the config"
            checks_out.append(oc.check)
            continue
        checks_out.append(oc.check)
        for f in oc.findings:
            if f.code in severity:
                f = f.with_severity(severity[f.code])
            found.append((f, oc.check.name))

    # analyze grouped its findings already: the same findings (no outcome or baseline
    # finding added, as in `watch`) are the same incidents — grouping again cost ~5-10 ms
    # of a 135 ms judging of lr_shock_diverge
    same = len(found) == len(analysis.findings) and all(
        f is g for (f, _), g in zip(found, analysis.findings, strict=True)
    )
    report.findings, report.incidents, used = judged(
        run, name, found, job, analysis.incidents if same else None
    )
    failing_checks = {g.check for g in report.findings if g.fails}
    for c in checks_out:
        if c.name in failing_checks:
            c.status = FAIL
        elif c.status == FAIL:  # an outcome check whose finding was downgraded or acknowledged
            c.status = PASS
    report.checks = checks_out
    report.acks_used = sorted(used)
    report.verdict = FAIL if failing_checks else PASS
    report.seconds = time.perf_counter() - t0
    return report


def judged(
    run: Run,
    name: str,
    found: list[tuple[Finding, str]],
    job: GateJob,
    grouped: list[Incident] | None = None,
) -> tuple[list[GateFinding], list[GateIncident], set[int]]:
    """The findings and their incidents as the gate judges them, and the acknowledgements
    used. An acknowledgement whose code is an incident's headline code (and whose steps
    hold the headline finding's start) acknowledges the whole incident; otherwise each
    finding is matched by its own code. An incident fails when any member fails."""
    from trainlens.incidents import incidents_of

    acks = job.rules.acknowledge
    used: set[int] = set()
    gfs = [GateFinding(finding=f, check=check) for f, check in found]
    incidents = grouped if grouped is not None else incidents_of(run, [f for f, _ in found])
    out: list[GateIncident] = []
    for inc in incidents:
        members = [gfs[m] for m in inc.members]
        whole = next((a for a in acks if a.covers(name, members[0].finding)), None)
        for g in members:
            g.incident = inc.id
            ack = whole or next((a for a in acks if a.covers(name, g.finding)), None)
            if ack is not None:
                g.acknowledged, g.reason = True, ack.reason
                used.add(ack.index)
            g.fails = not g.acknowledged and g.finding.severity.rank >= job.fail_rank
        gi = GateIncident(inc, members)
        gi.acknowledged = all(g.acknowledged for g in members)
        gi.reason = whole.reason if whole else next((g.reason for g in members if g.reason), None)
        gi.fails = any(g.fails for g in members)
        out.append(gi)
    return gfs, out, used


def gate_source(source: Source, job: GateJob) -> list[RunReport]:
    """Read one source and judge each run in it; an unreadable source is one report."""
    from trainlens.readers import ReadOptions, read_runs

    t0 = time.perf_counter()
    try:
        runs = read_runs([source.path], options=ReadOptions(aliases=AliasTable(job.cfg.aliases)))
    except TrainlensError as exc:
        return [
            RunReport(
                name=source.name,
                source=source.path,
                format=None,
                verdict=UNREADABLE,
                error=str(exc),
                seconds=time.perf_counter() - t0,
            )
        ]
    reports = []
    for run in runs:
        name = source.name if len(runs) == 1 else f"{source.name}/{run.name}"
        reports.append(gate_run(run, name, job))
    if reports:
        reports[0].seconds += time.perf_counter() - t0 - sum(r.seconds for r in reports)
    return reports


def load_baseline(path: str | Path, cfg: Config, rules: GateRules) -> Baseline:
    """Read the baseline once, in this process, before the gated runs fan out."""
    p = Path(path)
    if not p.exists():
        raise UnreadableInputError(f"{p}: baseline not found")
    stored = read_stored(p)
    if stored is not None:
        return stored
    job = GateJob(cfg=cfg, rules=rules, fail_rank=99, baseline=None, detect=False)
    records: dict[str, dict[str, Any]] = {}
    for source in discover([str(p)]):
        for report in gate_source(source, job):
            if report.error:
                raise UnreadableInputError(f"baseline {report.error}")
            records[report.name] = report.outcomes
    return Baseline(str(p), records)


def load_reference(paths: Sequence[str | Path], cfg: Config, rules: GateRules) -> Golden:
    """The golden curves: one stored golden file (trainlens' or Megatron-LM's), or the
    bands of reference runs (every run found under ``paths``), read in this process."""
    from trainlens.gate.golden import from_runs, read_golden
    from trainlens.readers import ReadOptions, read_runs

    ref = rules.reference
    stored = []
    for p in paths:
        if not Path(p).exists():
            raise UnreadableInputError(f"{p}: reference not found")
        g = read_golden(Path(p))
        if g is not None:
            stored.append(g)
    if stored:
        if len(stored) > 1 or len(paths) > 1:
            raise UsageError(
                "a golden file is the whole reference: give it alone, or give the runs "
                "it was made from"
            )
        return stored[0]
    runs: list[tuple[str, Run]] = []
    opts = ReadOptions(aliases=AliasTable(cfg.aliases))
    for source in discover([str(p) for p in paths]):
        try:
            found = read_runs([source.path], options=opts)
        except TrainlensError as exc:
            raise UnreadableInputError(f"reference {exc}") from None
        for run in found:
            runs.append((source.name if len(found) == 1 else f"{source.name}/{run.name}", run))
    if not runs:
        raise UnreadableInputError(f"no reference run found in {', '.join(map(str, paths))}")
    names = [n for n, _ in runs]
    if len(set(names)) < len(names):  # two files of one name in different folders
        runs = [(f"{n}#{i}", r) for i, (n, r) in enumerate(runs, 1)]
    return from_runs(
        runs,
        metrics=list(ref.metrics),
        overrides=ref.overrides(),
        z=ref.z,
        source=", ".join(map(str, paths)),
        axis=ref.align,
    )


# ---- many sources ---------------------------------------------------------------------------


def run_sources(
    sources: Sequence[Source],
    job: GateJob,
    *,
    jobs: int = 1,
    on_done: Callable[[int, int], None] | None = None,
) -> list[RunReport]:
    """Gate every source in ``jobs`` processes (:mod:`trainlens.gate._pool`; 1: this one
    alone); reports come back in the sources' order."""
    total = len(sources)
    workers = max(1, min(jobs, total))
    if workers > 1:
        from trainlens.gate._pool import run_parallel

        results = run_parallel(sources, job, workers, on_done, gate_source)
        return [r for rs in results for r in rs]
    from trainlens.checkpoints._discover import shared_listings

    out: list[RunReport] = []
    with shared_listings():
        for i, source in enumerate(sources):
            out.extend(gate_source(source, job))
            if on_done:
                on_done(i + 1, total)
    return out


__all__ = [
    "GATE_CODES",
    "GateJob",
    "gate_run",
    "gate_source",
    "load_baseline",
    "load_reference",
    "run_sources",
]
