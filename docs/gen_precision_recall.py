"""Score every detector on the fixture runs and the real logs; write docs/precision_recall.md.

Run from the repository root: ``python docs/gen_precision_recall.py``.

A labeled event (fixtures/labels.json) is found when a finding with its code starts
within its tolerance of the labeled step. A finding at warning or error whose code
matches no labeled event of its run is a false positive — on a healthy run, every
warning or error is one. Labeled events marked ``required: false`` count when found
and are not missed when absent. Info findings are neither: they are notes, not alarms.
Real logs: tests/real_logs.yml (one source with tests/test_real_logs.py) says what
../shared/real-logs/README.md documents for each: on a healthy log every warning/error
is a false positive; documented events are scored like labeled ones, and each log also
gets a row of its own in the "Real logs" section.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainlens.core.findings import Severity

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "real-logs"

CORPUS = REPO / "tests" / "real_logs.yml"


def real_logs() -> list[dict[str, Any]]:
    """The real-logs corpus and its documented events (tests/real_logs.yml, which
    tests/test_real_logs.py checks too)."""
    import yaml

    return list(yaml.safe_load(CORPUS.read_text(encoding="utf-8"))["logs"])


@dataclass
class Score:
    tp: int = 0
    fn: int = 0
    fp: int = 0
    missed: list[str] = field(default_factory=list)
    false: list[str] = field(default_factory=list)


def _tol(event: dict[str, Any]) -> int:
    """How far from its step an event may be found: ``tolerance`` in fixtures/labels.json,
    ``tol`` in tests/real_logs.yml."""
    return int(event.get("tolerance", event.get("tol", 0)))


def _codes(event: dict[str, Any]) -> list[str]:
    code = event["code"]
    return code if isinstance(code, list) else [code]


def score_run(
    name: str, findings: list[Any], label: dict[str, Any], scores: dict[str, Score]
) -> None:
    events = label.get("events", [])
    matched: set[int] = set()
    for ev in events:
        codes = _codes(ev)
        hit = None
        for i, f in enumerate(findings):
            if (
                f.code in codes
                and f.step_start is not None
                and abs(f.step_start - int(ev["step"])) <= _tol(ev)
                and f.severity.rank >= Severity.parse(ev.get("severity", "info")).rank
            ):
                hit = i
                break
        key = codes[0]
        if hit is not None:
            matched.add(hit)
            scores[key].tp += 1
        elif ev.get("required", True):
            scores[key].fn += 1
            scores[key].missed.append(f"{name}@{ev['step']}")
    labeled_codes = {c for ev in events for c in _codes(ev)}
    for i, f in enumerate(findings):
        if i in matched or f.severity.rank < 1:
            continue
        if f.code in labeled_codes:
            continue  # a second finding of a labeled kind (e.g. a follow-up spike)
        scores[f.code].fp += 1
        scores[f.code].false.append(f"{name}@{f.step_start}")


def _event_text(ev: dict[str, Any]) -> str:
    sev = ev.get("severity", "info")
    tol = f"±{_tol(ev)}" if _tol(ev) else ""
    return f"{'/'.join(_codes(ev))}@{ev['step']}{tol}" + (f" ({sev}+)" if sev != "info" else "")


def score_real_logs(scores: dict[str, Score]) -> list[str]:
    """Analyze every log of the corpus: score its documented events into ``scores`` (logs
    that are healthy or have events; a folder that repeats its files' runs only gets a
    row) and return one table row per log."""
    import trainlens
    from trainlens.core.errors import TrainlensError

    rows = []
    for entry in real_logs():
        path = entry["path"]
        if entry.get("exit", 0) == 2:
            try:
                trainlens.analyze(SHARED / path)
                verdict, said = "read, but should fail", ""
            except TrainlensError as exc:
                said = str(exc)
                verdict = "ok" if entry["error"] in said else "wrong message"
            rows.append(
                f"| {path} | — | exit 2: {entry['error']} | {said[:90]} |  |  | {verdict} |"
            )
            continue
        try:
            results = trainlens.analyze(SHARED / path)
        except TrainlensError as exc:
            rows.append(f"| {path} | 0 | reads | {str(exc)[:90]} |  |  | UNREADABLE |")
            continue
        findings = [f for a in results for f in a.findings]
        events = [e for e in entry.get("events", []) if e.get("required", True)]
        label = {"events": entry.get("events", [])}
        if entry.get("healthy") or events:
            score_run(path, findings, label, scores)
        found, missed = [], []
        for ev in events:
            hit = any(
                f.code in _codes(ev)
                and f.step_start is not None
                and abs(f.step_start - int(ev["step"])) <= _tol(ev)
                and f.severity.rank >= Severity.parse(ev.get("severity", "info")).rank
                for f in findings
            )
            (found if hit else missed).append(_event_text(ev))
        loud = [f"{f.code}@{f.step_start}" for f in findings if f.severity.rank >= 1]
        bad = missed or (entry.get("healthy") and loud) or len(results) != entry.get("runs", 1)
        expected = "healthy" if entry.get("healthy") else ""
        expected = ", ".join(filter(None, [expected, *(_event_text(e) for e in events)]))
        rows.append(
            f"| {path} | {len(results)} | {expected or '—'} | {', '.join(found)} | "
            f"{', '.join(missed)} | {', '.join(loud[:8])}{' …' if len(loud) > 8 else ''} | "
            f"{'MISSED' if bad else 'ok'} |"
        )
    return rows


def main() -> int:
    import trainlens

    labels_path = REPO / "fixtures" / "labels.json"
    if not labels_path.exists():
        print("fixtures/labels.json missing: run python fixtures/make_runs.py", file=sys.stderr)
        return 2
    labels = json.loads(labels_path.read_text())["runs"]
    scores: dict[str, Score] = defaultdict(Score)
    for name, label in sorted(labels.items()):
        [result] = trainlens.analyze(REPO / "fixtures" / "runs" / name / "metrics.jsonl")
        score_run(name, result.findings, label, scores)
    real_note = "absent (../shared not beside the checkout)"
    real_rows: list[str] = []
    if SHARED.is_dir():
        real_note = "included"
        real_rows = score_real_logs(scores)

    from trainlens.detectors import available, load

    lines = [
        "# Detector precision and recall",
        "",
        "Generated by `python docs/gen_precision_recall.py` over the fixture runs",
        f"({len(labels)} runs, fixtures/labels.json) and the real logs ({real_note}).",
        "TP: labeled events found at their step (± tolerance); FN: labeled events missed;",
        "FP: warnings/errors with no labeled event (every warning/error on a healthy run).",
        "",
        "| detector | code | TP | FN | FP | precision | recall | missed | false alarms |",
        "|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for det in available():
        for code in load(det).CODES:
            s = scores.get(code, Score())
            prec = f"{s.tp / (s.tp + s.fp):.2f}" if s.tp + s.fp else "—"
            rec = f"{s.tp / (s.tp + s.fn):.2f}" if s.tp + s.fn else "—"
            lines.append(
                f"| {det} | {code} | {s.tp} | {s.fn} | {s.fp} | {prec} | {rec} | "
                f"{', '.join(s.missed) or ''} | {', '.join(s.false) or ''} |"
            )
    if real_rows:
        lines += [
            "",
            "## Real logs",
            "",
            "Third-party logs in ../shared/real-logs (its README documents what happens in",
            "each); the expectations are tests/real_logs.yml, which tests/test_real_logs.py",
            "checks. Expected: the documented events (code@step, at least the severity named);",
            "loud: every warning or error trainlens gave; a healthy log must have none.",
            "",
            "| log | runs | expected | found | missed | loud findings | verdict |",
            "|---|---:|---|---|---|---|---|",
            *real_rows,
        ]
    out = REPO / "docs" / "precision_recall.md"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
