"""CKPT findings over an audited :class:`Inventory` (and, when known, the run's steps).

| code | name | severity |
|---|---|---|
| CKPT001 | broken-checkpoint | error |
| CKPT002 | broken-latest-pointer | error |
| CKPT003 | checkpoint-cadence-gap | warning |
| CKPT004 | no-recent-checkpoint | warning (needs the run's last step) |
| CKPT005 | checkpoint-size-drift | warning |
| CKPT006 | checkpoint-save-stall | info · warning (needs the run's wall times) |
| CKPT007 | code-running-pickle | error |
| CKPT010 | path-outside-checkpoint | error |
| CKPT011 | checkpoint-audit-over-budget | error |

Every finding that advises going back names the newest intact checkpoint before its
step ("go back to checkpoint-600, saved 12:03, intact"). Thresholds and their reasons:
:class:`Params`, docs/checkpoints.md.
"""

from __future__ import annotations

import bisect
import itertools
import os
import statistics
import time
from collections.abc import Sequence

from trainlens.checkpoints._model import Checkpoint, Inventory
from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding, Severity

CODES = {
    "CKPT001": "broken-checkpoint",
    "CKPT002": "broken-latest-pointer",
    "CKPT003": "checkpoint-cadence-gap",
    "CKPT004": "no-recent-checkpoint",
    "CKPT005": "checkpoint-size-drift",
    "CKPT006": "checkpoint-save-stall",
    "CKPT007": "code-running-pickle",
    # CKPT008 and CKPT009 are the gate's (trainlens.core.codes)
    "CKPT010": "path-outside-checkpoint",
    "CKPT011": "checkpoint-audit-over-budget",
}


@dataclass(frozen=True)
class Params:
    #: a gap of at least this many save intervals is a missing save (1.5: one interval
    #: and a half cannot be a cadence's jitter; HF/Lightning save on exact multiples)
    gap_intervals: float = 1.5
    #: the cadence is the most common step difference, seen at least this many times
    min_cadence_seen: int = 2
    #: no checkpoint in this last fraction of the run is a warning (a crash there loses
    #: it all; 20 %: one fifth of the compute)
    recent_frac: float = 0.2
    #: a save this far from the median size of its kind (ratio, either way) is drift
    #: (a checkpoint half the size lost its optimizer state or a shard)
    size_ratio: float = 1.5
    #: at least this many saves of one kind to judge cadence and size
    min_saves: int = 3
    #: a pause around a save shorter than this is not counted (as DATA002's `min_gap_s`:
    #: pauses under a second are garbage collection and logging, and a tiny model's save)
    min_pause_s: float = 1.0
    #: saving's share of the run's wall time that is reported (info) ...
    stall_share: float = 0.05
    #: ... and that is a warning
    stall_warn_share: float = 0.15


@dataclass(frozen=True)
class RunSteps:
    """What the CKPT findings need from a run: its logged steps and their wall times."""

    steps: Sequence[int]
    wall_times: Sequence[float | None]

    @property
    def last_step(self) -> int | None:
        return max(self.steps) if self.steps else None


def clock(ts: float | None) -> str:
    """``12:03`` for today, else ``2026-11-30 12:03`` (local time: where the user is)."""
    if ts is None:
        return "at an unknown time"
    lt, now = time.localtime(ts), time.localtime()
    if (lt.tm_year, lt.tm_yday) == (now.tm_year, now.tm_yday):
        return time.strftime("%H:%M", lt)
    return time.strftime("%Y-%m-%d %H:%M", lt)


def restart_from(inv: Inventory, before: int | None) -> Checkpoint | None:
    """The newest intact checkpoint saved before step ``before`` (any step when None)."""
    ok = [c for c in inv.checkpoints if c.intact and c.step is not None]
    if before is not None:
        ok = [c for c in ok if c.step is not None and c.step < before]
    return max(ok, key=lambda c: (c.step or 0, c.wall_time or 0.0), default=None)


def advice(inv: Inventory, before: int | None) -> str:
    """'go back to checkpoint-600 (step 600, saved 12:03, intact)', or why there is none."""
    c = restart_from(inv, before)
    if c is None:
        where = f" before step {before}" if before is not None else ""
        return f"no intact checkpoint{where} to go back to"
    return f"go back to {c.name} (step {c.step}, saved {clock(c.wall_time)}, intact)"


def _finding(code: str, sev: str, msg: str, step: int | None, **evidence: object) -> Finding:
    return Finding(code, CODES[code], Severity(sev), None, step, step, msg, dict(evidence))


def findings(
    inv: Inventory, params: Params | None = None, run: RunSteps | None = None
) -> list[Finding]:
    """Every CKPT finding about this inventory, by step."""
    p = params or Params()
    out = _broken(inv) + _pointers(inv) + _outside(inv)
    for group in _by_kind(inv).values():
        out += _cadence(inv, group, p) + _size_drift(inv, group, p)
    if run is not None:
        out += _recent(inv, run, p) + _save_stalls(inv, run, p)
    out.sort(key=lambda f: (f.step_start if f.step_start is not None else -1, f.code))
    return out


