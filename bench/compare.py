"""Time trainlens against the readers people use, on the same data, and check the targets.

    /work/venv/bin/python bench/compare.py                      # 1M steps, slow peers at 100k
    /work/venv/bin/python bench/compare.py --peer-steps 100000,1000000 --big 10000000
    /work/venv/bin/python bench/compare.py --repeats 3 --quick  # a shorter look

Every measurement is a whole process (``python -c …``, imports included), started fresh,
several times; the tables show medians. Ratios are *paired*: within one round the
processes being compared run back to back (order alternating), the ratio is taken in that
round, and the median of the rounds' ratios is printed (the machine is shared, so its load
moves between rounds more than within one). Both wall-clock time and CPU time (user +
system, from ``os.wait4`` of the child) are measured; the verdicts use the CPU ratio,
since other work on a shared machine inflates wall time more than CPU time, and the wall
ratio is printed beside it. Peak memory is the child's own VmHWM. The trainlens
package is byte-compiled once before timing (into its ``__pycache__`` folders), so that,
like the peers pip installed, it is measured as installed rather than compiling its
sources in every child (as it would with PYTHONDONTWRITEBYTECODE set).

The data comes from bench/generate.py (written on first use under --data, outside the
repository): 12 metrics (11 per step, val_loss every 100 steps) as JSONL, wide CSV, one
TensorBoard event file (tensorboardX's bytes) and an MLflow file store. The slow peers
(tbparse, EventAccumulator, MlflowClient) read the --peer-steps run(s) (100k steps by
default, as in /work/shared/reference/ingest_anchors.md; at that size a process's
start-up is a large part of trainlens' time, so 1M is worth adding); the rest read the
--steps run. Each child prints the number of values it read, and the script stops if a
reader did not read them all. "trainlens, format given" reads with ``format=`` named,
which skips sniffing (sniffing imports every reader module on the way to the right one).

Targets (issue 7) and the comparison each verdict uses:

- TensorBoard: >= 50x faster than tbparse and than EventAccumulator (same file), and
  <= 3x polars.read_ndjson reading the same data as JSONL, CRCs checked; the numpy reader
  alone (the compiled lane switched off) is timed beside, as users without a C compiler
  at install get it;
- JSONL, CSV, MLflow: <= 1.3x polars' own reader on the same file(s); MLflow >= 40x
  faster than MlflowClient;
- ``trainlens analyze`` (all detectors, no report) on the --steps JSONL: its time minus
  the read's time <= the read's time; per-detector times are printed;
- peak memory of the read <= 2x that of polars reading the same data; with --big, a
  JSONL run of that many steps analyzed within 24 GB;
- ``trainlens --help`` and ``trainlens mfu …`` under 0.3 s.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import generate  # noqa: E402  (bench/generate.py, beside this file)

# ---- what each child process runs -----------------------------------------------------------
# Each prints one line: the number of metric values it read.

TRAINLENS_READ = """
import sys, trainlens
runs = trainlens.read(sys.argv[1])
print(sum(r.frame.height for r in runs))
"""

# the format named, so no sniffing (which imports every reader module on the way)
TRAINLENS_READ_AS = """
import sys, trainlens
runs = trainlens.read(sys.argv[1], format=sys.argv[2])
print(sum(r.frame.height for r in runs))
"""

# the numpy reader alone: what a TensorBoard file costs where the compiled lane was not
# built (no C compiler at install), or for files the lane leaves to it
TRAINLENS_TB_NUMPY = """
import sys
from trainlens.readers import tensorboard
tensorboard._tbscan = None
import trainlens
runs = trainlens.read(sys.argv[1])
print(sum(r.frame.height for r in runs))
"""
NUMPY_READER = "trainlens, numpy reader (no compiled lane)"

TRAINLENS_ANALYZE = """
import contextlib, io, sys
from trainlens.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["analyze", sys.argv[1]])
print(code)
"""

POLARS_NDJSON = """
import sys, polars as pl
df = pl.read_ndjson(sys.argv[1])
m = [c for c in df.columns if c not in ("step", "time")]
print(sum(df.height - df.get_column(c).null_count() for c in m))
"""

POLARS_CSV = """
import sys, polars as pl
df = pl.read_csv(sys.argv[1])
m = [c for c in df.columns if c not in ("step", "time")]
print(sum(df.height - df.get_column(c).null_count() for c in m))
"""

PANDAS_JSON = """
import sys, pandas as pd
df = pd.read_json(sys.argv[1], lines=True)
print(int(df.drop(columns=["step", "time"]).notna().sum().sum()))
"""

PANDAS_CSV = """
import sys, pandas as pd
df = pd.read_csv(sys.argv[1])
print(int(df.drop(columns=["step", "time"]).notna().sum().sum()))
"""

# polars' CSV reader over every metric file of the run, one frame with a metric column
POLARS_MLFLOW = """
import sys, pathlib, polars as pl
root = pathlib.Path(sys.argv[1])
files = sorted(p for p in root.rglob("*") if p.is_file() and "metrics" in p.parts)
frames = []
for f in files:
    name = "/".join(f.parts[f.parts.index("metrics") + 1:])
    df = pl.read_csv(f, separator=" ", has_header=False,
                     schema={"timestamp": pl.Int64, "value": pl.Float64, "step": pl.Int64})
    frames.append(df.with_columns(pl.lit(name).alias("metric")))
