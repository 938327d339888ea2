"""Throughput: a sustained drop in tokens/s (or samples/s, or a rise in step time), and
per-rank stragglers.

Needs `tokens_per_sec`, `samples_per_sec`, `step_time` or `train_time` (or per-rank
versions of them) · real logs: `tests/test_system_detectors_real.py`

Severity by code
    | code | name | severity |
    |---|---|---|
    | TPUT001 | throughput-drop | info (3–10 %, transient, or right after a short fast start) · warning (≥ 10 % and sustained) |
    | TPUT002 | straggler-rank | info (5–10 % slower) · warning (≥ 10 % slower) |

What it flags
    - **TPUT001** — a change point after which the run's throughput stays lower: the step it
      began (`step_start`), the level before and after in the metric's own units (`before`,
      `after`), the percentage lost (`drop_pct`), and, when it came back, `recovered_step`.
      Later, smaller falls with no recovery in between belong to the same episode
      (`total_drop_pct`, `lowest`, `lowest_step`). Other evidence: `kept_drop_pct` (what is
      still lost at the end), `partly_recovered_step`, `recent_level`, `established_before`,
      `duration_steps`, `share_of_run`, `n_before`, `n_after`, `fall_end_step`, `source`.
    - **TPUT002** — with per-rank metrics, one rank persistently slower than the median of
      the others: `rank`, `slower_pct`, `ranks`, `share_of_steps`, the step range.

    The signal is the first of these that the run logged:

    | metric | read as |
    |---|---|
    | `tokens_per_sec` | throughput |
    | `samples_per_sec` | throughput (Megatron's "samples per second") |
    | `step_time` | seconds per step: a rise is a drop (`drop_pct` is the throughput lost) |
    | `train_time` | cumulative training seconds (modded-nanogpt's `train_time`): the per-step increments; a decrease (a timer reset) is skipped |
    | per-rank only | the per-step median over ranks |

    ### Per-rank naming convention (TPUT002)

    `<metric>/rank<N>`, `<metric>_rank<N>`, `<metric>.rank<N>`, `<metric>-rank<N>`,
    `rank<N>/<metric>` (and `rank_<N>` in each), where `<metric>` is any spelling the alias
    table maps to `tokens_per_sec`, `samples_per_sec` or `step_time` — so
    `step_time/rank3`, `tokens_per_sec_rank0`, `rank7/tokens_per_sec` and
    `step_time_ms/rank2` (milliseconds) all work. At least two ranks are needed. The
    median of the others is computed leaving the rank out (more than 64 ranks: the median
    of all).

    ### Method

    1. The log of the throughput (rate, or 1/step time) is median-filtered over about half
       the minimum duration, so slow stretches shorter than that — an eval, a checkpoint
       save, a recompile — vanish. Series longer than 20 000 points are first reduced to
       block medians (the levels and steps are still computed on every value).
    2. Binary segmentation (Scott & Knott 1974; the `BinSeg` of Killick & Eckley's
       `changepoint` package) on the L2 cost, largest gain first, with a penalty of
       max(2 σ² log n — BIC-style, σ the robust point-to-point noise —, the gain of the
       smallest reportable drop over the minimum duration).
    3. Segments too short (fewer than `min_points` points or less than
       `min_duration_frac` of the run's steps) are merged into their closest neighbour;
       neighbours whose medians differ by less than `min_drop`, or by fewer than `z_min`
       robust standard errors (pooled MAD), are merged.
    4. Each fall between consecutive levels is a drop, if it is also below the median of
       everything before it (the return from a fast stretch is not a drop). A quick
       staircase down (intermediate levels shorter than 5 % of the run) is one transition,
       starting at its first substantial step; later, smaller falls with no rise in between
       extend the episode ("kept falling to …"). The step is refined on the raw values (the
       split that minimizes the absolute deviation from the two levels), and the low
       stretch measured from there must itself last the minimum duration. **Recovered**: a
       later level back within a quarter of the fall; **partly recovered**: from some level
       on, the rest of the run is on average at least half-way back.
    5. **Warning** only when all of these hold — otherwise info:
       - the drop is ≥ `warn_drop` against the level just before, against the median of the
         `sustained_frac` (10 %) of the run before it (that stretch must exist: a drop right
         after a short fast start is not judged against it), and what is still lost at the
         end (from a partial recovery on) is ≥ `warn_drop` too;
       - it lasted `sustained_frac` of the run when it persists to the end, or
         `recovered_frac` when it ended by itself.

       A dip below `warn_drop` that recovered within `sustained_frac` of the run is not
       reported at all (the everyday noise of a shared machine).
    6. Stragglers: per rank, the lag behind the median of the other ranks (log units),
       median-filtered; stretches above `straggler_min` that last the minimum duration and
       whose median lag is `z_min` standard errors above zero.

Why it matters
    Throughput is cost: a 10 % drop in a month-long job is three lost days on every GPU. A
    sudden sustained drop usually has one cause worth finding — a slow or throttling GPU
    (BLOOM-176B lost ~5 % to one slow GPU from iteration 42783 until the node was found and
    excluded), a degraded network link, a competing host process, a data-loader or storage
    change. A synchronous data-parallel job runs at the pace of its slowest rank, so one
    straggler slows every GPU.

Default thresholds and their source
    | parameter | default | meaning / source |
    |---|---|---|
    | `min_drop` | 0.03 | smallest drop reported (info): run-to-run timing variation of a few percent is noise on shared clusters (MLPerf Training's rules accept it between submissions) |
    | `warn_drop` | 0.10 | a sustained drop this large is a warning: three days of a month-long job; below it, data-dependent step times and shared clusters move throughput routinely |
    | `min_duration_frac`, `min_points` | 0.02, 3 | a level must last 2 % of the run's steps and 3 logged points (sparse logs: the BLOOM notes quote three lines after the drop) |
    | `sustained_frac` | 0.10 | a drop that lasts to the end of the run must cover 10 % of it to be a warning; it is also the length of the "recent level" a warning compares with |
    | `recovered_frac` | 0.25 | a drop that ended by itself must have lasted 25 % of the run to be a warning: transient slowdowns that go away on their own are usually a neighbour's job (shared nodes) or a filesystem having a bad hour — info |
    | `z_min` | 5 | two levels must differ by 5 robust standard errors |
    | `max_filter` | 101 | the largest median-filter window (points) |
    | `straggler_min`, `straggler_warn` | 0.05, 0.10 | a rank 5 % slower than the others is info, 10 % a warning (the same bands as the drop) |
    | `max_findings` | 5 | per code; warnings first, then the largest |

    **Why the BLOOM drop is info.** It is real — 149 → ~141 TFLOPs, caused by one GPU — but
    at ~4–5 % it is inside the band where shared-cluster contention and data-dependent step
    times also move throughput, and a detector judged on runs it has never seen cannot tell
    the two apart from the numbers alone. It is reported (with step, levels and percentage),
    just not as a warning; on a dedicated cluster set `warn_drop = 0.05` (or
    `[tool.trainlens.severity] TPUT001 = "warning"`).

Known false positives
    - Planned changes in work per step: a sequence-length or batch-size ramp (Megatron's
      `--rampup-batch-size`), curriculum data with longer sequences, a larger eval inside
      the timed region. Step time alone cannot see the work per step; a step-time staircase
      whose rises sit at equal stages from the run's start (the k-th within 1 % of the run of
      k times the first, at least two rises) is the shape of such a schedule and is reported
      as info, saying so (modded-nanogpt's batch-size schedule in thirds of the run: 45 of
      113 record logs had a false warning). A schedule in unequal stages still warns (one
      modded-nanogpt record, 2026-06-11 RecursiveFromBest, stages of 499/444/444 steps).
    - A job that moved to other (slower) hardware on a restart.
    - `tokens_per_sec` counting only non-padding tokens falls when padding rises (DATA003).
    - A gradual decline (fragmentation, a dataset whose items grow) is reported as a few
      smaller drops (info each) rather than one trend.

Measured
    - BLOOM-176B chronicles (18 quoted lines with `samples per second`, iterations
      12695–45000): **TPUT001 info at 42783**, 19.28 → 18.45 samples/s (−4.3 %), not
      recovered (the notes: "dropped by 5 %", 149 → 140 TFLOPs).
    - modded-nanogpt: AdamW and llm.c logs have no throughput metric (skipped); the Muon log's
      `train_time` increments (0.21 s/step, timer reset after step 10) give no finding.
    - Fixture runs (generated on a shared 2-core machine whose other jobs slow a run by
      20–35 % for 20–250 steps at a time; the committed set and three local generations):
      `throughput_drop` **warning at 500** (−32 to −36 %, not recovered; in one local
      generation a second warning at 774, when the shared machine slowed the already slowed
      run further); `slow_loader` **warning at 300** (−49 to −56 %); healthy runs and the
      other fault runs: transient dips as info only — except one local generation of
      `overfit` whose last 24 % ran 26 % slower (a neighbour's job that never left): a
      warning the data cannot tell from a real fault.
    - 1M steps of log-normal (σ 0.2) noise with a 20 % drop at 700 000: found within a few
      steps, about 1 s for the detection (plus reading the series).

Example
    ```
      WARNING  TPUT001   step 500  tokens_per_sec fell 32% at step 500 (from 4.35e+04 to 2.95e+04) and stayed there to the last logged step (1000, 501 steps); look for a slow or throttled GPU, a competing process, or a data-loader/IO change at that step.
      INFO     TPUT001   step 42783  samples_per_sec fell 4% at step 42783 (from 19.28 to 18.45) and stayed there to the last logged step (45000, 2218 steps); look for a slow or throttled GPU, a competing process, or a data-loader/IO change at that step.
    ```
"""  # noqa: E501  (tables: one row a line)