def _broken(inv: Inventory) -> list[Finding]:
    out = []
    for c in inv.checkpoints:
        unsafe = [pr for pr in c.problems if pr.status == "unsafe"]
        unread = [pr for pr in c.problems if pr.status == "over-budget"]
        damage = [pr for pr in c.problems if pr.status not in ("unsafe", "outside", "over-budget")]
        if unsafe:
            msg = (
                f"{c.name}: {unsafe[0].text()}; do not load it (not even with torch.load), "
                "find who wrote it"
            )
            out.append(_finding("CKPT007", "error", msg, c.step, path=c.path, files=_texts(unsafe)))
        if unread:
            msg = (
                f"{c.name}: {unread[0].text()}; a real checkpoint's pickles are far smaller "
                "(a memo or opcode bomb makes a load take gigabytes), so do not load it "
                "until you know who wrote it"
            )
            out.append(_finding("CKPT011", "error", msg, c.step, path=c.path, files=_texts(unread)))
        if damage:
            first = damage[0].message if damage[0].file == c.name else damage[0].text()
            msg = (
                f"{c.name} is {c.status}: {first}"
                + (f" (and {len(damage) - 1} more)" if len(damage) > 1 else "")
                + f"; {advice(inv, c.step)}"
            )
            out.append(
                _finding(
                    "CKPT001",
                    "error",
                    msg,
                    c.step,
                    path=c.path,
                    integrity=c.status,
                    problems=_texts(damage),
                    restart_from=_restart_path(inv, c.step),
                )
            )
    return out


def _texts(problems: Sequence[object]) -> list[str]:
    return [pr.text() for pr in problems]  # type: ignore[attr-defined]


def _restart_path(inv: Inventory, step: int | None) -> str | None:
    c = restart_from(inv, step)
    return c.path if c else None


def _pointers(inv: Inventory) -> list[Finding]:
    out = []
    for ptr in inv.pointers:
        if ptr.refused is not None:  # CKPT010's
            continue
        target = inv.by_path(ptr.resolved) if ptr.resolved else None
        if ptr.resolved is not None and (target is None or target.intact):
            continue
        why = "which does not exist" if ptr.resolved is None else f"which is {target.status}"  # type: ignore[union-attr]
        msg = (
            f"{ptr.path} names {ptr.target!r}, {why}: a resume that follows it fails or "
            f"starts over; {advice(inv, None)} and rewrite the pointer"
        )
        step = target.step if target is not None else None
        out.append(
            _finding(
                "CKPT002",
                "error",
                msg,
                step,
                pointer=ptr.path,
                target=ptr.target,
                resolved=ptr.resolved,
                restart_from=_restart_path(inv, None),
            )
        )
    return out


def _outside(inv: Inventory) -> list[Finding]:
    """A checkpoint whose files name paths outside it (or hold a link leading out), and a
    pointer naming a folder outside its own: none of it was opened, and a loader that
    follows the name reads whatever file is there."""
    out = []
    for c in inv.checkpoints:
        names = [pr for pr in c.problems if pr.status == "outside"]
        if names:
            more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
            msg = (
                f"{c.name}: {names[0].text()}{more}; do not load it (a loader reads what the "
                "name leads to), find who wrote it"
            )
            out.append(_finding("CKPT010", "error", msg, c.step, path=c.path, files=_texts(names)))
    for ptr in inv.pointers:
        if ptr.refused is not None:
            msg = (
                f"{ptr.path} names {ptr.target!r}, which {ptr.refused}; not followed: a resume "
                f"that follows it loads from elsewhere; {advice(inv, None)} and rewrite the pointer"
            )
            out.append(_finding("CKPT010", "error", msg, None, pointer=ptr.path, target=ptr.target))
    return out


def _by_kind(inv: Inventory) -> dict[tuple[str, str], list[Checkpoint]]:
    """The saves of one series: one kind in one folder (two runs under one root are two)."""
    groups: dict[tuple[str, str], list[Checkpoint]] = {}
    for c in inv.checkpoints:
        if c.step is not None:
            groups.setdefault((c.kind, os.path.dirname(c.path.rstrip("/"))), []).append(c)
    return groups


def _cadence(inv: Inventory, group: list[Checkpoint], p: Params) -> list[Finding]:
    """A save missing where the interval says one should be. The interval is the most
    common step difference; the first difference is never judged (HF's save_total_limit
    keeps the best checkpoint apart from the latest ones: a gap by design)."""
    steps = sorted({c.step for c in group if c.step is not None})
    if len(steps) < p.min_saves or any(c.selective for c in group):
        return []
    diffs = [b - a for a, b in itertools.pairwise(steps)]
    interval = save_interval(steps, p.min_cadence_seen)
    if interval is None:
        return []
    out = []
    for i, d in enumerate(diffs[1:], start=1):
        if d >= p.gap_intervals * interval:
            a, b = steps[i], steps[i + 1]
            missing = round(d / interval) - 1
            msg = (
                f"no {group[0].kind} checkpoint between step {a} and step {b} "
                f"({missing} save(s) missing at the usual {interval}-step interval): "
                "a failed or skipped save, or one deleted since"
            )
            out.append(
                _finding(
                    "CKPT003",
                    "warning",
                    msg,
                    a + interval,
                    previous_step=a,
                    next_step=b,
                    interval=interval,
                    missing=missing,
                )
            )
    return out