print(pl.concat(frames).height)
"""

MLFLOW_CLIENT = """
import os, sys, pandas as pd
os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
from mlflow.tracking import MlflowClient
root = os.path.abspath(sys.argv[1])
client = MlflowClient(tracking_uri="file://" + root)
frames = []
for exp in client.search_experiments():
    for run in client.search_runs([exp.experiment_id]):
        for key in run.data.metrics:
            hist = client.get_metric_history(run.info.run_id, key)
            frames.append(pd.DataFrame({"metric": key, "step": [m.step for m in hist],
                                        "value": [m.value for m in hist],
                                        "timestamp": [m.timestamp for m in hist]}))
print(len(pd.concat(frames)))
"""

TBPARSE = """
import sys
from tbparse import SummaryReader
df = SummaryReader(sys.argv[1], extra_columns={"wall_time"}).scalars
print(len(df))
"""

EVENT_ACCUMULATOR = """
import sys, pandas as pd
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
rows = [(tag, e.step, e.value, e.wall_time)
        for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)]
print(len(pd.DataFrame(rows, columns=["tag", "step", "value", "wall_time"])))
"""

HELP = "import sys\nfrom trainlens.cli import main\nsys.exit(main(['--help']))\n"
# what a read costs before it reads: the interpreter and the imports that read makes
STARTUP_TB = """
import sys, trainlens, trainlens.api, polars
from trainlens.readers import tensorboard
print(0)
"""
STARTUP_MLFLOW = """
import sys, trainlens, trainlens.api, polars
from trainlens.readers import mlflow
print(0)
"""
MFU = (
    "import sys\nfrom trainlens.cli import main\n"
    "sys.exit(main(['mfu', '--params', '1.3e9', '--tps', '40k', '--gpu', 'h100']))\n"
)

# in one process: the read, then the summary and every detector, CPU and wall each
DETECTOR_TIMES = """
import json, sys, time
import trainlens
from trainlens.api import build_context
from trainlens.core.config import Config
from trainlens.detectors import available, load, make_params
from trainlens.detectors.base import Skip
from trainlens.summary import summarize

def clock(fn):
    c, t = time.process_time(), time.perf_counter()
    fn()
    return [time.process_time() - c, time.perf_counter() - t]

out = {}
runs = []
out["read"] = clock(lambda: runs.extend(trainlens.read(sys.argv[1])))
run = runs[0]
ctx = build_context(run, Config())
out["views"] = clock(run._by_metric)
out["summary"] = clock(lambda: summarize(run))
for name in available():
    module = load(name)
    params = make_params(name, module, {})
    def go():
        try:
            module.detect(run, params, ctx)
        except Skip:
            pass
    out[name] = clock(go)
