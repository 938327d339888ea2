"""Grouping findings into incidents: every rule in one place (docs/incidents.md).

Runs after the detectors, the cause step and the checkpoint audit
(:func:`trainlens.api.analyze_run`), and over the gate's findings too. Findings are
joined pairwise by the rules of :data:`RULES`, each a named function of two findings and
the onset tolerance; the incidents are the connected groups (union-find), so every
finding belongs to exactly one incident, and a finding no rule joins is an incident of
its own. Like Alertmanager's ``group_by`` and its inhibition of consequences by their
cause, or Sentry's fingerprint, but over one run's findings.

**Same onset.** Two findings start "together" when their starts lie within
max(``ONSET_STEPS`` = 10, ``ONSET_INTERVALS`` = 3 × the coarser logging interval of their
two metrics) steps: grad_spikes' lag window (10 steps or 3 logged intervals), the span
in which one event shows in one signal after another. The interval is the median step
difference of a metric's logged points, so a val loss evaluated every 401 steps (an HF
epoch) may start one evaluation later on a second eval set and still be the same event.

**Not merged:** findings with different onsets (beyond that tolerance) unless one rule
below names how one causes the other; the same code on two series that started at
different times; an LR problem inside a longer one (an LR shock at 400 inside an LR that
never decays from 51 is two problems); two loss rises with a gap between them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from trainlens.core.findings import Finding
from trainlens.core.incidents import Incident, incident_order

if TYPE_CHECKING:
    from trainlens.core.run import Run

LOSS = "train/loss"
ONSET_STEPS = 10
ONSET_INTERVALS = 3
#: the findings one slowdown shows as: throughput, a straggler rank, the loader's wait
SLOWDOWN = frozenset({"TPUT001", "TPUT002", "DATA004"})
#: loss events (the cause step's): what a data change or an optimizer blow-up reaches
LOSS_EVENTS = frozenset({"LOSS001", "LOSS003", "GRAD001", "NAN001"})

Tolerance = Callable[[Finding, Finding], int]
Rule = Callable[[Finding, Finding, Tolerance], bool]


def _start(f: Finding) -> int | None:
    return f.step_start if f.step_start is not None else f.step_end


def _end(f: Finding) -> int | None:
    return f.step_end if f.step_end is not None else f.step_start


def _near(x: int | None, y: int | None, tol: int) -> bool:
    return x is not None and y is not None and abs(x - y) <= tol


def _inside(step: int | None, f: Finding, tol: int) -> bool:
    a, b = _start(f), _end(f)
    return step is not None and a is not None and b is not None and a - tol <= step <= b + tol


def _family(code: str) -> str:
    return code.rstrip("0123456789")


def _either(rule: Callable[[Finding, Finding, int], bool]) -> Rule:
    """A rule stated one way round (``a`` the cause), tried both ways."""

    def both(a: Finding, b: Finding, tol: Tolerance) -> bool:
        t = tol(a, b)
        return rule(a, b, t) or rule(b, a, t)

    both.__doc__ = rule.__doc__
    return both


@_either
def nonfinite_spread(loss: Finding, other: Finding, tol: int) -> bool:
    """Once the loss is non-finite every series computed from it follows: a NAN001 that
    starts while the loss is NaN (from its onset to its end) is that NaN spreading (to the
    grad norms, the per-tensor series, the next evaluation), not a second event."""
    return (
        loss.code == other.code == "NAN001"
        and loss.metric == LOSS
        and _inside(_start(other), loss, 0)
        and (_start(other) or 0) >= (_start(loss) or 0) - tol
    )


def same_signature(a: Finding, b: Finding, tol: Tolerance) -> bool:
    """The same code starting together on several series is one problem seen several
    times: a regression on six eval sets (VAL001), two frozen embeddings in their grad
    norms and update ratios (TENSOR001), one drop in tokens/s and samples/s (TPUT001), a
    burst of loss spikes a few steps apart (LOSS001). Run-wide findings (no step) of one
    code are one, too."""
    if a.code != b.code:
        return False
    if _start(a) is None and _start(b) is None:
        return True
    return _near(_start(a), _start(b), tol(a, b))


def _links(f: Finding) -> list[dict[str, Any]]:
    chain = f.evidence.get("chain")
    return [c for c in chain if isinstance(c, dict)] if isinstance(chain, list) else []


def _on(metric: str | None, link: str) -> bool:
    return metric is not None and (metric == link or metric.startswith(link + "/"))


@_either
def cause_chain(event: Finding, other: Finding, tol: int) -> bool:
    """A loss event and what the cause step found moved before it are one incident: a
    finding on a metric of its chain (lr, loss scale, grad norm and its per-tensor series,
    update ratio, the loss itself) starting at that link's step, and another loss event
    with the same first mover at the same step (GRAD001 and LOSS003 of one LR shock)."""
    links = _links(event)
    if not links:
        return False
    fm, fm_step = event.evidence.get("first_mover"), event.evidence.get("first_mover_step")
    if (
        fm is not None
        and other.evidence.get("first_mover") == fm
        and isinstance(fm_step, int)
        and _near(fm_step, other.evidence.get("first_mover_step"), tol)
    ):
        return True
    return any(
        _on(other.metric, str(c.get("metric"))) and _near(_start(other), c.get("step"), tol)
        for c in links
    )


#: the optimizer's own signals: what one optimizer step moves together
OPTIMIZER_SIDE = ("lr", "loss_scale", "grad_norm", "update_ratio")


def optimizer_step(a: Finding, b: Finding, tol: Tolerance) -> bool:
    """Findings on the optimizer's own signals (lr, loss scale, grad norm, update ratio,
    and their per-tensor series) starting together are one step gone wrong: an LR ×40 and
    the grad-norm spike of the same step (LR001 and GRAD002) are one incident before the
    loss answers — when it does, the cause chain says the same."""
    return (
        a.code != b.code
        and any(_on(a.metric, m) for m in OPTIMIZER_SIDE)
        and any(_on(b.metric, m) for m in OPTIMIZER_SIDE)
        and _near(_start(a), _start(b), tol(a, b))
    )


@_either
def one_slowdown(a: Finding, b: Finding, tol: int) -> bool:
    """One slowdown is one incident however it shows: tokens/s or samples/s dropping
    (TPUT001), a straggler rank (TPUT002), the loader's wait rising (DATA004) — when they
    start together (a loader that waits 1.2× the compute time *is* the throughput drop)."""
    return (
        a.code in SLOWDOWN
        and b.code in SLOWDOWN
        and a.code != b.code
        and _near(_start(a), _start(b), tol)
    )


@_either
def restart_reset(restart: Finding, lr: Finding, tol: int) -> bool:
    """A restart (DATA001) and an LR finding starting at the resumed step are the resume
    and what it did to the schedule (a scheduler not restored: LR006)."""
    return (
        restart.code == "DATA001"
        and _family(lr.code) == "LR"
        and _near(_start(restart), _start(lr), tol)
    )


@_either
def schedule_handover(a: Finding, b: Finding, tol: int) -> bool:
    """Two LR diagnoses on ``lr`` where one ends and the next begins are one schedule off
    its plan (an LR falling too fast, LR001, until it is zero, LR005). One that starts
    inside another is not: it is a second problem in the same series."""
    return (
        _family(a.code) == _family(b.code) == "LR"
        and a.metric == b.metric == "lr"
        and a.code != b.code
        and _near(_end(a), _start(b), tol)
    )


@_either
def data_change(change: Finding, event: Finding, tol: int) -> bool:
    """A change in the batches (padding high, DATA003) and a loss event starting with it or
    just after: fewer real tokens per batch move the mean loss per token."""
    start = _start(change)
    ev = _start(event)
    return (
        change.code == "DATA003"
        and event.code in LOSS_EVENTS
        and event.metric == LOSS
        and start is not None
        and ev is not None
        and start - tol <= ev <= start + tol
    )


@_either
def spike_in_rise(rise: Finding, spike: Finding, tol: int) -> bool:
    """A loss spike (LOSS001) inside a sustained loss rise (LOSS003) on the same series is
    part of that rise (a spike that never came back is already folded into it)."""
    return (
        rise.code == "LOSS003"
        and spike.code == "LOSS001"
        and rise.metric == spike.metric
        and _inside(_start(spike), rise, 0)
    )


#: every grouping rule, by name (the name is what an incident's ``rules`` lists)
RULES: dict[str, Rule] = {
    "nonfinite-spread": nonfinite_spread,
    "same-signature": same_signature,
    "cause-chain": cause_chain,
    "optimizer-step": optimizer_step,
    "one-slowdown": one_slowdown,
    "restart-reset": restart_reset,
    "schedule-handover": schedule_handover,
    "data-change": data_change,
    "spike-in-rise": spike_in_rise,
}


def logging_intervals(run: Run, metrics: Iterable[str | None]) -> dict[str, int]:
    """The median step difference of each metric's logged points (1 when unknown)."""
    import numpy as np

    out: dict[str, int] = {}
    for m in {m for m in metrics if m}:
        if not run.has(m):
            continue
        steps = run.series(m)[0]
        if steps.size >= 2:
            out[m] = max(1, int(np.median(np.diff(steps))))
    return out


