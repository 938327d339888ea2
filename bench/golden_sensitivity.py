"""How wide the seed band is, and how small a change the golden-curve gate still catches,
against a fixed-rtol rule like Megatron-LM's, on runs the gate was not tuned on.

Trains (fixtures/make_golden.py, one torch thread each) three reference seeds, a new seed,
the changed candidates of the committed set and a peak-LR sweep, from seeds of their own
(default 10, 11, 12 and 13: none is a committed fixture), into --out; then judges each
candidate three ways:

- the band (``trainlens gate --reference`` x3): which metric departs, from which step;
  also with the LR curve left out (a run that does not log its LR: only the loss and the
  grad norm can tell);
- Megatron's rule: per step, |loss - reference loss| <= 5 % of it, against one
  reference (the first seed);
- a min/max envelope of the three seeds: steps of the 20-step mean loss outside it.

    /work/venv/bin/python bench/golden_sensitivity.py                # trains, ~10 min on 2 cores
    /work/venv/bin/python bench/golden_sensitivity.py --reuse        # judge what is there
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/trainlens-golden-heldout")
    ap.add_argument("--seeds", default="10,11,12,13")
    ap.add_argument("--lr-factors", default="1.02,1.05,1.1,1.2,1.5")
    ap.add_argument("--reuse", action="store_true", help="do not train; judge --out")
    a = ap.parse_args()
    out = Path(a.out)
    if not a.reuse:
        t0 = time.time()
        subprocess.run(
            [
                sys.executable,
                str(HERE.parent / "fixtures" / "make_golden.py"),
                "--seeds",
                a.seeds,
                "--out",
                str(out),
                "--lr-factors",
                a.lr_factors,
            ],
            check=True,
        )
        print(f"trained in {time.time() - t0:.0f} s")

    from trainlens.gate import gate
    from trainlens.gate._band import smooth
    from trainlens.gate.golden import from_runs
    from trainlens.readers import read_runs

    seeds = [int(s) for s in a.seeds.split(",")]
    refs = [f"ref_s{s}" for s in seeds[:3]]
    runs = {p.name: read_runs([p / "metrics.jsonl"])[0] for p in sorted((out / "runs").iterdir())}
    golden = from_runs([(n, runs[n]) for n in refs])
    no_lr = from_runs([(n, runs[n]) for n in refs])
    del no_lr.bands["lr"]

    band = golden.bands["train/loss"]
    rel = band.scale / np.abs(band.center)
    print(
        "\nseed band of train/loss (one unit, relative to the center): "
        f"median {100 * np.median(rel):.2f} %, steps 1-50 {100 * np.median(rel[:50]):.2f} %, "
        f"last 100 {100 * np.median(rel[-100:]):.2f} %; a departure needs {band.z:g} units"
    )
    x0, v0 = runs[refs[0]].series("train/loss")
    s_refs = [np.interp(x0, *_smooth(runs[n], smooth)) for n in refs]
    lo, hi = np.min(s_refs, axis=0), np.max(s_refs, axis=0)

    print(
        f"\n{'candidate':<14} {'band: departs (metric@step)':<44} {'band, no LR curve':<32} "
        f"{'Megatron 5 %':<18} {'min/max envelope'}"
    )
    for name in sorted(runs):
        if name in refs:
            continue
        res = gate([out / "runs" / name / "metrics.jsonl"], golden=golden, jobs=1).reports[0]
        res2 = gate([out / "runs" / name / "metrics.jsonl"], golden=no_lr, jobs=1).reports[0]
        x, v = runs[name].series("train/loss")
        common = np.intersect1d(x, x0)
        c = v[np.searchsorted(x, common)]
        r = v0[np.searchsorted(x0, common)]
        bad = np.abs(c - r) > 0.05 * np.abs(r)
        mega = f"fail at {int(common[bad][0])}" if bad.any() else "pass"
        sx, sv = _smooth(runs[name], smooth)
        sc = np.interp(x0, sx, sv)
        outside = int(np.sum((sc < lo) | (sc > hi)))
        print(f"{name:<14} {_deps(res):<44} {_deps(res2):<32} {mega:<18} {outside} steps outside")
    return 0


def _smooth(run, smooth):  # type: ignore[no-untyped-def]
    x, v = run.series("train/loss", finite=True)
    return x.astype(float), smooth(x.astype(float), v, 20, robust=False)


def _deps(report) -> str:  # type: ignore[no-untyped-def]
    d = [f.finding for f in report.findings if f.finding.code == "REF001"]
    if not d:
        return "pass"
    return ", ".join(
        f"{f.metric}@{f.step_start}{'↓' if f.evidence.get('side') == 'below' else '↑'}" for f in d
    )


if __name__ == "__main__":
    raise SystemExit(main())