print(json.dumps(out))
"""


# ---- running children ------------------------------------------------------------------------


@dataclass
class Sample:
    wall: float
    cpu: float
    rss_mb: float
    output: str


# The child's own peak RSS, written to stderr at exit. wait4's ru_maxrss is no good here:
# Linux carries the pre-exec high-water mark over exec, and a child started with vfork
# counts the bench's own memory as its peak.
_HWM_MARK = "@@VmHWM"
_REPORT_HWM = (
    "import atexit as _ax, sys as _sy\n"
    "def _hwm():\n"
    "    with open('/proc/self/status') as _f:\n"
    "        _kb = next(_l.split()[1] for _l in _f if _l.startswith('VmHWM'))\n"
    f"    _sy.stderr.write('\\n{_HWM_MARK} ' + _kb + '\\n')\n"
    "_ax.register(_hwm)\n"
)


def _peak_kb(stderr: bytes) -> float | None:
    for line in reversed(stderr.decode(errors="replace").splitlines()):
        if line.startswith(_HWM_MARK):
            return float(line.split()[1])
    return None


def compile_trainlens() -> None:
    """Write trainlens' .pyc files, as ``pip install`` would (the children read them even
    with PYTHONDONTWRITEBYTECODE set, which only stops them writing their own)."""
    if not compileall.compile_dir(REPO / "trainlens", quiet=1):
        raise SystemExit("trainlens does not byte-compile")
    if not list((REPO / "trainlens" / "readers").glob("_tbscan*.so")):
        print(
            "note: the compiled TensorBoard lane is not built beside the sources "
            "(`pip install -e .` builds it); trainlens' TensorBoard rows are the numpy reader's"
        )


def run_child(code: str, *args: str, timeout: float = 3600.0) -> Sample:
    """Run ``python -c code args`` fresh; wall, CPU (user+sys) and peak RSS of that child."""
    if os.path.exists("/proc/self/status"):
        code = _REPORT_HWM + code
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        assert proc.stdout is not None
        out = proc.stdout.read().decode(errors="replace")
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in (0, 1):  # analyze exits 1 when it finds something
            err.seek(0)
            tail = err.read().decode(errors="replace")[-2000:]
            raise SystemExit(f"child failed ({proc.returncode}):\n{code}\n{tail}")
        err.seek(0)
        peak_kb = _peak_kb(err.read()) or float(usage.ru_maxrss)
    return Sample(wall, usage.ru_utime + usage.ru_stime, peak_kb / 1024.0, out.strip())


@dataclass
class Task:
    label: str
    code: str
    args: tuple[str, ...]
    values: int  # values the data holds (checked against what the child prints)
    samples: list[Sample] = field(default_factory=list)
    check: bool = True

    def run(self) -> Sample:
        s = run_child(self.code, *self.args)
        if self.check:
            got = int(s.output.split()[-1])
            if got != self.values:
                raise SystemExit(f"{self.label}: read {got:,} values, expected {self.values:,}")
        self.samples.append(s)
        return s

    def median(self, what: str) -> float:
        return statistics.median(getattr(s, what) for s in self.samples)


@dataclass
class Group:
    """Processes timed together, round by round, each compared with ``tasks[0]``."""

    title: str
    tasks: list[Task]
    repeats: int
    ratios: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def run(self, log: Callable[[str], None]) -> None:
        for r in range(self.repeats):
            order = self.tasks if r % 2 == 0 else self.tasks[::-1]
            got = {t.label: t.run() for t in order}
            base = got[self.tasks[0].label]
            for t in self.tasks[1:]:
                s = got[t.label]
                d = self.ratios.setdefault(t.label, {"wall": [], "cpu": []})
                d["wall"].append(base.wall / s.wall)
                d["cpu"].append(base.cpu / s.cpu)
            log(
                f"  round {r + 1}/{self.repeats}: "
                + ", ".join(f"{k} {v.wall:.2f}s/{v.cpu:.2f}cpu" for k, v in got.items())
            )

    def ratio(self, label: str, what: str = "cpu") -> float:
        """Median over rounds of time(tasks[0]) / time(label)."""
        return statistics.median(self.ratios[label][what])

    def pair(self, a: str, b: str, what: str = "cpu") -> float:
        """Median over rounds of time(a) / time(b), for any two of the group's tasks."""
        ta = next(t for t in self.tasks if t.label == a)
        tb = next(t for t in self.tasks if t.label == b)
        return statistics.median(
            getattr(x, what) / getattr(y, what) for x, y in zip(ta.samples, tb.samples, strict=True)
        )


def _versus(group: Group, label: str) -> str:
    """trainlens' time over this reader's, as words: "1.21x the time" or "60x faster"."""

    def words(r: float) -> str:
        return f"{1 / r:.0f}x faster" if r < 0.5 else f"{r:.2f}x the time"

    return f"{words(group.ratio(label, 'cpu'))}; {words(group.ratio(label, 'wall'))}"


# ---- verdicts --------------------------------------------------------------------------------


@dataclass
class Verdict:
    target: str
    measured: str
    met: bool
    note: str = ""


