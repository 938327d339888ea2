"""JSONL: one JSON object per line (the most common hand-rolled log).

Nested objects are flattened with '/'. The tokens NaN, Infinity and -Infinity (Python's
json writes them) are values. A truncated last line (a run still being written) is a
warning; any other bad line is counted and reported with its line number, and every good
line is kept. The fast path is polars' ndjson reader; only when it refuses the input are
lines checked one by one to find the bad ones.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers._wide import flatten_structs, wide_to_long
from trainlens.readers.base import ReadOptions, run_name_for

FORMAT = "jsonl"

# bare non-finite tokens after ':' ',' or '[' become strings that polars casts to floats
_NONFINITE = re.compile(rb"([:\[,])(\s*)(-?)(NaN|Infinity)(?=\s*[,}\]])")
_OBJECT_START = re.compile(rb'^\{\s*("|\})')
_REPLACE = {b"NaN": b'"nan"', b"Infinity": b'"inf"', b"-Infinity": b'"-inf"'}


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return False
    for line in head.splitlines():
        s = line.strip()
        if not s:
            continue
        # '{"' — a JSON object; "{'loss': ...}" is a printed Python dict (a text log)
        return _OBJECT_START.match(s) is not None and b'"log_history"' not in head
    return False


def _sub_nonfinite(m: re.Match[bytes]) -> bytes:
    return m.group(1) + m.group(2) + _REPLACE[m.group(3) + m.group(4)]


def read(path: Path, opts: ReadOptions) -> list[Run]:
    source = str(path)
    with path.open("rb") as fh:
        fh.seek(opts.start_offset)
        data = fh.read()
    issues: list[DataIssue] = []
    if not data.strip():
        raise UnreadableInputError(f"{path}: the file is empty")

    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        issues.append(
            DataIssue(
                kind="encoding",
                source=source,
                location=f"line {line_no}",
                message=f"bytes that are not UTF-8 (first at line {line_no}) were replaced",
            )
        )
        data = data.decode("utf-8", errors="replace").encode("utf-8")

    # the last line without a newline may be a record still being written
    end = data.rfind(b"\n") + 1
    body, tail = data[:end], data[end:]
    cursor = opts.start_offset + end
    if tail.strip():
        try:
            json.loads(tail)
            body += tail + b"\n"
            cursor = opts.start_offset + len(data)
        except ValueError:
            line_no = body.count(b"\n") + 1
            issues.append(
                DataIssue(
                    kind="truncated-line",
                    source=source,
                    location=f"line {line_no}",
                    message=(
                        f"the last line ({len(tail)} bytes) is incomplete — a run still being "
                        "written? — and was left out"
                    ),
                )
            )

    df, line_numbers, more = _parse(body, source)
    issues.extend(more)
    if df is None or df.width == 0 or df.height == 0:
        raise UnreadableInputError(f"{path}: no JSON objects with metrics found")
    df = flatten_structs(df)
    long, more = wide_to_long(df, source=source, line_numbers=line_numbers)
    issues.extend(more)
    if long.height == 0:
        raise UnreadableInputError(f"{path}: no numeric metrics found in its JSON lines")
    run = build_run(
        long,
        name=run_name_for(path),
        source=source,
        fmt=FORMAT,
        aliases=opts.aliases,
        issues=issues,
    )
    run.cursor[source] = cursor
    return [run]


def _parse(body: bytes, source: str) -> tuple[pl.DataFrame | None, pl.Series, list[DataIssue]]:
    """Parse complete lines; returns the wide frame, each row's line number, issues."""
    issues: list[DataIssue] = []
    has_blank = body.startswith(b"\n") or b"\n\n" in body or b"\n\r\n" in body
    fixed = body
    if b"NaN" in body or b"Infinity" in body:
        fixed = _NONFINITE.sub(_sub_nonfinite, body)
    if not has_blank:
        try:
            df = pl.read_ndjson(io.BytesIO(fixed), infer_schema_length=None)
            lines = pl.Series("_line", range(1, df.height + 1), dtype=pl.Int64)
            return df, lines, issues
        except Exception:  # polars refuses: find the bad lines below
            pass

    # slow path: check each line, keep the good ones, report the bad
    raw_lines = body.split(b"\n")
    good: list[bytes] = []
    good_numbers: list[int] = []
    bad_numbers: list[int] = []
    not_objects: list[int] = []
    for i, line in enumerate(raw_lines, start=1):
        s = line.strip()
        if not s:
            continue
        try:
            obj = json.loads(s)
        except ValueError:
            bad_numbers.append(i)
            continue
        if not isinstance(obj, dict):
            not_objects.append(i)
            continue
        good.append(_NONFINITE.sub(_sub_nonfinite, s))
        good_numbers.append(i)
    if bad_numbers:
        issues.append(
            DataIssue(
                kind="bad-line",
                source=source,
                location=f"line {bad_numbers[0]}",
                message=(
                    f"{len(bad_numbers)} line(s) are not valid JSON and were skipped (lines "
                    f"{', '.join(map(str, bad_numbers[:5]))}{'…' if len(bad_numbers) > 5 else ''})"
                ),
                count=len(bad_numbers),
                details={"lines": bad_numbers[:100]},
            )
        )
    if not_objects:
        issues.append(
            DataIssue(
                kind="bad-line",
                source=source,
                location=f"line {not_objects[0]}",
                message=f"{len(not_objects)} line(s) hold JSON that is not an object; skipped",
                count=len(not_objects),
                details={"lines": not_objects[:100]},
            )
        )
    lines = pl.Series("_line", good_numbers, dtype=pl.Int64)
    if not good:
        return None, lines, issues
    try:
        df = pl.read_ndjson(io.BytesIO(b"\n".join(good)), infer_schema_length=None)
    except Exception:
        # lines valid JSON one by one but not together (e.g. a key's type changes from
        # object to number): fall back to Python objects, flattened by hand
        df = pl.from_dicts(
            [_flat(json.loads(g)) for g in good], infer_schema_length=None, strict=False
        )
    return df, lines, issues


def _flat(obj: dict[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "/"))
        elif isinstance(v, (int, float)) or v is None:
            out[key] = v
        else:
            out[key] = str(v)
    return out
