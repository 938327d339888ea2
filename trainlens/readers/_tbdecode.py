"""The numpy reader of TensorBoard event files: every record shape, every fault.

One file is read in chunks of records. The record stream is framed and checksummed with
numpy (:mod:`~trainlens.readers._tfrecord`); then each record goes to the first lane that
takes it:

- :mod:`~trainlens.readers._tbcycles`: a training loop's cycle of records at a time, where
  the records repeat byte for byte but for wall time, step, value and checksum;
- :mod:`~trainlens.readers._tbfast`: the Event → Summary → Value layout every scalar writer
  produces, many records at once, with byte gathers at computed offsets;
- :mod:`~trainlens.readers._tbproto`: a small general protobuf decoder, one record at a time.

Tags become ids through one registry per read (:mod:`~trainlens.readers._tbtags`). The
reference read (``fast=False``) checks each record with its own CRC call and sends every
record to the general decoder; the tests hold the other lanes to it value for value.
Corrupt, truncated and unknown records are skipped and reported with their record number
and byte offset.

:mod:`trainlens.readers.tensorboard` (the reader) tries its compiled lane first and comes
here for the files that lane leaves (see its docstring) and for directories of several
event files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue
from trainlens.readers import _shrink
from trainlens.readers import _tfrecord as tfr
from trainlens.readers._tbcycles import CHUNK_RECORDS, byte_period, fast_decode
from trainlens.readers._tbproto import NON_SCALAR_PLUGINS, decode_records
from trainlens.readers._tbrows import FileData, RowBuffer, Rows, RunParts
from trainlens.readers._tbtags import Tags
from trainlens.readers._tfrecord_format import HEADER
from trainlens.readers._wide import enum_runs

MAX_LISTED_ISSUES = 20  # corrupt records reported one by one before being pooled


def _where(record: int, offset: int) -> str:
    return f"record {record + 1} (byte offset {offset})"


def _framing_issues(fr: tfr.Framing, source: str, start: int) -> list[DataIssue]:
    out: list[DataIssue] = []
    for pr in fr.problems:
        at = start + pr.offset
        if pr.kind == "truncated":
            out.append(
                DataIssue(
                    kind="truncated-record",
                    source=source,
                    location=_where(pr.record, at),
                    message=(
                        f"the last record is incomplete ({pr.detail}); the file may still be "
                        f"being written — the {pr.record} complete records before it were read"
                    ),
                    details={"offset": at, "records_before": pr.record},
                )
            )
        else:
            message = (
                "record header is corrupt (length checksum mismatch); skipped "
                f"{pr.skipped} bytes to the next valid record at byte offset "
                f"{at + pr.skipped}"
                if pr.resynced
                else "record header is corrupt (length checksum mismatch) and no valid "
                f"record follows; the last {pr.skipped} bytes were skipped"
            )
            out.append(
                DataIssue(
                    kind="corrupt-record",
                    source=source,
                    location=_where(pr.record, at),
                    message=message,
                    details={"offset": at, "skipped_bytes": pr.skipped},
                )
            )
    return out


def _record_issues(
    kind: str, what: str, records: list[int], offsets: list[int], source: str
) -> list[DataIssue]:
    out = [
        DataIssue(kind=kind, source=source, location=_where(r, o), message=what)
        for r, o in zip(records[:MAX_LISTED_ISSUES], offsets[:MAX_LISTED_ISSUES], strict=True)
    ]
    rest = len(records) - MAX_LISTED_ISSUES
    if rest > 0:
        out.append(
            DataIssue(
                kind=kind,
                source=source,
                location=f"records {records[MAX_LISTED_ISSUES] + 1}..{records[-1] + 1}",
                message=f"{rest} more records: {what}",
                count=rest,
            )
        )
    return out


def read_events_file(
    path: Path, tags: Tags, *, start_offset: int = 0, fast: bool = True
) -> FileData:
    """Read one events file from ``start_offset``. ``fast=False`` is the reference read:
    it walks, checks and decodes one record at a time (the general decoder for every
    record), what the fast lanes are tested against."""
    size = path.stat().st_size
    if start_offset > size:
        raise UnreadableInputError(
            f"{path}: start offset {start_offset} is past the end of the file ({size} bytes)"
        )
    if _shrink.GUARDED:
        with _shrink.guard(path) as g:
            buf = tfr.Buffer.from_file(str(path), start_offset)
            data = _read_buffer(path, tags, buf, start_offset, size, fast=fast)
        if not g.cut:
            return data
    # cut while mapped (or mapping is not guarded here): the bytes there now, copied
    buf = tfr.Buffer.from_file(str(path), start_offset, mapped=False)
    data = _read_buffer(path, tags, buf, start_offset, start_offset + buf.wanted, fast=fast)
    data.issues[:0] = _shrink.note_if_shrank(
        path, start_offset + buf.n, max(size, start_offset + buf.wanted)
    )
    return data


def _read_buffer(
    path: Path, tags: Tags, buf: tfr.Buffer, start_offset: int, size: int, *, fast: bool
) -> FileData:
    source = str(path)
    fr = tfr.frame_records(buf, speculate=fast)
    data = FileData(path, start_offset, start_offset + fr.end, size, len(fr.starts))
    data.issues.extend(_framing_issues(fr, source, start_offset))
    starts, lens = fr.starts, fr.lens
    out = RowBuffer(len(starts))
    bad_crc: list[int] = []
    bad_msg: list[int] = []
    # whole cycles per chunk, when the records repeat (see cycles)
    period, seen = byte_period(buf, starts, lens, fr.periods) if fast else (0, False)
    chunk = CHUNK_RECORDS - CHUNK_RECORDS % period if period else CHUNK_RECORDS
    tries = 6 if seen else 2  # fewer where the probe found no cycles
    verify = tfr.verify_records if fast else tfr.verify_records_slow
    for lo in range(0, len(starts), chunk):
        hi = min(lo + chunk, len(starts))
        ok = verify(buf, starts[lo:hi], lens[lo:hi])
        if not ok.all():
            bad_crc.extend((np.flatnonzero(~ok) + lo).tolist())
        rest = np.flatnonzero(ok) + lo
        chunk_parts: list[Rows] = []
        if fast and len(rest):
            rows, rest = _fast_lanes(buf, starts, lens, rest, tags, data, period, tries)
            chunk_parts.append(rows)
        if len(rest):
            rows, malformed = decode_records(buf.raw, starts, lens, rest, tags, data)
            if len(rows.record):
                chunk_parts.append(rows)
            bad_msg.extend(malformed)
        if len(chunk_parts) > 1:
            both = Rows.concat(chunk_parts)
            chunk_parts = [both.take(np.argsort(both.record, kind="stable"))]
        for part in chunk_parts:
            out.append(part)
        buf.release(int(starts[hi]) if hi < len(starts) else buf.n)
    data.rows = _without_non_scalar_tags(out.rows(), data)
    data.issues.extend(_bad_record_issues(bad_crc, bad_msg, starts, start_offset, source))
    return data


def _fast_lanes(
    buf: tfr.Buffer,
    starts: np.ndarray,
    lens: np.ndarray,
    rec: np.ndarray,
    tags: Tags,
    data: FileData,
    period: int,
    tries: int,
) -> tuple[Rows, np.ndarray]:
    """The records ``rec`` (sound ones) through the vectorized lanes: their rows, and the
    records left to the general decoder."""
    data_at = starts[rec] + HEADER
    near = data_at + lens[rec] > buf.safe_end  # the last record or two of a mapping
    tail = rec[near] if near[-1] else rec[:0]
    if len(tail):
        rec, data_at = rec[~near], data_at[~near]
    rows, decoded, cyc = fast_decode(buf, rec, data_at, lens[rec], tags, period, tries)
    data.fast_records += len(rows.record)
    data.cycle_records += cyc
    rest = np.concatenate([rec[~decoded], tail]) if len(tail) else rec[~decoded]
    return rows, rest


def _without_non_scalar_tags(rows: Rows, data: FileData) -> Rows:
    """The rows less those of a tag that some record declared a non-scalar plugin's (not
    a metric anywhere), counted as skipped."""
    if len(rows.record):
        data.plugins.add("scalars")  # TensorBoard files simple values under this plugin too
    drop = [t for t, plugin in data.tag_plugins.items() if plugin in NON_SCALAR_PLUGINS]
    if drop and len(rows.record):
        gone = np.isin(rows.tag, drop)
        if gone.any():
            for t, c in zip(*np.unique(rows.tag[gone], return_counts=True), strict=True):
                data.skipped[data.tag_plugins[int(t)]] += int(c)
            rows = rows.take(np.flatnonzero(~gone))
    return rows


def _bad_record_issues(
    bad_crc: list[int], bad_msg: list[int], starts: np.ndarray, start_offset: int, source: str
) -> list[DataIssue]:
    out: list[DataIssue] = []
    for kind, what, records in (
        ("corrupt-record", "data checksum mismatch; record skipped", bad_crc),
        (
            "bad-record",
            "checksum is right but the bytes are not a TensorBoard Event; record skipped",
            bad_msg,
        ),
    ):
        if records:
            offsets = [start_offset + int(starts[r]) for r in records]
            out.extend(_record_issues(kind, what, records, offsets, source))
    return out


def tag_issues(frame: pl.DataFrame, tags: Tags, source: str) -> list[DataIssue]:
    """A note for the run's tags that are not UTF-8 (read with U+FFFD in their place):
    protobuf refuses such a record; trainlens keeps its value, but says so."""
    used = set(frame.schema["metric"].categories.to_list())  # type: ignore[attr-defined]
    bad = []
    for raw in tags.names:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            name = raw.decode("utf-8", "replace")
            if name in used:
                bad.append(name)
    if not bad:
        return []
    return [
        DataIssue(
            kind="encoding",
            source=source,
            message=(
                f"{len(bad)} tag(s) are not valid UTF-8 (a damaged record?); read with "
                f"U+FFFD for the bad bytes: {', '.join(map(repr, bad[:3]))}"
                + ("…" if len(bad) > 3 else "")
            ),
            count=len(bad),
            details={"tags": bad[:100]},
        )
    ]


def frame_of(parts: RunParts, tags: Tags) -> tuple[pl.DataFrame, list[int] | None]:
    """The run's long frame with ``metric`` an Enum (no string per row).

    When every metric's steps strictly increase (the usual run: no restart, no step
    logged twice) the rows are regrouped into one block per metric, file order kept
    within each; :func:`build_run` then needs no grouping and every per-metric view is a
    slice. Otherwise the rows stay in file order, which is what tells a restart apart.
    Returns the frame and, when grouped, each metric's row count. The files' rows are
    handed over (``fd.rows`` is emptied) so that each column is freed once regrouped."""
    names = [t.decode("utf-8", "replace") for t in tags.names]
    metrics: dict[str, int] = {}  # metric name -> code, in order of first appearance
    codes, steps, walls, values = [], [], [], []
    small = len(tags.names) <= 1 << 16  # numpy sorts 16-bit keys by radix
    r = Rows.empty()
    for fd, rename in zip(parts.files, parts.renames, strict=True):
        r = fd.rows
        if not len(r.record):
            continue
        to_code = np.zeros(len(names), dtype=np.uint16 if small else np.int64)
        present = np.flatnonzero(np.bincount(r.tag, minlength=len(names)))
        for t in present.tolist():  # tag ids come in order of first appearance
            label = names[t] if rename is None else rename.get(t, names[t])
            to_code[t] = metrics.setdefault(label, len(metrics))
        codes.append(to_code[r.tag])
        steps.append(r.step)
        walls.append(r.wall)
        values.append(r.value)
        fd.rows = Rows.empty()
    del r
    order = list(metrics)
    dtype = pl.Enum(order)
    if not codes:
        schema: dict[str, pl.DataType] = {
            "step": pl.Int64(),
            "metric": dtype,
            "value": pl.Float64(),
            "wall_time": pl.Float64(),
        }
        return pl.DataFrame(schema=schema), None
    code, step, wall, value = (
        np.concatenate(x) if len(x) > 1 else x[0] for x in (codes, steps, walls, values)
    )
    del codes, steps, walls, values  # one reference each: regrouping frees the old column
    counts = np.bincount(code, minlength=len(order))
    if len(order) > 1:
        idx = np.argsort(code, kind="stable")
        grouped = step[idx]
    else:
        idx, grouped = None, step
    rises = np.diff(grouped) > 0
    bounds = np.cumsum(counts)[:-1]
    rises[bounds - 1] = True  # block edges (every count is at least 1)
    if bool(rises.all()):
        if idx is not None:
            step, wall, value = grouped, wall[idx], value[idx]
            del idx
        blocks: list[int] | None = counts.tolist()
        metric = enum_runs(order, counts.tolist())
    else:
        blocks = None
        metric = pl.Series("metric", order, dtype=dtype).gather(code)
    frame = pl.DataFrame(
        [
            pl.Series("step", step),
            metric.alias("metric"),
            pl.Series("value", value),
            pl.Series("wall_time", wall),
        ]
    )
    return frame, blocks