def slower(group: Group, peer: str, limit: float, what: str) -> Verdict:
    """trainlens (tasks[0]) at most ``limit`` times the time of ``peer``."""
    cpu = group.ratio(peer, "cpu")
    wall = group.ratio(peer, "wall")
    note = "" if (wall <= limit) == (cpu <= limit) else f"on wall time: {wall:.2f}x"
    return Verdict(
        f"{what}: <= {limit:g}x {peer}",
        f"{cpu:.2f}x (CPU), {wall:.2f}x (wall)",
        cpu <= limit,
        note,
    )


def faster(group: Group, peer: str, factor: float, what: str) -> Verdict:
    """trainlens (tasks[0]) at least ``factor`` times faster than ``peer``."""
    cpu = 1.0 / group.ratio(peer, "cpu")
    wall = 1.0 / group.ratio(peer, "wall")
    note = "" if (wall >= factor) == (cpu >= factor) else f"on wall time: {wall:.0f}x"
    alone = next((t for t in group.tasks if t.label.startswith("trainlens start-up")), None)
    if alone is not None:
        mine, base = group.tasks[0].median("cpu"), alone.median("cpu")
        theirs = next(t for t in group.tasks if t.label == peer).median("cpu")
        past = f"{theirs / (mine - base):.0f}x" if mine > base else "n/a"
        share = f"start-up alone {base:.2f} s of trainlens' {mine:.2f} s CPU; past it {past}"
        note = "; ".join(filter(None, [note, share]))
    if any(t.label == NUMPY_READER for t in group.tasks):
        one = group.pair(NUMPY_READER, peer)
        note = "; ".join(filter(None, [note, f"numpy reader: {1 / one:.0f}x (CPU)"]))
    return Verdict(
        f"{what}: >= {factor:g}x faster than {peer}",
        f"{cpu:.0f}x (CPU), {wall:.0f}x (wall)",
        cpu >= factor,
        note,
    )


# ---- the bench ---------------------------------------------------------------------------------


def ensure_data(root: Path, steps: int, formats: tuple[str, ...]) -> dict[str, Path]:
    out = root / str(steps)
    plan = generate.Plan(steps=steps)
    paths = {
        "jsonl": out / "run.jsonl",
        "csv": out / "run.csv",
        "tensorboard": out / "tb",
        "mlflow": out / "mlruns",
    }
    missing = tuple(f for f in formats if not paths[f].exists())
    if missing:
        print(f"generating {steps:,} steps as {', '.join(missing)} under {out} …", flush=True)
        generate.generate(plan, out, missing)
    return {f: paths[f] for f in formats}


