"""``trainlens gate``: judge many archived runs for CI, in parallel, with rules as code.

    from trainlens.gate import gate
    result = gate(["runs/"], config="trainlens.toml", baseline="baseline.json")
    result.exit_code(), [r.verdict for r in result.reports]

See docs/gate.md for the rules (``[tool.trainlens.gate]``), the checks and their codes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from trainlens.core.config import Config, load_config
from trainlens.core.findings import FAIL_LEVELS, fail_rank
from trainlens.gate.baseline import Baseline
from trainlens.gate.codes import CHECK_CODES, GATE_CODES
from trainlens.gate.discover import Skipped, Source, discover
from trainlens.gate.golden import Golden
from trainlens.gate.result import CheckResult, GateFinding, GateIncident, GateResult, RunReport
from trainlens.gate.rules import GateRules, parse_rules
from trainlens.gate.runner import GateJob, load_baseline, load_reference, run_sources


def gate(
    paths: Iterable[str | Path],
    *,
    config: Config | str | Path | None = None,
    baseline: str | Path | None = None,
    fail_on: str | None = None,
    jobs: int | None = None,
    allow_unreadable: bool = False,
    on_done: Callable[[int, int], None] | None = None,
    reference: Iterable[str | Path] | None = None,
    golden: Golden | None = None,
) -> GateResult:
    """Discover, read, analyze and judge every run under ``paths`` (files, dirs, globs).

    ``reference``: reference runs (seeds of one config) or one golden file; each run's
    curves are compared with them (docs/gate.md, "Golden curves"). ``golden``: bands
    already built (:func:`trainlens.gate.golden.from_runs`, ``read_golden``).

    Raises ConfigError / UsageError for bad rules or arguments, UnreadableInputError for
    an unreadable baseline or reference; an unreadable gated run is a report with
    verdict ``unreadable``.
    """
    cfg = config if isinstance(config, Config) else load_config(config)
    rules = parse_rules(cfg)
    level = (fail_on or rules.fail_on or "error").lower()
    rank = fail_rank(level)
    skipped: list[Skipped] = []
    sources = discover((str(p) for p in paths), skipped)
    base_path = baseline if baseline is not None else rules.baseline.path
    base = load_baseline(base_path, cfg, rules) if base_path is not None else None
    ref_paths = list(reference or []) or list(rules.reference.paths)
    if golden is None and ref_paths:
        golden = load_reference(ref_paths, cfg, rules)
    job = GateJob(cfg=cfg, rules=rules, fail_rank=rank, baseline=base, reference=golden)
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    reports = run_sources(sources, job, jobs=workers, on_done=on_done)
    used = {i for r in reports for i in r.acks_used}
    unused = [a.to_dict() for a in rules.acknowledge if a.index not in used]
    return GateResult(
        reports=reports,
        fail_on=level,
        allow_unreadable=allow_unreadable,
        baseline=base.path if base else None,
        reference=golden.source if golden else None,
        unused_acknowledgements=unused,
        skipped=[s.to_dict() for s in dict.fromkeys(skipped)],  # (a path under two specs: once)
    )


__all__ = [
    "CHECK_CODES",
    "FAIL_LEVELS",
    "GATE_CODES",
    "Baseline",
    "CheckResult",
    "GateFinding",
    "GateIncident",
    "GateJob",
    "GateResult",
    "GateRules",
    "Golden",
    "RunReport",
    "Skipped",
    "Source",
    "discover",
    "fail_rank",
    "gate",
    "load_baseline",
    "load_reference",
    "parse_rules",
    "run_sources",
]