from __future__ import annotations

import math
import re

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.names import AliasTable
from trainlens.core.run import Run
from trainlens.core.stats import (
    centered_median,
    nanmedian_rows,
    odd,
    robust_sigma,
    runs_of,
)
from trainlens.detectors._tput_drops import Signal, drops
from trainlens.detectors.base import Context, Skip, finding

CODES = {"TPUT001": "throughput-drop", "TPUT002": "straggler-rank"}

RATE_METRICS = ("tokens_per_sec", "samples_per_sec")
TIME_METRICS = ("step_time",)
RANKED_BASES = ("tokens_per_sec", "samples_per_sec", "step_time")

_RANK_PATTERNS = (
    re.compile(r"^(?P<base>.+?)[/_.\-]rank[_\-]?(?P<rank>\d+)$", re.IGNORECASE),
    re.compile(r"^rank[_\-]?(?P<rank>\d+)[/_.\-](?P<base>.+)$", re.IGNORECASE),
)


@dataclass(frozen=True)
class Params:
    #: smallest sustained drop reported (fraction of the level before), as info
    min_drop: float = 0.03
    #: a drop at least this large is a warning
    warn_drop: float = 0.10
    #: a level must last this fraction of the run's step span ...
    min_duration_frac: float = 0.02
    #: ... and at least this many logged points
    min_points: int = 3
    #: a drop is a warning only when it lasts this fraction of the run (or more);
    #: shorter ones that recover are transient (info)
    sustained_frac: float = 0.10
    #: ... and one that recovered by itself, this fraction
    recovered_frac: float = 0.25
    #: two levels must differ by this many robust standard errors
    z_min: float = 5.0
    #: the largest median-filter window (points)
    max_filter: int = 101
    #: a step-time staircase whose rises sit at equal stages from the run's start (the
    #: k-th within this share of the run of k times the first) is a planned schedule
    stage_tol_frac: float = 0.01
    #: a rank this much slower than the median of the others is a straggler (info)
    straggler_min: float = 0.05
    #: ... and a warning from this much
    straggler_warn: float = 0.10
    #: at most this many findings per code
    max_findings: int = 5


