"""The compiled JSONL lane's frame (private to the JSONL reader).

``_jlscan.scan`` reads a file of flat ``{"key": number, ...}`` lines into a column per key
in one pass of C; polars' ``read_ndjson`` path (:func:`trainlens.readers.jsonl._read_mapped`)
reads the same files with a schema sampled from some lines, proved complete by counting
every ``:`` and newline. The lane's frame stands in for that path's only where that path
would have taken the file whole, so what a run's reader gives never depends on which of
the two read it:

- the lane takes the whole body (any line it cannot read: a string, ``null``, a bare
  ``NaN``, a nested object, a blank line ... and polars' path, or the general one, reads
  the file as before);
- every key of the file is in the sample polars' path would have inferred its schema
  from (``_sample``: else that path would have gone on to the general one);
- the step key, as :func:`trainlens.readers._wide.find_key` finds it, holds integer
  literals only (polars' path reads it as Int64 then; a fraction anywhere and it reads
  the steps' text instead), and no two step-like names differ only in case (which one
  ``find_key`` takes depends on the column order);
- then the frame is that path's: the step Int64, every other key Float64 (polars casts
  the sampled integers so), null where a line lacks the key, columns in order of first
  appearance (as ``_first_appearance_order`` puts them), values parsed to the nearest
  double as polars parses them (tests/test_jsonl_compiled.py holds the two frames equal
  on the fixtures, generated runs and random lines).

A small file (under ``jsonl.FAST_MIN_BYTES``, read as bytes) goes to polars with its
schema inferred from every line (``jsonl._parse``), not from a sample; :func:`read_whole`
stands in for that read under the same conditions but the sample's (there is none), and
with that read's dtypes: a key whose every value is an integer literal is Int64 there (a
step key or not), any other Float64.

Measured on this project's 2-core machine (issue 28): the lane reads a 1M-step,
11M-value file (422 MB) in ~0.45 s of CPU on one thread, against ~1.1–1.3 s of CPU for
polars' path on two.
"""

from __future__ import annotations

import mmap

import polars as pl

from trainlens.readers._wide import STEP_KEYS, find_key

try:
    from trainlens.readers import _jlscan
except ImportError:  # not built (no C compiler at install): polars' path reads every file
    _jlscan = None  # type: ignore[assignment]

#: the names a key is a step candidate under (find_key matches them in any case)
STEP_NAMES = tuple(dict.fromkeys(k.lower().encode() for k in STEP_KEYS))


def read(data: bytes | mmap.mmap, body: int, sample: bytes) -> pl.DataFrame | None:
    """The wide frame of ``data[:body]``, or None where polars' path must read it (see
    the module's docstring). ``sample``: the lines polars' path samples its schema from."""
    if _jlscan is None:
        return None
    sampled = _jlscan.scan(sample, len(sample), ())
    if isinstance(sampled, str):  # (most files the lane does not take show it here)
        return None
    got = _jlscan.scan(data, body, STEP_NAMES)
    if isinstance(got, str):
        return None
    names, values, ints, _rows = got
    if not set(names) <= set(sampled[0]):
        return None
    if _step_names_clash(names):
        return None
    step_key = find_key(names, STEP_KEYS)
    columns = []
    for name, value, whole in zip(names, values, ints, strict=True):
        if name == step_key:
            if whole is None:
                return None
            columns.append(pl.Series(whole).alias(name))
        else:
            columns.append(pl.Series(value).alias(name))
    return pl.DataFrame(columns)


def read_whole(body: bytes) -> pl.DataFrame | None:
    """The wide frame polars gives ``body`` with its schema inferred from every line
    (``jsonl._ndjson``, columns then put in order of first appearance), or None where
    that read must go on as before (see the module's docstring)."""
    if _jlscan is None:
        return None
    got = _jlscan.scan(body, len(body), (), True)
    if isinstance(got, str):
        return None
    names, values, ints, _rows = got
    if _step_names_clash(names):
        return None
    step_key = find_key(names, STEP_KEYS)
    columns = []
    for name, value, whole in zip(names, values, ints, strict=True):
        if whole is not None:
            columns.append(pl.Series(whole).alias(name))
        elif name == step_key:
            return None  # (a fraction: polars' path reads the steps' text)
        else:
            columns.append(pl.Series(value).alias(name))
    return pl.DataFrame(columns)


def _step_names_clash(names: list[str]) -> bool:
    """Two step-like names that differ only in case (which one ``find_key`` takes then
    depends on the column order)."""
    lowered = [n.lower() for n in names if n.lower().encode() in STEP_NAMES]
    return len(lowered) != len(set(lowered))