def save_interval(steps: Sequence[int], min_seen: int = 2) -> int | None:
    """The save cadence: the most common positive step difference between saves (the
    first of equals), when seen at least ``min_seen`` times."""
    diffs = [b - a for a, b in itertools.pairwise(sorted(set(steps))) if b > a]
    if not diffs:
        return None
    interval = statistics.multimode(diffs)[0]
    return interval if diffs.count(interval) >= min_seen else None


def _size_drift(inv: Inventory, group: list[Checkpoint], p: Params) -> list[Finding]:
    sized = [c for c in group if c.size > 0]
    if len(sized) < p.min_saves:
        return []
    med = statistics.median(c.size for c in sized)
    out = []
    for c in sized:
        ratio = c.size / med
        if ratio <= 1 / p.size_ratio or ratio >= p.size_ratio:
            msg = (
                f"{c.name} is {bytes_text(c.size)}, {ratio:.2g}× the median {bytes_text(med)} of "
                f"{len(sized)} {c.kind} saves: a lost optimizer state or shard, or a "
                "changed model; check it before relying on it"
            )
            out.append(
                _finding(
                    "CKPT005",
                    "warning",
                    msg,
                    c.step,
                    path=c.path,
                    size=c.size,
                    median_size=med,
                    ratio=round(ratio, 4),
                )
            )
    return out


def _recent(inv: Inventory, run: RunSteps, p: Params) -> list[Finding]:
    last = run.last_step
    steps = [c.step for c in inv.checkpoints if c.intact and c.step is not None]
    if not last or not inv.checkpoints:  # none found: kept elsewhere, not judged
        return []
    newest = max(steps, default=None)
    if newest is not None and newest >= (1 - p.recent_frac) * last:
        return []
    since = (
        "no intact checkpoint"
        if newest is None
        else f"the newest intact checkpoint is at step {newest}"
    )
    lost = last - (newest or 0)
    msg = (
        f"the run reached step {last} but {since}: a crash now loses {lost} steps "
        f"({lost / last:.0%} of the run); save more often or check that saves succeed"
    )
    return [_finding("CKPT004", "warning", msg, last, last_step=last, newest_intact_step=newest)]


def _save_stalls(inv: Inventory, run: RunSteps, p: Params) -> list[Finding]:
    """The wall time between the logged step at or before a save and the next one,
    beyond what the steps between them take at the run's median pace."""
    pts = sorted((s, w) for s, w in zip(run.steps, run.wall_times, strict=False) if w is not None)
    if len(pts) < 3:
        return []
    pace = [
        (w2 - w1) / (s2 - s1)
        for (s1, w1), (s2, w2) in itertools.pairwise(pts)
        if s2 > s1 and w2 >= w1
    ]
    if not pace:
        return []
    per_step = statistics.median(pace)
    total = pts[-1][1] - pts[0][1]
    at = [s for s, _ in pts]
    pauses: dict[int, float] = {}
    for c in inv.checkpoints:
        if c.step is None:
            continue
        i = bisect.bisect_right(at, c.step) - 1  # the last logged step at or before the save
        if i < 0 or i + 1 >= len(pts):
            continue
        (s1, w1), (s2, w2) = pts[i], pts[i + 1]
        pause = (w2 - w1) - per_step * (s2 - s1)
        if pause >= p.min_pause_s:
            pauses[c.step] = pause
    spent = sum(pauses.values())
    share = spent / total if total > 0 else 0.0
    if not pauses or share < p.stall_share:
        return []
    worst = max(pauses, key=lambda k: pauses[k])
    sev = "warning" if share >= p.stall_warn_share else "info"
    msg = (
        f"saving {len(pauses)} checkpoints took {share:.0%} of the run's wall time "
        f"(median {statistics.median(pauses.values()):.3g} s a save, {pauses[worst]:.3g} s "
        f"at step {worst}, against {per_step:.3g} s a step): save less often, "
        "asynchronously, or to faster storage"
    )
    return [
        _finding(
            "CKPT006",
            sev,
            msg,
            worst,
            share_of_wall_time=round(share, 4),
            seconds_saving=round(spent, 3),
            seconds_per_step=per_step,
            pause_by_step={str(k): round(v, 3) for k, v in sorted(pauses.items())},
        )
    ]


def bytes_text(n: float) -> str:
    """``1.23 GB``: a size in decimal units, three significant digits."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"
