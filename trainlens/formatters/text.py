"""The terminal summary of ``trainlens analyze``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainlens.core.names import tensor_family
from trainlens.core.runstate import run_end
from trainlens.core.sanitize import terminal_lines
from trainlens.formatters.incidents import incident_lines, runs_table

if TYPE_CHECKING:
    from trainlens.core.analysis import Analysis
    from trainlens.core.findings import Finding


def number_text(x: Any, digits: int = 4) -> str:
    """A summary number as every rendering writes it: ``—`` when unknown, integers with
    thousands separators, floats to ``digits`` significant digits (scientific outside
    1e-3..1e5); anything else as its text (the HTML report escapes what this returns)."""
    if x is None:
        return "—"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def duration_text(seconds: float | None) -> str:
    """Seconds as people read them: 12.5s, 3m 04s, 2h 05m 00s."""
    if seconds is None:
        return "—"
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h {m:02d}m {sec:02d}s"
    if m:
        return f"{m}m {sec:02d}s"
    return f"{seconds:.1f}s"


def _metric_list(metrics: dict[str, Any], limit: int = 14) -> str:
    names = list(metrics)
    per_tensor = [n for n in names if tensor_family(n)]
    main = [n for n in names if n not in per_tensor]
    text = ", ".join(main[:limit]) + (
        f", … ({len(main) - limit} more)" if len(main) > limit else ""
    )
    if per_tensor:
        text += f"; {len(per_tensor)} per-tensor series"
    return text


def _wall_clock_text(s: dict[str, Any]) -> str:
    text = duration_text(s.get("wall_clock_seconds"))
    if s.get("wall_clock_source") == "train_time":
        text += " (train_time as logged)"
    return text


def _step_time_text(t: dict[str, Any]) -> str:
    text = f"step time   mean {number_text(t['mean'])} s"
    if t.get("p50") is not None:
        text += f"   p50 {number_text(t['p50'])} s   p95 {number_text(t['p95'])} s"
    source = t.get("source")
    if source and source != "step_time":
        text += f"   (from {source})"
    return text


def _ppl(x: float | None) -> str:
    return f" (perplexity {number_text(x)})" if x is not None else ""


def _loss_lines(s: dict[str, Any], *, verbose: bool) -> list[str]:
    """Train and val loss; a perplexity only where the summary gives one, and why."""
    lines = []
    t = s.get("train_loss")
    if t:
        text = (
            f"train loss  final {number_text(t['final'])} at step {t['final_step']}"
            f"{_ppl(t['final_perplexity'])}"
        )
        if t.get("final_mean_last_k") is not None:
            text += f"   mean of last {t['final_window']} {number_text(t['final_mean_last_k'])}"
        lines.append(f"{text}   min {number_text(t['min'])} at step {t['min_step']}")
    v = s.get("val_loss")
    if v:
        lines.append(
            f"val loss    best {number_text(v['best'])} at step {v['best_step']}   final "
            f"{number_text(v['final'])} at step {v['final_step']}{_ppl(v['final_perplexity'])}"
        )
    p = s.get("perplexity")
    if (t or v) and p and (p.get("shown") or verbose):
        shown = "shown" if p.get("shown") else "not shown"
        lines.append(f"perplexity  {shown}: {p['basis']} (config `perplexity` overrides)")
    return lines


def render_analysis(a: Analysis, *, verbose: bool = False, width: int | None = None) -> str:
    s = a.summary
    lines: list[str] = []
    lines.append(f"run         {a.run.name}  ({a.run.format}: {a.run.source})")
    st = s["steps"]
    lines.append(
        f"steps       {st['first']} … {st['last']}  ({st['count']:,} steps, "
        f"{s['values']:,} values)   wall clock {_wall_clock_text(s)}"
    )
    lines.append(f"metrics     {_metric_list(s['metrics'])}")
    if s.get("step_time"):
        t = s["step_time"]
        lines.append(_step_time_text(t))
    tput = []
    if s.get("tokens_per_sec"):
        tput.append(f"{number_text(s['tokens_per_sec']['mean'])} tokens/s")
    if s.get("samples_per_sec"):
        tput.append(f"{number_text(s['samples_per_sec']['mean'])} samples/s")
    if tput:
        lines.append(f"throughput  mean {'   '.join(tput)}")
    ep = s.get("epochs")
    if ep and ep.get("seconds_per_epoch"):
        per = ", ".join(
            f"{k}: {duration_text(v)}" for k, v in list(ep["seconds_per_epoch"].items())[:6]
        )
        lines.append(f"epochs      {number_text(ep['count'])}   time per epoch {per}")
    lines.extend(_loss_lines(s, verbose=verbose))
    for extra in ("mfu", "compute", "energy"):
        if s.get(extra):
            lines.append(f"{extra:<11} {s[extra]['text']}")
            if s[extra].get("problem"):  # an impossible figure: the input is wrong
                lines.append(f"{'':<11} {s[extra]['problem']}")
        elif extra == "mfu" and s.get("efficiency_note"):  # asked for, not computed: why
            lines.append(f"{extra:<11} {s['efficiency_note']}")
    if a.context.schedule:
        sch = a.context.schedule
        lines.append(f"schedule    {sch.get('shape')} (declared in {a.context.schedule_source})")
    end = run_end(a.run.metadata)
    if end is not None:
        lines.append(f"ended       {end.text()}")
    dq = a.run.data_quality
    if dq:
        lines.append("data        " + str(dq[0]))
        for d in dq[1:]:
            lines.append("            " + str(d))
    if verbose and a.run.metadata.get("reader_note"):  # how the reader read it (why slower)
        lines.append(f"reader      {a.run.metadata['reader_note']}")

    lines.append("")
    if a.incidents:
        n = len(a.incidents)
        lines.append(
            f"incidents ({n}, from {len(a.findings)} finding{'s' if len(a.findings) > 1 else ''})"
        )
        lines.extend(incident_lines(a, verbose=verbose, width=width, members=_members))
    elif a.findings:  # an analysis built without incidents (the Python API, by hand)
        lines.append(f"findings ({len(a.findings)})")
        lines.extend(finding_lines(a.findings, verbose=verbose))
    elif any(not _absent(why) for why in a.skipped.values()):
        # "nothing looks wrong" is only true of what could be judged
        lines.append(
            "findings    none in what could be judged; some detectors could not judge the "
            "metrics this run has (see skipped)"
        )
    else:
        lines.append("findings    none — nothing looks wrong")
    if a.skipped:
        # a metric that is not logged is routine, one line; a detector that had the
        # metric but could not judge it (too few values...) gets a line of its own
        absent = [k for k, v in a.skipped.items() if _absent(v)]
        other = [(k, v) for k, v in a.skipped.items() if not _absent(v)]
        head = "skipped     "
        for name, why in other:
            lines.append(f"{head}{name}: {why}")
            head = "            "
        if absent:
            hint = "" if verbose else " (-v names them)"
            lines.append(f"{head}{', '.join(absent)}: their metrics are not logged{hint}")
            if verbose:
                for name in absent:
                    lines.append(f"              {name}: {a.skipped[name]}")
    # names, paths and messages hold text from the input: each line stays one line of
    # plain text (no ESC sequence, no newline that starts a forged ``::error`` line)
    return terminal_lines(lines)


def finding_lines(findings: Sequence[Finding], *, verbose: bool = False) -> list[str]:
    """A finding a line (severity, code, where, message) and, with ``verbose``, its
    evidence below: the layout of ``analyze`` and ``checkpoints`` alike."""
    lines = []
    for f in findings:
        lines.append(f"  {f.severity.value.upper():<7}  {f.code:<9} {f.where:<16} {f.message}")
        if verbose and f.evidence:
            ev = ", ".join(f"{k}={_fmt_ev(v)}" for k, v in f.evidence.items())
            lines.append(f"{'':30}evidence: {ev}")
    return lines


def _members(findings: Sequence[Finding]) -> list[str]:
    return finding_lines(findings, verbose=True)


def _absent(reason: str) -> bool:
    """A skip because the metric is not logged at all (the detectors' wording)."""
    return reason.rstrip(".").endswith("not logged")


def _fmt_ev(v: Any) -> str:
    if isinstance(v, float):
        return number_text(v)
    return str(v)


#: more runs than this are listed one line each (name, steps, worst incident), then the
#: incidents of the runs that have them: a W&B runs table of 64 runs printed ~800 lines
COMPACT_RUNS = 4


def render(analyses: Sequence[Analysis], *, verbose: bool = False, width: int | None = None) -> str:
    """Each run's summary and incidents; beyond COMPACT_RUNS runs, a line per run and the
    incidents of those that have them. ``width``: the terminal's (None: nothing cut or
    wrapped, for pipes and files)."""
    if len(analyses) <= COMPACT_RUNS:
        return (
            "\n\n".join(render_analysis(a, verbose=verbose, width=width) for a in analyses) + "\n"
        )
    lines = runs_table(analyses, width=width)
    for a in analyses:
        if a.incidents:
            lines += ["", f"{a.run.name}  ({a.run.format}: {a.run.source})"]
            lines.extend(incident_lines(a, verbose=verbose, width=width, members=_members))
    return terminal_lines(lines) + "\n"