# ---- TPUT001 ------------------------------------------------------------------------------


def _signal(run: Run, ranked: dict[str, dict[int, str]]) -> Signal | None:
    for m in RATE_METRICS:
        if run.has(m):
            s, v = run.series(m, finite=True)
            ok = v > 0
            return Signal(m, s[ok], np.log(v[ok]), "rate")
    for m in TIME_METRICS:
        if run.has(m):
            s, v = run.series(m, finite=True)
            ok = v > 0
            return Signal(m, s[ok], -np.log(v[ok]), "time")
    if run.has("train_time"):
        s, v = run.series("train_time", finite=True)
        ds, dv = np.diff(s), np.diff(v)
        ok = (ds > 0) & (dv > 0)  # a reset of the timer (dv < 0) is not a step
        if ok.sum() >= 3:
            per_step = dv[ok] / ds[ok]
            return Signal(
                "train_time",
                s[1:][ok],
                -np.log(per_step),
                "time",
                note="seconds per step from the increments of train_time",
            )
    for base in RANKED_BASES:
        ranks = ranked.get(base)
        if not ranks:
            continue
        wide = run.wide(list(ranks.values()))
        mat = wide.select(list(ranks.values())).to_numpy().astype(np.float64)
        mat[~(mat > 0)] = np.nan
        med = nanmedian_rows(np.log(mat))
        s = wide.get_column("step").to_numpy()
        ok = np.isfinite(med)
        kind = "time" if base == "step_time" else "rate"
        y = med[ok] if kind == "rate" else -med[ok]
        return Signal(base, s[ok], y, kind, note=f"median over {len(ranks)} ranks")
    return None


