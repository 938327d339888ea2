"""Whole-process times of the commands people start many times a day (issue 28).

    /work/venv/bin/python bench/startup.py                      # all of it (~4 min)
    /work/venv/bin/python bench/startup.py --quick              # no 1M JSONL, 1 tbparse round
    /work/venv/bin/python bench/startup.py --baseline /tmp/old  # also an older tree, paired

Every figure is a fresh process, as a user or a CI job starts it: ``trainlens …`` (the
console script's own code, ``trainlens.cli.entry``), the interpreter start and every
import included, the output written to a pipe. Each is run ``--repeats`` rounds; within a
round the processes compared run back to back (the order alternating between rounds), the
ratio is taken inside the round, and the median of the rounds' ratios is printed with the
median times and their spread (lowest–highest). CPU time is the child's user + system time
from ``os.wait4``; wall time is measured around it. The machine is shared, which inflates
wall time far more than CPU time, so the verdicts use CPU time (the wall ratio is printed
beside it).

What is timed, each against what a user would otherwise run:

- ``--version``, ``--help``, ``mfu --params 1.3e9 --tps 40000 --gpu h100``, and
  ``analyze`` of a 100-step JSONL run, beside ``python -c pass`` (the interpreter alone)
  and ``python -c "import polars, numpy"`` (the libraries an analysis needs, imported);
- ``analyze`` of a 100,000-step TensorBoard file (12 metrics, 1.1M values) against
  tbparse's ``SummaryReader(...).scalars`` of the same file (issue 28's target: >= 50x);
- ``analyze`` of a 1,000,000-step JSONL file (11M values) against
  ``polars.read_ndjson`` of it (target: <= 2.0x).

``--baseline PATH`` runs each trainlens command from that tree too (a copy of an older
commit, with its compiled lanes built: ``git archive <commit> | tar -x -C PATH`` and
``python setup.py build_ext --inplace`` there), in the same rounds, and prints
before/after ratios. The data comes from bench/generate.py, written on first use under
``--data`` (outside the repository). Both trees are byte-compiled first, as ``pip
install`` would.
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import generate  # noqa: E402  (bench/generate.py, beside this file)

# the console script (pyproject's [project.scripts]): trainlens.cli:entry
TRAINLENS = "import sys\nsys.argv[0] = 'trainlens'\nfrom trainlens.cli import entry\nentry()\n"
PASS = "pass\n"
IMPORTS = "import os\nos.environ.setdefault('OPENBLAS_NUM_THREADS', '1')\nimport polars, numpy\n"
TBPARSE = (
    "import sys\nfrom tbparse import SummaryReader\n"
    "df = SummaryReader(sys.argv[1], extra_columns={'wall_time'}).scalars\nprint(len(df))\n"
)
NDJSON = (
    "import sys, polars as pl\ndf = pl.read_ndjson(sys.argv[1])\n"
    "m = [c for c in df.columns if c not in ('step', 'time')]\n"
    "print(sum(df.height - df.get_column(c).null_count() for c in m))\n"
)


@dataclass
class Sample:
    wall: float
    cpu: float


def run_child(code: str, args: tuple[str, ...], tree: Path | None) -> tuple[Sample, str]:
    """``python -c code args`` in a fresh process, trainlens imported from ``tree``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            cwd=tempfile.gettempdir(),  # (not a folder whose pyproject.toml is a config)
        )
        assert proc.stdout is not None
        out = proc.stdout.read().decode(errors="replace")
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in (0, 1):  # analyze exits 1 when it finds something
            err.seek(0)
            raise SystemExit(f"child failed ({proc.returncode}): {args}\n{err.read()[-2000:]!r}")
    return Sample(wall, usage.ru_utime + usage.ru_stime), out


@dataclass
class Task:
    label: str
    code: str
    args: tuple[str, ...] = ()
    tree: Path | None = REPO
    expect: str | None = None  # a phrase the output must hold (it read everything)
    samples: list[Sample] = field(default_factory=list)

    def run(self) -> Sample:
        s, out = run_child(self.code, self.args, self.tree)
        if self.expect is not None and self.expect not in out:
            raise SystemExit(f"{self.label}: output lacks {self.expect!r}:\n{out[-1000:]}")
        self.samples.append(s)
        return s

    def median(self, what: str) -> float:
        return statistics.median(getattr(s, what) for s in self.samples)

    def spread(self, what: str) -> str:
        got = [getattr(s, what) for s in self.samples]
        return f"{min(got):.3f}–{max(got):.3f}"


@dataclass
class Group:
    """Processes timed round by round; ratios taken within a round."""

    title: str
    tasks: list[Task]
    repeats: int

    def run(self) -> None:
        print(f"\n{self.title} ({self.repeats} rounds)", flush=True)
        for r in range(self.repeats):
            for t in self.tasks if r % 2 == 0 else self.tasks[::-1]:
                t.run()
            print(
                f"  round {r + 1}: "
                + ", ".join(f"{t.label} {t.samples[-1].cpu:.3f}" for t in self.tasks),
                flush=True,
            )

    def ratio(self, a: str, b: str, what: str = "cpu") -> float:
        """Median over rounds of time(a) / time(b)."""
        ta = next(t for t in self.tasks if t.label == a)
        tb = next(t for t in self.tasks if t.label == b)
        pairs = zip(ta.samples, tb.samples, strict=True)
        return statistics.median(getattr(x, what) / getattr(y, what) for x, y in pairs)