def table(rows: list[list[str]], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument(
        "--peer-steps",
        default="100000",
        help="run size(s) the slow peers read, comma-separated (one round above 200k)",
    )
    ap.add_argument("--repeats", type=int, default=5, help="rounds per comparison")
    ap.add_argument("--peer-repeats", type=int, default=3, help="rounds with the slow peers")
    ap.add_argument("--data", type=Path, default=Path("/tmp/trainlens-bench"))
    ap.add_argument("--big", type=int, default=0, help="also analyze a run of this many steps")
    ap.add_argument("--quick", action="store_true", help="skip pandas and the slow peers")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the tables here")
    args = ap.parse_args(argv)
    if REPO in args.data.resolve().parents or args.data.resolve() == REPO:
        ap.error("keep generated data out of the repository (use /tmp)")

    def log(msg: str) -> None:
        print(msg, flush=True)

    compile_trainlens()
    load0 = os.getloadavg()
    started = time.time()
    big = ensure_data(args.data, args.steps, generate.FORMATS)
    peer_sizes = [int(x) for x in str(args.peer_steps).split(",") if x.strip()]
    n_big = generate.expected_values(generate.Plan(steps=args.steps))
    m = f"{args.steps:,} x 12"
    R, PR = args.repeats, args.peer_repeats

    def tl(fmt: str, paths: dict[str, Path], n: int, code: str = TRAINLENS_READ) -> Task:
        return Task(f"trainlens ({fmt})", code, (str(paths[fmt]),), n)

    groups: dict[str, Group] = {}
    groups["jsonl"] = Group(
        f"JSONL, {m}",
        [
            tl("jsonl", big, n_big),
            Task("polars.read_ndjson", POLARS_NDJSON, (str(big["jsonl"]),), n_big),
            Task("trainlens, format given", TRAINLENS_READ_AS, (str(big["jsonl"]), "jsonl"), n_big),
        ]
        + (
            []
            if args.quick
            else [Task("pandas.read_json", PANDAS_JSON, (str(big["jsonl"]),), n_big)]
        ),
        R,
    )
    groups["csv"] = Group(
        f"CSV, {m}",
        [
            tl("csv", big, n_big),
            Task("polars.read_csv", POLARS_CSV, (str(big["csv"]),), n_big),
            Task("trainlens, format given", TRAINLENS_READ_AS, (str(big["csv"]), "csv"), n_big),
        ]
        + ([] if args.quick else [Task("pandas.read_csv", PANDAS_CSV, (str(big["csv"]),), n_big)]),
        R,
    )
    groups["mlflow"] = Group(
        f"MLflow file store, {m}",
        [
            tl("mlflow", big, n_big),
            Task("polars.read_csv (metric files)", POLARS_MLFLOW, (str(big["mlflow"]),), n_big),
        ],
        R,
    )
    groups["tb"] = Group(
        f"TensorBoard, {m}",
        [
            tl("tensorboard", big, n_big),
            Task(
                "polars.read_ndjson (same data as JSONL)",
                POLARS_NDJSON,
                (str(big["jsonl"]),),
                n_big,
            ),
            Task(NUMPY_READER, TRAINLENS_TB_NUMPY, (str(big["tensorboard"]),), n_big),
        ],
        R,
    )
    for size in [] if args.quick else peer_sizes:
        small = ensure_data(args.data, size, ("tensorboard", "mlflow"))
        n_small = generate.expected_values(generate.Plan(steps=size))
        ms = f"{size:,} x 12"
        rounds = PR if size <= 200_000 else 1
        startup = "trainlens start-up alone (imports, no read)"
        groups[f"mlflow-peer-{size}"] = Group(
            f"MLflow file store, {ms}",
            [
                tl("mlflow", small, n_small),
                Task(
                    "MlflowClient.get_metric_history",
                    MLFLOW_CLIENT,
                    (str(small["mlflow"]),),
                    n_small,
                ),
                Task(startup, STARTUP_MLFLOW, (), 0),
            ],
            rounds,
        )
        groups[f"tb-peer-{size}"] = Group(
            f"TensorBoard, {ms}",
            [
                tl("tensorboard", small, n_small),
                Task("tbparse", TBPARSE, (str(small["tensorboard"]),), n_small),
                Task("EventAccumulator", EVENT_ACCUMULATOR, (str(small["tensorboard"]),), n_small),
                Task(startup, STARTUP_TB, (), 0),
                Task(NUMPY_READER, TRAINLENS_TB_NUMPY, (str(small["tensorboard"]),), n_small),
            ],
            rounds,
        )
    groups["analyze"] = Group(
        f"analyze (all detectors, no report), JSONL {m}",
        [
            tl("jsonl", big, n_big),
            Task("trainlens analyze", TRAINLENS_ANALYZE, (str(big["jsonl"]),), n_big, check=False),
        ],
        R,
    )
    groups["startup"] = Group(
        "start-up",
        [
            Task("trainlens --help", HELP, (), 0, check=False),
            Task("trainlens mfu", MFU, (), 0, check=False),
        ],
        R,
    )

    for key, g in groups.items():
        log(f"{g.title} [{key}]")
        g.run(log)

    log("per-detector times (one process, after the read)")
    det = json.loads(run_child(DETECTOR_TIMES, str(big["jsonl"])).output.splitlines()[-1])

    big_run: Sample | None = None
    if args.big:
        bpaths = ensure_data(args.data, args.big, ("jsonl",))
        log(f"analyze {args.big:,} steps (JSONL) …")
        big_run = run_child(TRAINLENS_ANALYZE, str(bpaths["jsonl"]))

    # ---- tables ----
    out: list[str] = []
    rows = []
    for g in groups.values():
        if g.title == "start-up":
            continue
        for t in g.tasks:
            n = t.values
            wall, cpu = t.median("wall"), t.median("cpu")
            if t is g.tasks[0]:
                ratio = "—"
            elif g is groups["analyze"]:
                ratio = (
                    f"analyze = {1 / g.ratio(t.label, 'cpu'):.2f}x the read; "
                    f"{1 / g.ratio(t.label, 'wall'):.2f}x"
                )
            else:
                ratio = _versus(g, t.label)
            rows.append(
                [
                    g.title,
                    t.label,
                    f"{wall:.2f}",
                    f"{cpu:.2f}",
                    f"{n / wall / 1e6:.2f}",
                    f"{t.median('rss_mb'):,.0f}",
                    ratio,
                ]
            )
    out.append(
        table(
            rows,
            [
                "data",
                "reader",
                "wall s",
                "CPU s",
                "M values/s (wall)",
                "peak RSS MB",
                "trainlens vs this reader (CPU; wall)",
            ],
        )
    )

    a = groups["analyze"]
    read_t, an_t = a.tasks[0], a.tasks[1]
    rows = []
    for name, (cpu, wall) in det.items():
        rows.append([name, f"{cpu:.2f}", f"{wall:.2f}"])
    out.append(table(rows, ["step (one process)", "CPU s", "wall s"]))

    # ---- verdicts ----
    verdicts: list[Verdict] = []
    for size in [] if args.quick else peer_sizes:
        g = groups[f"tb-peer-{size}"]
        verdicts.append(faster(g, "tbparse", 50, f"TensorBoard {size:,} steps"))
        verdicts.append(faster(g, "EventAccumulator", 50, f"TensorBoard {size:,} steps"))
    verdicts.append(
        slower(groups["tb"], "polars.read_ndjson (same data as JSONL)", 3, "TensorBoard")
    )
    for key, peer, what in (
        ("jsonl", "polars.read_ndjson", "JSONL"),
        ("csv", "polars.read_csv", "CSV"),
    ):
        v = slower(groups[key], peer, 1.3, what)
        given = groups[key].pair("trainlens, format given", peer)
        v.note = "; ".join(filter(None, [v.note, f"with the format given: {given:.2f}x (CPU)"]))
        verdicts.append(v)
    verdicts.append(slower(groups["mlflow"], "polars.read_csv (metric files)", 1.3, "MLflow"))
    for size in [] if args.quick else peer_sizes:
        g = groups[f"mlflow-peer-{size}"]
        verdicts.append(faster(g, "MlflowClient.get_metric_history", 40, f"MLflow {size:,} steps"))
    # analyze: (analyze - read) <= read, paired per round
    extra = {
        what: statistics.median(
            (getattr(sa, what) - getattr(sr, what)) / getattr(sr, what)
            for sr, sa in zip(read_t.samples, an_t.samples, strict=True)
        )
        for what in ("cpu", "wall")
    }
    verdicts.append(
        Verdict(
            "analyze: detectors add <= the ingest time",
            f"detectors = {extra['cpu']:.2f}x ingest (CPU), {extra['wall']:.2f}x (wall)",
            extra["cpu"] <= 1.0,
        )
    )
    for key, peer in (
        ("jsonl", "polars.read_ndjson"),
        ("csv", "polars.read_csv"),
        ("mlflow", "polars.read_csv (metric files)"),
        ("tb", "polars.read_ndjson (same data as JSONL)"),
    ):
        g = groups[key]
        mine = g.tasks[0].median("rss_mb")
        theirs = next(t for t in g.tasks if t.label == peer).median("rss_mb")
        verdicts.append(
            Verdict(
                f"peak memory ({key}): <= 2x {peer}",
                f"{mine:,.0f} MB / {theirs:,.0f} MB = {mine / theirs:.2f}x",
                mine <= 2 * theirs,
            )
        )
    if big_run is not None:
        verdicts.append(
            Verdict(
                f"analyze {args.big:,} steps within 24 GB",
                f"peak RSS {big_run.rss_mb / 1024:.1f} GB, {big_run.wall:.0f} s wall, "
                f"{big_run.cpu:.0f} s CPU",
                big_run.rss_mb < 24 * 1024,
            )
        )
    else:
        verdicts.append(Verdict("analyze 10M steps within 24 GB", "not run (use --big)", False))
    st = groups["startup"]
    for t in st.tasks:
        w = t.median("wall")
        verdicts.append(Verdict(f"start-up: {t.label} < 0.3 s", f"{w:.3f} s wall", w < 0.3))

    rows = [[v.target, v.measured, "met" if v.met else "NOT MET", v.note] for v in verdicts]
    out.append(table(rows, ["target", "measured (median of paired rounds)", "", "note"]))

    load1 = os.getloadavg()
    cmd = "/work/venv/bin/python bench/compare.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    footer = (
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}, {os.cpu_count()} CPUs, "
        f"load average {load0[0]:.1f} at the start and {load1[0]:.1f} at the end; "
        f"python {sys.version.split()[0]}; {R} rounds ({PR} with the slow peers up to "
        "200k steps, 1 above); "
        f"command: `{cmd.strip()}`"
    )
    text = "\n\n".join(out) + "\n\n" + footer + "\n"
    print()
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0 if all(v.met for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
