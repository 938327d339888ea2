"""Outcome checks (limits a run must meet) and baseline checks (regressions against a
reference run). Each configured check yields a :class:`CheckResult` and, when it fails,
one Finding with a gate code (severity error unless configured otherwise)."""

from __future__ import annotations

from typing import Any

from trainlens.core.dataclass import dataclass, field
from trainlens.core.findings import Finding, Severity
from trainlens.gate.codes import DEFAULT_SEVERITY, GATE_CODES
from trainlens.gate.result import FAIL, PASS, SKIPPED, CheckResult
from trainlens.gate.rules import BaselineLimits, Checks


@dataclass
class Outcome:
    check: CheckResult
    findings: list[Finding] = field(default_factory=list)
    code: str | None = None  # the code it raises when not in CHECK_CODES (reference checks)


def _finding(
    code: str, message: str, *, metric: str | None = None, step: int | None = None, **evidence: Any
) -> Finding:
    return Finding(
        code=code,
        name=GATE_CODES[code],
        severity=Severity(DEFAULT_SEVERITY),
        metric=metric,
        step_start=step,
        step_end=step,
        message=message,
        evidence={k: v for k, v in evidence.items() if v is not None},
    )


def _g(x: float | None) -> str:
    """4 significant digits, thousands separated: 45,050 / 1.063 / 2.5e-05."""
    if x is None:
        return "—"
    if 1e3 <= abs(x) < 1e15:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def _skip(name: str, kind: str, why: str) -> Outcome:
    return Outcome(CheckResult(name, kind, SKIPPED, why))


def _pass(name: str, kind: str, detail: str) -> Outcome:
    return Outcome(CheckResult(name, kind, PASS, detail))


def _fail(name: str, kind: str, detail: str, finding: Finding) -> Outcome:
    return Outcome(CheckResult(name, kind, FAIL, detail), [finding])


def _val_limit(
    name: str,
    kind: str,
    which: str,
    value: float | None,
    step: int | None,
    text: str,
    metric: str,
    limit: float,
) -> Outcome:
    """Pass when ``value`` (the final or the best val loss) is at most ``limit``; else a
    VAL004 failure whose message is ``text`` + " above the limit ..."."""
    if value is not None and value <= limit:
        return _pass(name, kind, f"{which} {_g(value)} <= {limit:g}")
    finding = _finding(
        "VAL004",
        f"{text} above the limit {limit:g}",
        metric=metric,
        step=step,
        value=value,
        limit=limit,
    )
    return _fail(name, kind, f"{which} {_g(value)} > {limit:g}", finding)


def outcome_checks(checks: Checks, outcomes: dict[str, Any]) -> list[Outcome]:
    out: list[Outcome] = []
    kind = "outcome"
    val = outcomes.get("val_loss")
    metric = checks.val_metric
    missing = f"{metric} not logged"

    if checks.max_final_val_loss is not None:
        name, limit = "check:max_final_val_loss", checks.max_final_val_loss
        if val is None:
            out.append(_skip(name, kind, missing))
        elif not val["final_finite"]:
            out.append(
                _fail(
                    name,
                    kind,
                    "final value not finite",
                    _finding(
                        "VAL004",
                        f"the final {metric} (step {val['final_step']}) is not finite; "
                        f"the limit is {limit:g}",
                        metric=metric,
                        step=val["final_step"],
                        limit=limit,
                    ),
                )
            )
        else:
            text = f"final {metric} {_g(val['final'])} at step {val['final_step']} is"
            out.append(
                _val_limit(
                    name, kind, "final", val["final"], val["final_step"], text, metric, limit
                )
            )

    if checks.max_best_val_loss is not None:
        name, limit = "check:max_best_val_loss", checks.max_best_val_loss
        if val is None:
            out.append(_skip(name, kind, missing))
        else:
            where = f" at step {val['best_step']}" if val["best"] is not None else ""
            text = f"the best {metric} {_g(val['best'])}{where} is"
            out.append(
                _val_limit(name, kind, "best", val["best"], val["best_step"], text, metric, limit)
            )

    if checks.target_val_loss is not None:
        out.extend(_target_checks(checks, outcomes.get("time_to_target") or {}, val))

    if checks.min_mfu is not None:
        name, limit = "check:min_mfu", checks.min_mfu
        m = outcomes.get("mfu") or {}
        if m.get("mean") is None:
            out.append(_skip(name, kind, m.get("reason", "MFU unknown")))
        elif m["mean"] < limit:
            out.append(
                _fail(
                    name,
                    kind,
                    f"MFU {m['mean']:.1%} < {limit:.1%}",
                    _finding(
                        "MFU001",
                        f"mean MFU {m['mean']:.1%} is below the limit {limit:.1%}"
                        + (f" ({m.get('n_gpus')} × {m['gpu']})" if m.get("gpu") else ""),
                        metric="mfu",
                        mfu=m["mean"],
                        limit=limit,
                        gpu=m.get("gpu"),
                    ),
                )
            )
        else:
            out.append(_pass(name, kind, f"MFU {m['mean']:.1%} >= {limit:.1%}"))

    if checks.no_restarts:
        name = "check:no_restarts"
        restarts: list[dict[str, Any]] = outcomes.get("restart_details") or []
        n = outcomes.get("restarts", 0)
        if n:
            first = restarts[0] if restarts else {}
            text = (
                f" (first: step went back from {first['from_step']} to {first['to_step']})"
                if first
                else ""
            )
            out.append(
                _fail(
                    name,
                    kind,
                    f"{n} restart(s)",
                    _finding(
                        "DATA005",
                        f"the run restarted {n} time{'s' if n != 1 else ''}{text}; "
                        "restarts are not allowed for this run",
                        step=first.get("to_step"),
                        restarts=n,
                        from_step=first.get("from_step"),
                        to_step=first.get("to_step"),
                    ),
                )
            )
        else:
            out.append(_pass(name, kind, "no restart"))
    return out