def table(rows: list[list[str]], header: list[str]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def ensure(root: Path, steps: int, fmt: str) -> Path:
    out = root / str(steps)
    path = out / ("run.jsonl" if fmt == "jsonl" else "tb")
    if not path.exists():
        print(f"generating {steps:,} steps as {fmt} under {out} …", flush=True)
        generate.generate(generate.Plan(steps=steps), out, (fmt,))
    return path


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if "model name" in line)
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeats", type=int, default=15, help="rounds of the short commands")
    ap.add_argument("--big-repeats", type=int, default=5, help="rounds of the 1M JSONL")
    ap.add_argument("--tb-repeats", type=int, default=3, help="rounds with tbparse")
    ap.add_argument("--data", type=Path, default=Path("/tmp/trainlens-bench"))
    ap.add_argument("--baseline", type=Path, default=None, help="an older tree, paired")
    ap.add_argument("--quick", action="store_true", help="no 1M JSONL; one tbparse round")
    args = ap.parse_args(argv)
    if REPO in args.data.resolve().parents or args.data.resolve() == REPO:
        ap.error("keep generated data out of the repository (use /tmp)")
    trees = {"": REPO} | ({" (baseline)": args.baseline.resolve()} if args.baseline else {})
    for tree in trees.values():
        if not compileall.compile_dir(tree / "trainlens", quiet=1):
            raise SystemExit(f"{tree}: trainlens does not byte-compile")
    small = ensure(args.data, 100, "jsonl")
    tb = ensure(args.data, 100_000, "tensorboard")
    big = None if args.quick else ensure(args.data, 1_000_000, "jsonl")
    load0, started = os.getloadavg(), time.time()

    def tl(label: str, *argv_: str, expect: str | None = None) -> list[Task]:
        return [
            Task(f"trainlens {label}{suffix}", TRAINLENS, argv_, tree, expect)
            for suffix, tree in trees.items()
        ]

    mfu = ("mfu", "--params", "1.3e9", "--tps", "40000", "--gpu", "h100")
    short = Group(
        "start-up",
        [
            Task("python -c pass", PASS, tree=None),
            Task("python -c 'import polars, numpy'", IMPORTS, tree=None),
            *tl("--version", "--version", expect="trainlens "),
            *tl("--help", "--help", expect="analyze"),
            *tl("mfu", *mfu, expect="MFU"),
            *tl("analyze (100 steps)", "analyze", str(small), expect="100 steps"),
        ],
        args.repeats,
    )
    tbg = Group(
        "TensorBoard, 100,000 steps x 12",
        [
            *tl("analyze (TB 100k)", "analyze", str(tb), expect="100,000 steps"),
            Task("tbparse SummaryReader.scalars", TBPARSE, (str(tb),), None, "1101000"),
        ],
        1 if args.quick else args.tb_repeats,
    )
    groups = [short, tbg]
    if big is not None:
        groups.append(
            Group(
                "JSONL, 1,000,000 steps x 12",
                [
                    *tl("analyze (JSONL 1M)", "analyze", str(big), expect="1,000,000 steps"),
                    Task("polars.read_ndjson", NDJSON, (str(big),), None, "11010000"),
                ],
                args.big_repeats,
            )
        )
    for g in groups:
        g.run()
    load1 = os.getloadavg()

    rows = [
        [
            t.label,
            f"{t.median('cpu'):.3f}",
            t.spread("cpu"),
            f"{t.median('wall'):.3f}",
            t.spread("wall"),
        ]
        for g in groups
        for t in g.tasks
    ]
    print("\n" + table(rows, ["process", "CPU s", "CPU spread", "wall s", "wall spread"]))

    def versus(g: Group, a: str, b: str, limit: float, faster: bool) -> list[str]:
        cpu, wall = g.ratio(a, b), g.ratio(a, b, "wall")
        if faster:
            return [
                f"{a} vs {b}",
                f"{1 / cpu:.1f}x faster (CPU); {1 / wall:.1f}x (wall)",
                f">= {limit:g}x faster",
                "met" if 1 / cpu >= limit else "NOT MET",
            ]
        return [
            f"{a} / {b}",
            f"{cpu:.2f}x (CPU); {wall:.2f}x (wall)",
            f"<= {limit:g}x",
            "met" if cpu <= limit else "NOT MET",
        ]

    tb_pair = ("trainlens analyze (TB 100k)", "tbparse SummaryReader.scalars")
    verdicts = [versus(tbg, *tb_pair, 50, True)]
    if big is not None:
        verdicts.append(
            versus(groups[2], "trainlens analyze (JSONL 1M)", "polars.read_ndjson", 2.0, False)
        )
    info = []
    floor = "python -c 'import polars, numpy'"
    info.append(
        [
            f"trainlens analyze (100 steps) / {floor}",
            f"{short.ratio('trainlens analyze (100 steps)', floor):.2f}x (CPU)",
            "",
            "",
        ]
    )
    for label in ("--version", "--help", "mfu", "analyze (100 steps)"):
        info.append(
            [
                f"trainlens {label} / python -c pass",
                f"{short.ratio(f'trainlens {label}', 'python -c pass'):.2f}x (CPU)",
                "",
                "",
            ]
        )
    if args.baseline:
        for g in groups:
            for t in g.tasks:
                if t.label.endswith(" (baseline)"):
                    new = t.label.removesuffix(" (baseline)")
                    r, w = g.ratio(new, t.label), g.ratio(new, t.label, "wall")
                    info.append([f"{new}: now / baseline", f"{r:.2f}x (CPU); {w:.2f}x (wall)"])
                    info[-1] += ["", ""]
    print("\n" + table(verdicts + info, ["comparison", "median of paired rounds", "target", ""]))
    print(
        f"\n{machine()}; load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end; "
        f"{time.time() - started:.0f} s; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print("command: python bench/startup.py " + " ".join(argv or sys.argv[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
