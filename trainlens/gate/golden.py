"""Golden curves: the references a gated run's curves are compared with, step by step.

A :class:`Golden` holds one :class:`~trainlens.gate._band.Band` per metric, built from
reference runs (any format trainlens reads: several seeds of one config give a band
learned from their spread, one run a tolerance) or read from a stored golden file:

- trainlens' own (``trainlens gate REF... --write-golden golden.json``): the bands,
  decimated, with how they were made and a digest of each reference's values (so a
  candidate bit-identical to a reference is still told from the file alone);
- Megatron-LM's golden-values JSON (``{"lm loss": {"start_step", "end_step",
  "step_interval", "values"}, ...}``, values a list or a {step: value} map): one
  reference, compared with the tolerances Megatron's own functional tests use.

The per-metric settings (:data:`METRICS`) say how each curve is smoothed and what one
reference's tolerance is; docs/gate.md justifies the defaults with measured seed noise.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.errors import UnreadableInputError, UsageError
from trainlens.gate._band import Band, build_band, decimate

if TYPE_CHECKING:
    from trainlens.core.run import Run

GOLDEN_VERSION = 1


@dataclass(frozen=True)
class MetricRule:
    """How one metric is compared. ``window``: trailing smoothing, in steps; ``robust``:
    a median instead of a mean (heavy-tailed metrics); ``rtol``/``atol``: one
    reference's tolerance; ``rtol_floor``: the least band half-width, relative, with
    several references (identical references still leave room for rounding)."""

    window: float = 20.0
    robust: bool = False
    rtol: float = 0.05
    atol: float = 0.0
    rtol_floor: float = 1e-3
    higher: str = "higher than the references"
    lower: str = "lower than the references"
    bad_side: int = 0  # +1: higher is bad, -1: lower is bad, 0: either


#: the curves compared by default, when both sides log them. One-reference tolerances:
#: the loss 5 % (Megatron-LM's lm-loss rtol; our seeds differ by a median 3.3 %, at most
#: 7.3 %, of the 20-step mean, so 5 % of the same smoothing passes a rerun and a close
#: seed), step time and throughput 10 % of a 50-step median (two reruns' 20-step means
#: differ by up to 28 %, their medians by under 1 %; with several references the band is
#: at least 2 % of the median: a level the load of a shared machine moves), memory 5 %
#: (Megatron's), the LR
#: 1e-4 (a config change, not noise), the grad norm 50 % (it is noisy and skewed).
METRICS: dict[str, MetricRule] = {
    "train/loss": MetricRule(
        window=20,
        rtol=0.05,
        bad_side=1,
        higher="higher than the references: it trains worse",
        lower="lower than the references: it learns too fast — repeated data, a leak of "
        "the targets or an easier data mix?",
    ),
    "val/loss": MetricRule(
        window=1,
        rtol=0.05,
        bad_side=1,
        higher="higher than the references: a quality regression",
        lower="lower than the references: check for overlap between train and val data",
    ),
    "grad_norm": MetricRule(
        window=20,
        robust=True,
        rtol=0.5,
        rtol_floor=1e-3,
        higher="higher than the references: the dynamics changed",
        lower="lower than the references: the dynamics changed",
    ),
    "lr": MetricRule(
        window=1,
        rtol=1e-4,
        rtol_floor=1e-4,
        higher="different from the references: a config change (schedule, peak, warmup)",
        lower="different from the references: a config change (schedule, peak, warmup)",
    ),
    "step_time": MetricRule(
        window=50,
        robust=True,
        rtol=0.10,
        rtol_floor=0.02,
        bad_side=1,
        higher="higher than the references: a slowdown",
        lower="lower than the references: a speed-up",
    ),
    "tokens_per_sec": MetricRule(
        window=50,
        robust=True,
        rtol=0.10,
        rtol_floor=0.02,
        bad_side=-1,
        higher="higher than the references: a speed-up",
        lower="lower than the references: a slowdown",
    ),
    "mem/allocated": MetricRule(
        window=20,
        robust=True,
        rtol=0.05,
        bad_side=1,
        higher="higher than the references: more memory",
        lower="lower than the references: less memory",
    ),
    "mem/reserved": MetricRule(
        window=20,
        robust=True,
        rtol=0.05,
        bad_side=1,
        higher="higher than the references: more memory",
        lower="lower than the references: less memory",
    ),
}
DEFAULT_RULE = MetricRule()

#: Megatron-LM golden-values names -> canonical names
MEGATRON_NAMES = {
    "lm loss": "train/loss",
    "iteration-time": "step_time",
    "mem-allocated-bytes": "mem/allocated",
    "mem-max-allocated-bytes": "mem/max_allocated",
}


def rule_for(metric: str, overrides: dict[str, dict[str, float]] | None = None) -> MetricRule:
    base = METRICS.get(metric, DEFAULT_RULE)
    if overrides and metric in overrides:
        return replace(base, **overrides[metric])  # type: ignore[arg-type]
    return base


def digest(x: np.ndarray, v: np.ndarray) -> str:
    """A reference curve's fingerprint: steps and float64 values, bit for bit."""
    h = hashlib.blake2b(digest_size=16)
    h.update(np.ascontiguousarray(x, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(v, dtype=np.float64).tobytes())
    return h.hexdigest()


@dataclass
class Golden:
    source: str  # what the references are (paths, or a golden file)
    references: list[str]
    bands: dict[str, Band] = field(default_factory=dict)
    axis: str = "step"
    #: metric -> reference name -> digest of its values over the band's stretch
    digests: dict[str, dict[str, str]] = field(default_factory=dict)
    #: metric -> why it has no band (a reference lacks it, no common stretch)
    missing: dict[str, str] = field(default_factory=dict)
    made: dict[str, Any] = field(default_factory=dict)

    def to_json(self, max_points: int = 2000) -> dict[str, Any]:
        from trainlens import __version__

        return {
            "trainlens_golden": GOLDEN_VERSION,
            "made": {
                "by": f"trainlens {__version__}",
                "references": self.references,
                "axis": self.axis,
                "how": "per metric: each reference smoothed by a trailing mean (median for "
                "robust metrics) over `window` steps; with several references, center = "
                "their mean (median from 5 on) and one band unit = their spread pooled "
                "over neighbouring steps x sqrt(1 + 1/k); a departure is more than `z` "
                "units out for at least a window (docs/gate.md)",
                **self.made,
            },
            "metrics": {m: decimate(b, max_points).to_json() for m, b in self.bands.items()},
            "digests": self.digests,
            "missing": self.missing,
        }


def _finite(x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = np.isfinite(v)
    return x[ok].astype(np.float64), v[ok].astype(np.float64)


def axis_series(run: Run, metric: str, axis: str) -> tuple[np.ndarray, np.ndarray]:
    """A metric's (axis, value): its steps, or the cumulative ``tokens`` the run logged at
    those steps (interpolated between logged points; steps outside them are dropped)."""
    x, v = run.series(metric)
    if axis == "step":
        return x.astype(np.float64), v.astype(np.float64)
    ts, tv = run.series("tokens", finite=True)
    if len(ts) < 2 or np.any(np.diff(tv) <= 0):
        raise UsageError(
            f"{run.name}: --align tokens needs a cumulative `tokens` metric that grows at "
            "every logged step"
        )
    keep = (x >= ts[0]) & (x <= ts[-1])
    return np.interp(x[keep], ts, tv), v[keep].astype(np.float64)


def tokens_per_step(run: Run) -> float:
    ts, tv = run.series("tokens", finite=True)
    return float(np.median(np.diff(tv) / np.diff(ts))) if len(ts) > 1 else 1.0


def from_runs(
    runs: list[tuple[str, Run]],
    *,
    metrics: list[str] | None = None,
    overrides: dict[str, dict[str, float]] | None = None,
    z: float | None = None,
    source: str = "",
    axis: str = "step",
) -> Golden:
    """Bands from reference runs: every default metric all of them log, and ``metrics``.
    ``axis``: "step", or "tokens" (runs of different batch sizes: every run must log a
    cumulative ``tokens``; the smoothing windows are scaled by the references' median
    tokens per step)."""
    if axis not in ("step", "tokens"):
        raise UsageError(f"align on 'step' or 'tokens', not {axis!r}")
    names = [n for n, _ in runs]
    wanted = list(dict.fromkeys([*METRICS, *(metrics or [])]))
    g = Golden(source=source or ", ".join(names), references=names, axis=axis)
    unit = 1.0
    if axis == "tokens":
        unit = float(np.median([tokens_per_step(r) for _, r in runs]))
        g.made["tokens_per_step"] = unit
    for metric in wanted:
        have = [(n, r) for n, r in runs if r.has(metric)]
        if len(have) < len(runs):
            if have or metric in (metrics or []):
                lacking = [n for n, r in runs if not r.has(metric)]
                g.missing[metric] = f"not logged by reference {', '.join(lacking[:3])}"
            continue
        rule = rule_for(metric, overrides)
        refs = {n: _finite(*axis_series(r, metric, axis)) for n, r in have}
        kw: dict[str, Any] = {}
        if z is not None:
            kw["z"] = z
        band = build_band(
            metric,
            refs,
            window=rule.window * unit,
            robust=rule.robust,
            rtol=rule.rtol,
            atol=rule.atol,
            rtol_floor=rule.rtol_floor,
            **kw,
        )
        if band is None:
            g.missing[metric] = f"the references share no stretch of {axis}s"
            continue
        g.bands[metric] = band
        lo, hi = band.x[0], band.x[-1]
        g.digests[metric] = {}
        for n, (x, v) in refs.items():
            keep = (x >= lo) & (x <= hi)
            g.digests[metric][n] = digest(x[keep], v[keep])
    return g


def read_golden(path: Path) -> Golden | None:
    """A stored golden file (trainlens' or Megatron-LM's), or None when ``path`` is not
    one (it is then read as a run)."""
    if path.suffix.lower() != ".json" or not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    if "trainlens_golden" in doc:
        return _read_own(path, doc)
    if doc and all(_is_megatron_metric(v) for v in doc.values()):
        return _read_megatron(path, doc)
    return None


def _arr(doc: dict[str, Any], key: str, where: str) -> np.ndarray:
    v = doc.get(key)
    if not isinstance(v, list) or not all(isinstance(t, int | float) for t in v):
        raise UnreadableInputError(f"{where}: `{key}` is not a list of numbers")
    return np.asarray(v, dtype=np.float64)


def _read_own(path: Path, doc: dict[str, Any]) -> Golden:
    if doc.get("trainlens_golden") != GOLDEN_VERSION:
        raise UnreadableInputError(
            f"{path}: golden file version {doc.get('trainlens_golden')!r}; this trainlens "
            f"reads version {GOLDEN_VERSION}"
        )
    raw_made = doc.get("made")
    made: dict[str, Any] = raw_made if isinstance(raw_made, dict) else {}
    metrics = doc.get("metrics")
    if not isinstance(metrics, dict):
        raise UnreadableInputError(f"{path}: no `metrics` in this golden file")
    g = Golden(
        source=str(path),
        references=[str(r) for r in made.get("references", [])] or [str(path)],
        axis=str(made.get("axis", "step")),
    )
    for m, b in metrics.items():
        where = f"{path}: metrics[{m!r}]"
        if not isinstance(b, dict):
            raise UnreadableInputError(f"{where} is not an object")
        x, c, s = _arr(b, "x", where), _arr(b, "center", where), _arr(b, "scale", where)
        if not (len(x) == len(c) == len(s)) or len(x) == 0:
            raise UnreadableInputError(f"{where}: x, center and scale differ in length")
        if np.any(np.diff(x) <= 0) or np.any(~np.isfinite(c)) or np.any(~(s > 0)):
            raise UnreadableInputError(
                f"{where}: x must increase, center be finite and scale positive"
            )
        g.bands[m] = Band(
            metric=m,
            x=x,
            center=c,
            scale=s,
            window=float(b.get("window", 1.0)),
            z=float(b.get("z", 4.0)),
            n_refs=int(b.get("n_refs", 1)),
            kind=str(b.get("kind", "seeds")),
            robust=bool(b.get("robust", False)),
            density=float(b.get("density", 1.0)),
            noise=float(b.get("noise", 0.0)),
            rtol=float(b.get("rtol", 0.0)),
            atol=float(b.get("atol", 0.0)),
        )
    dg = doc.get("digests")
    if isinstance(dg, dict):
        g.digests = {
            str(m): {str(k): str(v) for k, v in d.items()}
            for m, d in dg.items()
            if isinstance(d, dict)
        }
    miss = doc.get("missing")
    if isinstance(miss, dict):
        g.missing = {str(k): str(v) for k, v in miss.items()}
    return g


def _is_megatron_metric(v: Any) -> bool:
    return isinstance(v, dict) and "values" in v and ("start_step" in v or "step_interval" in v)


def _read_megatron(path: Path, doc: dict[str, Any]) -> Golden:
    """Megatron-LM's golden values: one reference run; lm loss, iteration time and
    memory compared with Megatron's own tolerances (5 % relative)."""
    g = Golden(source=str(path), references=[path.name], made={"format": "megatron-golden"})
    for name, spec in doc.items():
        metric = MEGATRON_NAMES.get(name, name)
        where = f"{path}: {name!r}"
        values = spec["values"]
        try:
            if isinstance(values, dict):
                pairs = sorted((int(k), v) for k, v in values.items())
                steps = np.array([p[0] for p in pairs], dtype=np.float64)
                vals = np.array([_mval(p[1]) for p in pairs], dtype=np.float64)
            elif isinstance(values, list):
                start = int(spec.get("start_step", 0))
                every = int(spec.get("step_interval", 1))
                steps = start + every * np.arange(len(values), dtype=np.float64)
                vals = np.array([_mval(t) for t in values], dtype=np.float64)
            else:
                raise ValueError("values is neither a list nor an object")
        except (TypeError, ValueError) as exc:
            raise UnreadableInputError(f"{where}: {exc}") from None
        x, v = _finite(steps, vals)
        if len(x) == 0:
            g.missing[metric] = f"{name!r} holds no finite value"
            continue
        rule = rule_for(metric)
        rtol = (
            0.05
            if metric in ("train/loss", "step_time") or metric.startswith("mem/")
            else rule.rtol
        )
        window = 1.0  # Megatron compares step by step
        band = build_band(metric, {path.name: (x, v)}, window=window, robust=False, rtol=rtol)
        if band is not None:
            g.bands[metric] = band
    if not g.bands:
        raise UnreadableInputError(f"{path}: no metric with finite values in these golden values")
    return g


def _mval(t: Any) -> float:
    if t is None or (isinstance(t, str) and t.lower() == "nan"):
        return math.nan
    return float(t)


def write_golden(golden: Golden, path: Path, max_points: int = 2000) -> None:
    if not golden.bands:
        raise UsageError("no metric to store: the references share no logged curve")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(golden.to_json(max_points), separators=(",", ":"))
        path.write_text(text + "\n", "utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror})") from None