def _target_checks(
    checks: Checks, ttt: dict[str, Any], val: dict[str, Any] | None
) -> list[Outcome]:
    kind = "outcome"
    target = checks.target_val_loss
    metric = checks.val_metric
    out: list[Outcome] = []
    budgets = [
        ("check:max_steps_to_target", "step", checks.max_steps_to_target, "steps", "step"),
        ("check:max_tokens_to_target", "tokens", checks.max_tokens_to_target, "tokens", None),
        ("check:max_seconds_to_target", "seconds", checks.max_seconds_to_target, "seconds", None),
    ]
    if val is None:
        out.append(_skip("check:target_val_loss", kind, f"{metric} not logged"))
        out.extend(_skip(n, kind, f"{metric} not logged") for n, _, b, _, _ in budgets if b)
        return out
    if not ttt.get("reached"):
        best = val.get("best")
        out.append(
            _fail(
                "check:target_val_loss",
                kind,
                f"never reached {target:g}",
                _finding(
                    "VAL005",
                    f"{metric} never reached the target {target:g} (best {_g(best)}"
                    + (f" at step {val['best_step']})" if best is not None else ")"),
                    metric=metric,
                    target=target,
                    best=best,
                    best_step=val.get("best_step"),
                ),
            )
        )
        out.extend(_skip(n, kind, "target never reached") for n, _, b, _, _ in budgets if b)
        return out
    step = ttt["step"]
    out.append(_pass("check:target_val_loss", kind, f"{target:g} reached at step {step}"))
    for name, key, budget, unit, _ in budgets:
        if budget is None:
            continue
        used = ttt.get(key)
        if used is None:
            why = {
                "tokens": "no tokens or tokens_per_sec logged",
                "seconds": "no wall clock or step_time logged",
            }.get(key, "unknown")
            out.append(_skip(name, kind, why))
        elif used > budget:
            out.append(
                _fail(
                    name,
                    kind,
                    f"{_g(used)} {unit} > {_g(budget)}",
                    _finding(
                        "VAL005",
                        f"{metric} reached the target {target:g} at step {step} after "
                        f"{_g(used)} {unit}, over the budget of {_g(budget)} {unit}",
                        metric=metric,
                        step=step,
                        target=target,
                        used=used,
                        budget=budget,
                        measure=unit,
                    ),
                )
            )
        else:
            out.append(_pass(name, kind, f"{_g(used)} {unit} <= {_g(budget)}"))
    return out