def _finite_median(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else 0.0


def ranked_metrics(metrics: list[str]) -> dict[str, dict[int, str]]:
    """``{canonical base: {rank: metric name}}`` for the per-rank names this module reads."""
    table = AliasTable()
    out: dict[str, dict[int, str]] = {}
    for name in metrics:
        for pat in _RANK_PATTERNS:
            m = pat.match(name)
            if not m:
                continue
            base = m.group("base")
            alias = table.lookup(base)
            canon = alias.canonical if alias is not None else base
            if canon in RANKED_BASES:
                out.setdefault(canon, {})[int(m.group("rank"))] = name
            break
    return {k: v for k, v in out.items() if len(v) >= 2}


def _stragglers(run: Run, ranked: dict[str, dict[int, str]], params: Params) -> list[Finding]:
    base = max(ranked, key=lambda k: (len(ranked[k]), -RANKED_BASES.index(k)))
    ranks = sorted(ranked[base])
    names = [ranked[base][r] for r in ranks]
    wide = run.wide(names)
    steps = wide.get_column("step").to_numpy()
    mat = wide.select(names).to_numpy().astype(np.float64)
    mat[~(mat > 0)] = np.nan
    y = np.log(mat)
    if base == "step_time":
        y = -y
    n, nr = y.shape
    if n < 2 * params.min_points:
        return []
    out: list[Finding] = []
    span_total = float(steps[-1] - steps[0])
    min_len = max(params.min_points, math.ceil(params.min_duration_frac * n))
    thr = -math.log1p(-params.straggler_min)
    med_all = nanmedian_rows(y) if nr > 64 else None
    for j, rank in enumerate(ranks):
        others = med_all if med_all is not None else nanmedian_rows(np.delete(y, j, axis=1))
        lag = others - y[:, j]  # > 0: this rank is slower
        sigma = max(robust_sigma(lag), 1e-12)
        smooth = centered_median(lag, min(odd(min_len), odd(params.max_filter)))
        mask = np.nan_to_num(smooth, nan=0.0) >= thr
        best: tuple[float, int, int] | None = None
        for a, bb in runs_of(mask):
            if bb - a + 1 < min_len:
                continue
            width = float(steps[bb] - steps[a])
            if width < params.min_duration_frac * span_total:
                continue
            med_lag = _finite_median(lag[a : bb + 1])
            if med_lag < params.z_min * 1.2533 * sigma / math.sqrt(bb - a + 1):
                continue  # not distinguishable from the noise between ranks
            score = med_lag * (bb - a + 1)
            if best is None or score > best[0]:
                best = (score, a, bb)
        if best is None:
            continue
        _, a, bb = best
        med_lag = _finite_median(lag[a : bb + 1])
        slow = 1.0 - math.exp(-med_lag)
        if slow < params.straggler_min:
            continue
        share = (bb - a + 1) / n
        sev = "warning" if slow >= params.straggler_warn else "info"
        msg = (
            f"rank {rank} ran {100 * slow:.0f}% slower than the median of the other "
            f"{nr - 1} ranks ({base}) from step {int(steps[a])} to step {int(steps[bb])} "
            f"({100 * share:.0f}% of logged steps); check that node's GPU (clocks, "
            "thermals, ECC errors) and network link — a synchronous job runs at its "
            "slowest rank's pace."
        )
        out.append(
            finding(
                "TPUT002",
                CODES["TPUT002"],
                sev,
                msg,
                metric=names[j],
                step_start=int(steps[a]),
                step_end=int(steps[bb]),
                rank=rank,
                slower_pct=round(100 * slow, 2),
                ranks=nr,
                share_of_steps=round(share, 4),
                source=base,
            )
        )
    out.sort(key=lambda f: -float(f.evidence["slower_pct"]))
    return out[: params.max_findings]


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    ranked = ranked_metrics(run.metrics)
    sig = _signal(run, ranked)
    if sig is None and not ranked:
        raise Skip(
            "needs tokens_per_sec, samples_per_sec, step_time or train_time "
            "(or per-rank <metric>/rank<N>), not logged"
        )
    out: list[Finding] = []
    if sig is not None:
        if len(sig.y) < 2 * params.min_points + 1:
            if not ranked:
                raise Skip(f"{sig.metric}: only {len(sig.y)} values, too few to judge")
        else:
            out.extend(drops(sig, params, CODES["TPUT001"]))
    if ranked:
        out.extend(_stragglers(run, ranked, params))
    return out