def tolerance(intervals: dict[str, int]) -> Tolerance:
    def tol(a: Finding, b: Finding) -> int:
        every = max(intervals.get(a.metric or "", 1), intervals.get(b.metric or "", 1))
        return max(ONSET_STEPS, ONSET_INTERVALS * every)

    return tol


def group(
    findings: Sequence[Finding],
    intervals: dict[str, int] | None = None,
    rules: dict[str, Rule] | None = None,
) -> list[Incident]:
    """The incidents of ``findings`` (each finding in exactly one), worst first."""
    rules = RULES if rules is None else rules
    tol = tolerance(intervals or {})
    parent = list(range(len(findings)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    joined: dict[int, set[str]] = {}
    for i, j in _candidate_pairs(findings, intervals or {}):
        for name, rule in rules.items():
            if rule(findings[i], findings[j], tol):
                a, b = root(i), root(j)
                merged = joined.pop(a, set()) | joined.pop(b, set()) | {name}
                parent[b] = a
                joined[a] = merged
                break
    groups: dict[int, list[int]] = {}
    for i in range(len(findings)):
        groups.setdefault(root(i), []).append(i)
    incidents = [
        _incident(findings, members, tuple(sorted(joined.get(r, set()))))
        for r, members in groups.items()
    ]
    return _unique_ids(incident_order(incidents))


def _is_anchor(f: Finding) -> bool:
    """A finding a rule may join to one that starts far from it: the loss's NaN (its whole
    range), a loss rise (its spikes), an LR diagnosis (the next one), a loss event with a
    cause chain (its links)."""
    return (
        (f.code == "NAN001" and f.metric == LOSS)
        or f.code == "LOSS003"
        or (_family(f.code) == "LR" and f.metric == "lr")
        or bool(_links(f))
    )


def _candidate_pairs(
    findings: Sequence[Finding], intervals: dict[str, int]
) -> set[tuple[int, int]]:
    """The pairs any rule could join, without trying all n² of them: those starting within
    the widest onset tolerance of each other (a sweep over the sorted starts), the
    findings without a step among themselves, and every anchor with every finding. 1,000
    findings of 7 codes at random steps: 0.15 s, where trying every pair took 19 s (the
    build machine, loaded; 200 findings: 0.04 s against 0.95 s)."""
    widest = max(ONSET_STEPS, ONSET_INTERVALS * max(intervals.values(), default=1))
    stepped = sorted((s, i) for i, f in enumerate(findings) if (s := _start(f)) is not None)
    pairs: set[tuple[int, int]] = set()
    for k, (s, i) in enumerate(stepped):
        for s2, j in stepped[k + 1 :]:
            if s2 - s > widest:
                break
            pairs.add((min(i, j), max(i, j)))
    stepless = [i for i, f in enumerate(findings) if _start(f) is None]
    pairs.update((a, b) for x, a in enumerate(stepless) for b in stepless[x + 1 :])
    anchors = [i for i, f in enumerate(findings) if _is_anchor(f)]
    pairs.update((min(a, j), max(a, j)) for a in anchors for j in range(len(findings)) if a != j)
    return pairs


def incidents_of(run: Run, findings: Sequence[Finding]) -> list[Incident]:
    """:func:`group` with the run's logging intervals."""
    return group(findings, logging_intervals(run, (f.metric for f in findings)))


def _headline_key(f: Finding, i: int) -> tuple[int, int, int, int, int]:
    """Worst first; then a loss event that carries its cause; then the earliest; then the
    loss before other series; then the detectors' order."""
    start = _start(f)
    return (
        -f.severity.rank,
        0 if _links(f) and f.evidence.get("first_mover") else 1,
        start if start is not None else -1,
        0 if f.metric == LOSS else 1,
        i,
    )


_PARENS = re.compile(r"\s*\([^()]*\)")
_NAME = "\ue000"  # a private-use character standing for the metric's name in title_of
#: a title longer than this is cut at a word (a headline must fit a terminal line with its
#: severity, steps and first mover: 80 columns leave ~70 for the title in most cases)
TITLE_CHARS = 90


def title_of(f: Finding) -> str:
    """The finding's message up to its first clause, without its parentheses: ``grad_norm
    spiked at step 400 and loss followed at step 401`` (the numbers and the advice stay in
    the message, shown beneath)."""
    text = f.message.strip()
    # the metric's name is the input's and may hold "(", ": " or "; " itself
    # (``loss(train)``): kept whole while the message is shortened
    name = f.metric or ""
    if name and name in text:
        text = text.replace(name, _NAME)
    while True:
        shorter = _PARENS.sub("", text)
        if shorter == text:
            break
        text = shorter
    for sep in ("; ", ": ", " — "):
        k = text.find(sep)
        if k >= 20:
            text = text[:k]
    text = text.rstrip(" .,")
    if len(text) > TITLE_CHARS:  # (the name counts one character: it is never cut)
        text = text[: TITLE_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return text.replace(_NAME, name)


def _incident(findings: Sequence[Finding], members: list[int], rules: tuple[str, ...]) -> Incident:
    ordered = sorted(members, key=lambda i: _headline_key(findings[i], i))
    head = findings[ordered[0]]
    fs = [findings[i] for i in ordered]
    starts = [s for s in (_start(f) for f in fs) if s is not None]
    ends = [e for e in (_end(f) for f in fs) if e is not None]
    onset = min(starts) if starts else None
    carrier = next((f for f in fs if _links(f) and f.evidence.get("first_mover")), None)
    chain: tuple[dict[str, Any], ...] = ()
    first: str | None = None
    first_step: int | None = None
    if carrier is not None:
        chain = tuple(dict(c) for c in _links(carrier))
        first = str(carrier.evidence["first_mover"])
        step = carrier.evidence.get("first_mover_step")
        first_step = step if isinstance(step, int) else None
    else:
        # no cause chain: the member that started strictly before the others moved first
        early = sorted((s, f.metric or "") for f in fs if (s := _start(f)) is not None)
        if len(early) > 1 and early[0][0] < early[1][0]:
            first, first_step = early[0][1] or None, early[0][0]
    severity = max((f.severity for f in fs), key=lambda s: s.rank)
    return Incident(
        id=f"{head.code}@{onset if onset is not None else 'run'}",
        code=head.code,
        name=head.name,
        severity=severity,
        title=title_of(head),
        step_start=onset,
        step_end=max(ends) if ends else None,
        onset=onset,
        first_mover=first,
        first_mover_step=first_step,
        chain=chain,
        members=tuple(ordered),
        codes=tuple(dict.fromkeys(f.code for f in fs)),
        metrics=tuple(dict.fromkeys(f.metric for f in fs if f.metric)),
        rules=rules,
    )


def _unique_ids(incidents: list[Incident]) -> list[Incident]:
    import dataclasses

    seen: dict[str, int] = {}
    out = []
    for inc in incidents:
        n = seen.get(inc.id, 0) + 1
        seen[inc.id] = n
        out.append(inc if n == 1 else dataclasses.replace(inc, id=f"{inc.id}#{n}"))
    return out