def baseline_checks(
    limits: BaselineLimits,
    outcomes: dict[str, Any],
    base: dict[str, Any] | None,
    base_name: str,
    why_none: str,
    checks: Checks,
) -> list[Outcome]:
    """Compare a run's outcomes with its baseline's."""
    kind = "baseline"
    names = ["baseline:throughput", "baseline:val_loss", "baseline:memory"]
    if checks.target_val_loss is not None:
        names.insert(2, "baseline:time_to_target")
    if base is None:
        return [_skip(n, kind, why_none) for n in names]
    out: list[Outcome] = []
    label = f"baseline {base_name}"

    # throughput
    name = "baseline:throughput"
    t, b = outcomes.get("throughput"), base.get("throughput")
    if not t or not b:
        out.append(_skip(name, kind, "throughput not logged" if not t else f"{label}: none"))
    elif t["metric"] != b["metric"]:
        out.append(_skip(name, kind, f"{t['metric']} here, {b['metric']} in the baseline"))
    else:
        drop = 1.0 - t["mean"] / b["mean"]
        limit = limits.max_throughput_drop
        detail = f"{t['metric']} mean {_g(t['mean'])} vs {_g(b['mean'])} ({-drop:+.1%})"
        if drop > limit:
            out.append(
                _fail(
                    name,
                    kind,
                    detail,
                    _finding(
                        "TPUT003",
                        f"mean {t['metric']} {_g(t['mean'])} is {drop:.1%} below the "
                        f"{label} ({_g(b['mean'])}); at most {limit:.1%} is allowed",
                        metric=t["metric"] if t["metric"] != "steps_per_sec" else "step_time",
                        mean=t["mean"],
                        baseline_mean=b["mean"],
                        drop=drop,
                        limit=limit,
                    ),
                )
            )
        else:
            out.append(_pass(name, kind, detail))

    # validation loss: best and final
    name = "baseline:val_loss"
    v, bv = outcomes.get("val_loss"), base.get("val_loss")
    limit = limits.max_val_loss_increase
    if not v or not bv:
        out.append(_skip(name, kind, "val loss not logged" if not v else f"{label}: no val loss"))
    else:
        worse: list[str] = []
        ev: dict[str, Any] = {"limit": limit}
        for which in ("best", "final"):
            here, there = v.get(which), bv.get(which)
            if there is None:
                continue
            ev[f"{which}"], ev[f"baseline_{which}"] = here, there
            if here is None or (which == "final" and not v.get("final_finite", True)):
                worse.append(f"the {which} val loss is not finite (baseline {_g(there)})")
            elif here - there > limit:
                worse.append(
                    f"the {which} val loss {_g(here)} is {here - there:+.4g} over the "
                    f"baseline's {_g(there)}"
                )
        detail = (
            f"best {_g(v.get('best'))} vs {_g(bv.get('best'))}, final {_g(v.get('final'))} "
            f"vs {_g(bv.get('final'))}"
        )
        if worse:
            out.append(
                _fail(
                    name,
                    kind,
                    detail,
                    _finding(
                        "VAL002",
                        "; ".join(worse) + f" (at most +{limit:g} allowed vs the {label})",
                        metric=v.get("metric"),
                        step=v.get("final_step"),
                        **ev,
                    ),
                )
            )
        else:
            out.append(_pass(name, kind, detail))

    # time to target
    if checks.target_val_loss is not None:
        out.append(
            _time_to_target(
                limits, outcomes.get("time_to_target"), base.get("time_to_target"), label, checks
            )
        )

    # peak memory
    name = "baseline:memory"
    m, bm = outcomes.get("peak_memory"), base.get("peak_memory")
    if not m or not bm:
        why = "no memory metric logged" if not m else f"{label}: no memory peak recorded"
        out.append(_skip(name, kind, why))
    elif m["metric"] != bm["metric"]:
        out.append(_skip(name, kind, f"{m['metric']} here, {bm['metric']} in the baseline"))
    else:
        growth = m["peak"] / bm["peak"] - 1.0 if bm["peak"] else 0.0
        limit = limits.max_memory_growth
        detail = f"peak {m['metric']} {_g(m['peak'])} vs {_g(bm['peak'])} ({growth:+.1%})"
        if growth > limit:
            out.append(
                _fail(
                    name,
                    kind,
                    detail,
                    _finding(
                        "MEM002",
                        f"peak {m['metric']} {_g(m['peak'])} is {growth:.1%} above the "
                        f"{label} ({_g(bm['peak'])}); at most {limit:.1%} is allowed",
                        metric=m["metric"],
                        step=m.get("step"),
                        peak=m["peak"],
                        baseline_peak=bm["peak"],
                        growth=growth,
                        limit=limit,
                    ),
                )
            )
        else:
            out.append(_pass(name, kind, detail))
    return out


