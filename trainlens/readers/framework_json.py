"""Frameworks' JSON logs that are no plain JSON lines: Sacred, DVCLive, fairseq.

- **Sacred** ``metrics.json`` (``FileStorageObserver``): one object, each metric
  ``{"steps": [...], "timestamps": [...], "values": [...]}`` with ISO timestamps (UTC,
  ``datetime.utcnow``). Sacred names are free text; a dotted name (``training.loss``)
  is looked up with ``/`` for ``.`` (``training/loss`` -> the namespace rule).
- **DVCLive** ``metrics.json`` (``Live.make_summary``): the latest value of every metric,
  nested by its ``/`` path, and ``"step"``: a summary, read as one step (the history is
  in ``dvclive/plots/metrics/**.tsv``, the TSV reader's).
- **fairseq** ``--log-format json``: the JSON progress bar logs ``json.dumps`` of its
  stats after the logging prefix ``<time> | INFO | <tag> | {...}``, every number as
  text. ``train_inner`` lines are the steps (``num_updates``); ``valid`` lines (keys
  ``valid_*``) the evaluations, read as ``val/<name>`` (another subset ``<s>``:
  ``val/loss/<s>``, ``val/<s>/<name>``); the end-of-epoch ``train`` lines repeat
  ``train_inner``'s averages at the same update and are read only when there is no
  ``train_inner`` line. fairseq's loss is in bits (base 2; ``ppl`` = 2 ** ``loss``): read
  in nats (× ln 2) like every other loss;
  ``wall`` the seconds since the start (the clock), ``wps`` target tokens per second of
  all workers.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.names import Alias
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers.base import ReadOptions, run_name_for

FORMAT = "framework-json"

_SACRED = re.compile(rb'^\s*\{\s*"[^"]*"\s*:\s*\{\s*"steps"\s*:\s*\[')
_FAIRSEQ_HEAD = re.compile(rb'\|\s*(?:train_inner|train|valid[\w.-]*|test[\w.-]*)\s*\|\s*\{"')
_FAIRSEQ_LINE = re.compile(r"^(?:.*\|\s*)?(?P<tag>[\w.\-/]+)\s*\|\s*(?P<obj>\{.*\})\s*$")
_DVCLIVE_SIBLINGS = ("plots", "params.yaml", "report.md", "report.html")


def _is_dvclive(path: Path, head: bytes) -> bool:
    if path.name != "metrics.json" or not head.lstrip().startswith(b"{"):
        return False
    parent = path.parent
    return parent.name == "dvclive" or any((parent / s).exists() for s in _DVCLIVE_SIBLINGS)


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return False
    if _SACRED.match(head) or _is_dvclive(path, head):
        return True
    return sum(1 for line in head.splitlines()[:40] if _FAIRSEQ_HEAD.search(line)) >= 1


def read(path: Path, opts: ReadOptions) -> list[Run]:
    head = path.read_bytes()[:4096]
    if _SACRED.match(head):
        rows, issues, aliases = _sacred(path)
    elif _is_dvclive(path, head):
        rows, issues, aliases = _dvclive(path)
    else:
        rows, issues, aliases = _fairseq(path)
    if not rows:
        raise UnreadableInputError(f"{path}: no numeric metrics found")
    long = pl.DataFrame(
        rows,
        schema={
            "step": pl.Int64,
            "metric": pl.String,
            "value": pl.Float64,
            "wall_time": pl.Float64,
        },
        orient="row",
    )
    run = build_run(
        long,
        name=run_name_for(path),
        source=str(path),
        fmt=FORMAT,
        aliases=opts.aliases.with_defaults(aliases),
        issues=issues,
        metadata={"framework": issues[0].details.get("framework")} if issues else None,
    )
    run.cursor[str(path)] = path.stat().st_size
    return [run]


Row = tuple[int, str, float, float | None]


def _note(path: Path, framework: str, message: str) -> DataIssue:
    return DataIssue(
        kind="framework",
        source=str(path),
        message=message,
        severity="info",
        details={"framework": framework},
    )


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise UnreadableInputError(f"{path}: not valid JSON ({exc})") from None


# ---- Sacred ---------------------------------------------------------------------------------


def _iso_seconds(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        from datetime import UTC, datetime

        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _sacred(path: Path) -> tuple[list[Row], list[DataIssue], dict[str, Alias]]:
    obj = _load(path)
    if not isinstance(obj, dict):
        raise UnreadableInputError(f"{path}: not a Sacred metrics.json (no object at the top)")
    rows: list[Row] = []
    skipped: list[str] = []
    aliases: dict[str, Alias] = {}
    for name, entry in obj.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("values"), list):
            skipped.append(str(name))
            continue
        steps = entry.get("steps") or []
        stamps = entry.get("timestamps") or []
        values = entry["values"]
        kept = 0
        for i, raw in enumerate(values):
            value = _number(raw)
            step = steps[i] if i < len(steps) else i
            if value is None or not isinstance(step, int) or isinstance(step, bool):
                continue
            rows.append(
                (step, str(name), value, _iso_seconds(stamps[i] if i < len(stamps) else None))
            )
            kept += 1
        if not kept:
            skipped.append(str(name))
        elif "." in str(name):
            dotted = str(name).replace(".", "/")
            from trainlens.core.names import AliasTable

            found = AliasTable().lookup(dotted)
            if found is not None:
                aliases[str(name)] = found
    issues = [
        _note(
            path,
            "sacred",
            "read as a Sacred metrics.json (FileStorageObserver): each metric's steps, "
            "values and UTC timestamps; dotted names looked up as paths (training.loss as "
            "training/loss)",
        )
    ]
    if skipped:
        issues.append(
            DataIssue(
                kind="non-metric-column",
                source=str(path),
                message=(
                    f"{len(skipped)} entry(ies) hold no numeric values: {', '.join(skipped[:8])}"
                ),
                count=len(skipped),
                severity="info",
            )
        )
    return rows, issues, aliases


# ---- DVCLive ---------------------------------------------------------------------------------


def _flat(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _dvclive(path: Path) -> tuple[list[Row], list[DataIssue], dict[str, Alias]]:
    obj = _load(path)
    if not isinstance(obj, dict):
        raise UnreadableInputError(f"{path}: not a DVCLive metrics.json (no object at the top)")
    flat = _flat(obj)
    step_raw = flat.pop("step", 0)
    step = step_raw if isinstance(step_raw, int) and not isinstance(step_raw, bool) else 0
    rows: list[Row] = []
    for name, raw in flat.items():
        value = _number(raw) if not isinstance(raw, str) else None
        if value is not None:
            rows.append((step, name, value, None))
    tsv = path.parent / "plots" / "metrics"
    issues = [
        _note(
            path,
            "dvclive",
            "read as a DVCLive metrics.json (Live's summary): the latest value of each "
            f"metric, at step {step} — not the history"
            + (
                f", which is in {tsv} (point trainlens at those .tsv files)" if tsv.is_dir() else ""
            ),
        )
    ]
    issues[0].kind = "summary-only"
    return rows, issues, {}


# ---- fairseq -----------------------------------------------------------------------------------

_LN2 = math.log(2.0)
# fairseq's criterions log the loss in bits (``loss / math.log(2)``): read in nats, as
# every other loss is, so that e^loss is its perplexity (2^bits)
_FAIRSEQ_ALIASES = {
    "wps": Alias("tokens_per_sec"),
    "train_wall": Alias("train_time"),
    "loss": Alias("train/loss", _LN2),
    "nll_loss": Alias("train/nll_loss", _LN2),
    "val/loss": Alias("val/loss", _LN2),
    "val/nll_loss": Alias("val/nll_loss", _LN2),
}


def _fairseq_name(tag: str, key: str) -> str | None:
    """A fairseq stat's name: ``train_inner`` keys as they are; a valid subset's keys
    (``<subset>_<name>``) under val/."""
    if tag == "train_inner":
        return key
    if tag == "train":
        return key[len("train_") :] if key.startswith("train_") else key
    rest = key[len(tag) + 1 :] if key.startswith(tag + "_") else key
    if tag == "valid":
        return f"val/{rest}"
    return f"val/loss/{tag}" if rest == "loss" else f"val/{tag}/{rest}"


_FAIRSEQ_SKIP = {"epoch", "update", "num_updates", "wall"}


def _fairseq(path: Path) -> tuple[list[Row], list[DataIssue], dict[str, Alias]]:
    by_tag: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    bad: list[int] = []
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            m = _FAIRSEQ_LINE.match(line.rstrip("\n"))
            if not m:
                continue
            try:
                obj = json.loads(m.group("obj"))
            except ValueError:
                bad.append(n)
                continue
            if isinstance(obj, dict):
                by_tag.setdefault(m.group("tag"), []).append((n, obj))
    rows: list[Row] = []
    tags = [t for t in by_tag if t != "train" or "train_inner" not in by_tag]
    for tag in tags:
        for _, obj in by_tag[tag]:
            step_key = "num_updates" if tag == "train_inner" else f"{tag}_num_updates"
            step = _number(obj.get(step_key, obj.get("num_updates")))
            if step is None or not math.isfinite(step):
                continue
            wall = _number(obj.get("wall")) if tag == "train_inner" else None
            for key, raw in obj.items():
                name = _fairseq_name(tag, key)
                value = _number(raw)
                base = key[len(tag) + 1 :] if key.startswith(tag + "_") else key
                if name is None or value is None or base in _FAIRSEQ_SKIP:
                    continue
                rows.append((int(step), name, value, wall))
            if tag == "train_inner" and "epoch" in obj:
                rows.append((int(step), "epoch", float(obj.get("update") or obj["epoch"]), wall))
    issues = [
        _note(
            path,
            "fairseq",
            "read as fairseq --log-format json: train_inner lines at `num_updates`, "
            f"{sum(len(v) for k, v in by_tag.items() if k.startswith(('valid', 'test')))} "
            "validation line(s) as val/<name>; `loss` and `nll_loss` are in bits (base 2, "
            "ppl = 2^loss) and read in nats (× ln 2) like every other loss; "
            "`wall` (seconds since the start) is the clock; `wps` is target tokens per "
            "second of all workers"
            + (
                "; end-of-epoch `train` lines repeat train_inner and were left out"
                if "train" in by_tag and "train" not in tags
                else ""
            ),
        )
    ]
    if bad:
        issues.append(
            DataIssue(
                kind="bad-line",
                source=str(path),
                location=f"line {bad[0]}",
                message=f"{len(bad)} fairseq stats line(s) hold no valid JSON and were skipped",
                count=len(bad),
                details={"lines": bad[:100]},
            )
        )
    return rows, issues, _FAIRSEQ_ALIASES