def _time_to_target(
    limits: BaselineLimits,
    t: dict[str, Any] | None,
    b: dict[str, Any] | None,
    label: str,
    checks: Checks,
) -> Outcome:
    name, kind = "baseline:time_to_target", "baseline"
    if not b:
        return _skip(
            name,
            kind,
            f"{label}: no time to target recorded (store it with "
            "`trainlens gate --format json` under the same target)",
        )
    if not t:
        return _skip(name, kind, "time to target unknown")
    if b.get("target") != t.get("target") or b.get("metric") != t.get("metric"):
        return _skip(
            name,
            kind,
            f"{label} was measured to {b.get('metric')} <= "
            f"{b.get('target')}, not {t.get('metric')} <= {t.get('target')}",
        )
    if not b.get("reached"):
        return _skip(name, kind, f"{label} never reached the target")
    target, metric = t["target"], t["metric"]
    limit = limits.max_time_to_target_increase
    if not t.get("reached"):
        return _fail(
            name,
            kind,
            "never reached",
            _finding(
                "VAL003",
                f"{metric} never reached the target {target:g}; the {label} reached it "
                f"at step {b['step']}",
                metric=metric,
                target=target,
                baseline_step=b["step"],
                limit=limit,
            ),
        )
    worse: list[str] = []
    ev: dict[str, Any] = {"target": target, "limit": limit}
    parts: list[str] = []
    for key, unit in (("step", "steps"), ("tokens", "tokens"), ("seconds", "seconds")):
        here, there = t.get(key), b.get(key)
        if here is None or there is None or there <= 0:
            continue
        inc = here / there - 1.0
        ev[unit], ev[f"baseline_{unit}"] = here, there
        parts.append(f"{unit} {_g(here)} vs {_g(there)} ({inc:+.1%})")
        if inc > limit:
            worse.append(f"{_g(here)} {unit} vs {_g(there)} ({inc:+.1%})")
    detail = "; ".join(parts)
    if worse:
        return _fail(
            name,
            kind,
            detail,
            _finding(
                "VAL003",
                f"reaching {metric} <= {target:g} took "
                + ", ".join(worse)
                + f" of the {label}; at most +{limit:.0%} is allowed",
                metric=metric,
                step=t["step"],
                **ev,
            ),
        )
    return _pass(name, kind, detail)


def checkpoint_checks(
    checks: Checks, inventory: Any, last_step: int | None, best_val_step: int | None
) -> list[Outcome]:
    """The checkpoint requirements (``checkpoint_at_end``, ``best_val_checkpoint``) against
    the run's audited checkpoints (``Context.checkpoints``; None: none were found)."""
    from trainlens.checkpoints.requirements import best_val_kept, ends_intact

    out: list[Outcome] = []
    if checks.checkpoint_at_end:
        verdict = ends_intact(inventory, last_step) if inventory is not None else None
        out.append(
            _requirement(
                "check:checkpoint_at_end",
                verdict,
                "CKPT008",
                "the run does not end with an intact checkpoint",
                step=last_step,
                checkpoint=verdict.checkpoint if verdict is not None else None,
            )
        )
    if checks.best_val_checkpoint:
        name = "check:best_val_checkpoint"
        if best_val_step is None:
            out.append(_skip(name, "outcome", f"{checks.val_metric} not logged"))
        else:
            verdict = best_val_kept(inventory, best_val_step) if inventory is not None else None
            out.append(
                _requirement(
                    name,
                    verdict,
                    "CKPT009",
                    f"the best {checks.val_metric} (step {best_val_step}) has no intact "
                    "checkpoint kept",
                    metric=checks.val_metric,
                    step=best_val_step,
                )
            )
    return out


def _requirement(
    name: str,
    verdict: Any,
    code: str,
    failed: str,
    *,
    metric: str | None = None,
    step: int | None = None,
    **evidence: Any,
) -> Outcome:
    """A checkpoint requirement's outcome from its verdict (None: no checkpoint found)."""
    if verdict is not None and verdict.ok:
        return _pass(name, "outcome", verdict.message)
    why = verdict.message if verdict is not None else "no checkpoint found for the run"
    return _fail(
        name,
        "outcome",
        why,
        _finding(code, f"{failed}: {why}", metric=metric, step=step, **evidence),
    )
