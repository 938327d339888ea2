"""The W&B transaction log read with numpy: framing, checksums and history decoding for
millions of records without a Python step per value (private to the W&B run reader).

A W&B run logs one history record per step, each a dozen items; a Python loop over
them costs ~100 µs a step (measured: 2.0 s for 20k steps), 100 s for a 1M-step run.
Here every stage is a pass over arrays:

- **framing**: all 32 KiB blocks are walked side by side (chunk k of every block in one
  numpy step: ~75 steps for a file of ~440-byte chunks); the checksum of each chunk we
  decode is one ``zlib.crc32`` call (W&B's CRC-32, seeded with the type byte);
- **protobuf**: :func:`walk` reads the fields of many messages at once (field i of every
  message in one step), with vectorized varints; records -> history -> items -> key and
  value take a few steps each;
- **keys**: each key's bytes hashed 8 at a time, the distinct ones found with
  ``np.unique`` and every member checked byte for byte against its representative (a
  collision never passes silently: it goes to the exact path);
- **values**: the JSON numbers are copied next to one another, one per line, and parsed
  by polars' CSV float parser (exact: the same double as Python's ``float``).

What does not fit (records split over blocks, nested keys of several parts, values that
are no plain number, a key over 64 bytes, a history record without ``_step``, stats,
config and run records) goes back to the exact per-record decoder in
:mod:`trainlens.readers.wandb_run`, which is the reference the tests hold this to.
"""

from __future__ import annotations

import io
import zlib

import numpy as np
import polars as pl

from trainlens.core.dataclass import dataclass, field
from trainlens.readers import _wandb_log as wl

PAD = 64  # zero bytes after the data: fixed-width reads past a message's end stay in bounds
MAX_KEY = 64  # longer keys go to the exact decoder
MAX_VALUE = 40  # longer JSON values too (a float64 takes at most 24 characters)
_PRIME = np.uint64(0x100000001B3)
_NUMERIC_START = np.zeros(256, dtype=bool)
_NUMERIC_START[list(b"-0123456789NI")] = True
_CSV_FRAMING = np.frombuffer(b',"\n\r', dtype=np.uint8)


@dataclass
class Chunks:
    """The chunks of a log in file order: header offset, data length, type, stored CRC."""

    pos: np.ndarray
    length: np.ndarray
    kind: np.ndarray
    crc: np.ndarray
    damage: list[wl.Damage] = field(default_factory=list)


def _u16(arr: np.ndarray, p: np.ndarray) -> np.ndarray:
    return arr[p].astype(np.int64) | (arr[p + 1].astype(np.int64) << 8)


def _u32(arr: np.ndarray, p: np.ndarray) -> np.ndarray:
    return _u16(arr, p) | (_u16(arr, p + 2) << 16)


def chunks(arr: np.ndarray, size: int) -> Chunks:
    """Every chunk header of the log (``arr`` holds ``size`` bytes then PAD zeros), all
    blocks walked side by side; damage as :func:`trainlens.readers._wandb_log.frame`."""
    nb = max(1, -(-size // wl.BLOCK))
    block = np.arange(nb, dtype=np.int64)
    pos = block * wl.BLOCK
    pos[0] = wl.FILE_HEADER
    end = np.minimum((block + 1) * wl.BLOCK, size)
    live = np.flatnonzero(end - pos >= wl.CHUNK_HEADER)
    out: list[tuple[np.ndarray, ...]] = []
    damage: list[wl.Damage] = []
    short = np.flatnonzero((end - pos > 0) & (end - pos < wl.CHUNK_HEADER) & (end == size))
    while live.size:
        p = pos[live]
        length = _u16(arr, p + 4)
        kind = arr[p + 6].astype(np.int64)
        nxt = p + wl.CHUNK_HEADER + length
        stop = (length == 0) & (kind == 0)  # zero padding: the block is done
        wrong = ~stop & ((kind < wl.FULL) | (kind > wl.LAST) | (nxt > end[live]))
        cut = wrong & (kind >= wl.FULL) & (kind <= wl.LAST) & (nxt > size) & (end[live] == size)
        for i in np.flatnonzero(wrong):
            why = (
                "the file ends inside a record"
                if cut[i]
                else "a chunk header that cannot be (rest of block left out)"
            )
            damage.append(wl.Damage(int(live[i]), int(p[i]), why, 1 if cut[i] else 0))
        good = ~(stop | wrong)
        out.append((p[good], length[good], kind[good], _u32(arr, p[good])))
        pos[live] = nxt
        cont = good & (end[live] - nxt >= wl.CHUNK_HEADER)
        tail = good & (end[live] - nxt > 0) & (end[live] - nxt < wl.CHUNK_HEADER)
        short = np.concatenate([short, live[tail & (end[live] == size)]])
        live = live[cont]
    for b in short:  # a last block that ends with less than a header: the file was cut
        if size % wl.BLOCK and b == nb - 1:
            damage.append(wl.Damage(int(b), int(pos[b]), "the file ends inside a chunk header", 1))
    cols = [np.concatenate(c) if out else np.empty(0, np.int64) for c in zip(*out, strict=True)]
    if not out:
        cols = [np.empty(0, np.int64)] * 4
    order = np.argsort(cols[0], kind="stable")
    damage.sort(key=lambda d: d.offset)
    pos_, length_, kind_, crc_ = (c[order] for c in cols)
    return Chunks(pos_, length_, kind_, crc_, damage=damage)


def crc_ok(arr: np.ndarray, ch: Chunks, which: np.ndarray) -> np.ndarray:
    """Whether each chunk in ``which`` holds its checksum."""
    mv = memoryview(arr.data)
    seeds = wl.TYPE_SEED
    starts = (ch.pos[which] + wl.CHUNK_HEADER).tolist()
    ends = (ch.pos[which] + wl.CHUNK_HEADER + ch.length[which]).tolist()
    kinds = ch.kind[which].tolist()
    got = [zlib.crc32(mv[a:b], seeds[k]) for a, b, k in zip(starts, ends, kinds, strict=True)]
    return np.array(got, dtype=np.int64) == ch.crc[which]


# ---- protobuf, many messages at once ------------------------------------------------------


def varints(arr: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each offset, and the offset after it."""
    b = arr[p].astype(np.uint64)
    val = b & np.uint64(0x7F)
    p = p + 1
    more = np.flatnonzero(b & np.uint64(0x80))
    shift = 7
    while more.size and shift < 64:
        bb = arr[p[more]].astype(np.uint64)
        val[more] |= (bb & np.uint64(0x7F)) << np.uint64(shift)
        p[more] += 1
        more = more[(bb & np.uint64(0x80)) != 0]
        shift += 7
    return val, p


@dataclass
class Fields:
    """Fields of many messages: which message, field number, wire type, and (a, b) the
    value's byte range (wire 2, 1, 5) or (value, 0) for a varint; ``bad`` marks
    messages that are no valid protobuf."""

    owner: np.ndarray
    number: np.ndarray
    wire: np.ndarray
    a: np.ndarray
    b: np.ndarray
    ordinal: np.ndarray  # the field's place in its message
    bad: np.ndarray


def walk(arr: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Fields:
    n = len(starts)
    limit = len(arr) - PAD
    pos = starts.astype(np.int64).copy()
    bad = np.zeros(n, dtype=bool)
    live = np.flatnonzero(starts < ends)
    parts: list[tuple[np.ndarray, ...]] = []
    k = 0
    while live.size:
        p = pos[live]
        tag, p = varints(arr, p)
        number = (tag >> np.uint64(3)).astype(np.int64)
        wire = (tag & np.uint64(7)).astype(np.int64)
        a = np.zeros(len(p), dtype=np.int64)
        b = np.zeros(len(p), dtype=np.int64)
        w0 = np.flatnonzero(wire == 0)
        if w0.size:
            v, q = varints(arr, np.minimum(p[w0], limit))
            a[w0] = v.astype(np.int64)
            p[w0] = q
        w2 = np.flatnonzero(wire == 2)
        if w2.size:
            ln, q = varints(arr, np.minimum(p[w2], limit))
            ln = np.minimum(ln, np.uint64(limit)).astype(np.int64)
            a[w2] = q
            b[w2] = q + ln
            p[w2] = q + ln
        for w, size in ((1, 8), (5, 4)):
            sel = wire == w
            a[sel] = p[sel]
            b[sel] = p[sel] + size
            p[sel] += size
        wrong = ~np.isin(wire, (0, 1, 2, 5)) | (p > ends[live]) | (number == 0)
        bad[live[wrong]] = True
        ok = ~wrong
        parts.append((live[ok], number[ok], wire[ok], a[ok], b[ok], np.full(int(ok.sum()), k)))
        pos[live] = np.minimum(p, limit)
        live = live[ok & (p < ends[live])]
        k += 1
    if parts:
        cols = [np.concatenate(c) for c in zip(*parts, strict=True)]
    else:
        cols = [np.empty(0, np.int64)] * 6
    owner, number, wire, a, b, ordinal = cols
    return Fields(owner, number, wire, a, b, ordinal, bad=bad)


# ---- keys and values ----------------------------------------------------------------------


_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def u64_at(arr: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The 8 bytes at each offset as a little-endian uint64, from two aligned reads
    (a gather of unaligned 8-byte rows costs ~10x more: measured 0.29 s for 1.5M keys).
    ``arr``'s length is a multiple of 8 with PAD bytes to spare."""
    words = arr.view("<u8")
    q = p >> 3
    shift = ((p & 7) * 8).astype(np.uint64)
    lo = words[q] >> shift
    hi = words[q + 1] << (np.uint64(64) - shift)  # (a shift by 64 is x86's shift by 0)
    return np.where(shift == 0, lo, lo | hi)


def _words(arr: np.ndarray, a: np.ndarray, lens: np.ndarray, w: int) -> np.ndarray:
    """The w-th 8 bytes of each key (little-endian), zero past its end."""
    return u64_at(arr, a + 8 * w) & _MASKS[np.minimum(np.maximum(lens - 8 * w, 0), 8)]


def intern(arr: np.ndarray, a: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """A code per key (``arr[a:a+len]``, all at most MAX_KEY bytes) and the distinct keys;
    -1 for a key whose hash collides with another's (left to the exact path)."""
    n = len(a)
    if not n:
        return np.empty(0, np.int64), []
    nwords = max(1, -(-int(lens.max()) // 8))
    words = [_words(arr, a, lens, w) for w in range(nwords)]
    h = lens.astype(np.uint64) * _PRIME
    for word in words:
        h = (h ^ word) * _PRIME
    uniq = pl.Series(h).unique().sort().to_numpy()  # (hashing: few distinct among millions)
    codes = np.searchsorted(uniq, h)
    rep = np.empty(len(uniq), dtype=np.int64)
    rep[codes] = np.arange(n)  # any member stands for its hash
    same = lens == lens[rep][codes]
    for word in words:
        same &= word == word[rep][codes]
    codes = np.where(same, codes, -1)
    keys = [bytes(arr[a[r] : a[r] + lens[r]]) for r in rep.tolist()]
    return codes.astype(np.int64), keys


def parse_numbers(arr: np.ndarray, a: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The JSON numbers at ``arr[a:a+len]`` (each at most MAX_VALUE bytes, starting like a
    number, NaN or Infinity) as float64; NaN for one that does not parse (checked by the
    caller against the text)."""
    n = len(a)
    if not n:
        return np.empty(0, np.float64)
    nwords = int(lens.max()) // 8 + 1
    width = nwords * 8
    cols = np.arange(width)
    mat = np.stack([u64_at(arr, a + 8 * w) for w in range(nwords)], axis=1).view(np.uint8)
    # a value holding a separator, quote or line break would split or join CSV rows (and
    # the read fail: "1,2" in a damaged log ended the read); it is made a text no float
    # parses, so the exact decoder judges it
    inside = cols[None, :] < lens[:, None]
    framing = (np.isin(mat[:, :width], _CSV_FRAMING) & inside).any(axis=1)
    if framing.any():
        lens = lens.copy()
        mat[framing, 0] = ord("x")
        lens[framing] = 1
    mat[np.arange(n), lens] = ord("\n")
    text = mat[cols[None, :] <= lens[:, None]].tobytes()
    try:
        frame = pl.read_csv(
            io.BytesIO(text),
            has_header=False,
            new_columns=["v"],
            schema={"v": pl.Float64},
            quote_char=None,
        )
    except (pl.exceptions.ComputeError, pl.exceptions.PolarsError):
        frame = pl.read_csv(
            io.BytesIO(text),
            has_header=False,
            new_columns=["v"],
            schema={"v": pl.String},
            quote_char=None,
        ).select(pl.col("v").cast(pl.Float64, strict=False))
    return frame.get_column("v").to_numpy().astype(np.float64, copy=False)


# ---- records -------------------------------------------------------------------------------

R_HISTORY = 2
EXACT_RECORDS = (5, 7, 17, 18)  # config, stats, run, exit: few, decoded by the exact path


@dataclass
class Records:
    """The sound records of one log, sorted out by kind."""

    history: np.ndarray  # (n, 5): order key, payload start and end, record start and end
    exact: list[tuple[int, bytes]]  # (order key, record bytes) for the exact decoder
    damage: list[wl.Damage]
    undecodable: int
    count: int


def _joined(arr: np.ndarray, ch: Chunks, damage: list[wl.Damage]) -> list[tuple[int, bytes]]:
    """Records split over blocks (FIRST, MIDDLE…, LAST), joined, their chunks checked."""
    split = np.flatnonzero(ch.kind != wl.FULL)
    if not split.size:
        return []
    ok = crc_ok(arr, ch, split)
    out: list[tuple[int, bytes]] = []
    parts: list[bytes] | None = None
    first = 0
    for i, good in zip(split.tolist(), ok.tolist(), strict=True):
        kind, p, n = int(ch.kind[i]), int(ch.pos[i]), int(ch.length[i])
        data = arr[p + wl.CHUNK_HEADER : p + wl.CHUNK_HEADER + n].tobytes()
        if not good:
            damage.append(wl.Damage(p // wl.BLOCK, p, "bad checksum", 1))
            parts = None
        elif kind == wl.FIRST:
            parts, first = [data], p
        elif parts is None or i == 0 or ch.kind[i - 1] == wl.FULL:
            damage.append(
                wl.Damage(p // wl.BLOCK, p, "the middle or end of a record whose start is lost", 1)
            )
            parts = None
        elif kind == wl.MIDDLE:
            parts.append(data)
        else:
            parts.append(data)
            out.append((first, b"".join(parts)))
            parts = None
    if parts is not None:
        damage.append(
            wl.Damage(first // wl.BLOCK, first, "a record split over blocks, cut short", 1)
        )
    return out


def _bad_checksums(ch: Chunks, rows: np.ndarray, damage: list[wl.Damage]) -> None:
    """One damage note per block for the FULL chunks ``rows`` whose checksum fails."""
    blocks = ch.pos[rows] // wl.BLOCK
    for b in np.unique(blocks).tolist():
        at = rows[blocks == b]
        damage.append(wl.Damage(int(b), int(ch.pos[at[0]]), "bad checksum", int(at.size)))


def _place_joined(
    arr: np.ndarray, size: int, joined: list[tuple[int, bytes]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, bytes]]]:
    """Copy the joined records into ``arr``'s room after the file (see
    :func:`buffer_for`), so the array lanes read them like whole ones: their order keys,
    starts and ends; the ones that did not fit are returned for the exact decoder."""
    at = size + PAD
    room = len(arr) - 2 * PAD
    keys, starts, ends, left = [], [], [], []
    for key, data in joined:
        if at + len(data) > room:
            left.append((key, data))
            continue
        arr[at : at + len(data)] = np.frombuffer(data, dtype=np.uint8)
        keys.append(key)
        starts.append(at)
        ends.append(at + len(data))
        at += len(data) + 1
    as_array = [np.array(x, dtype=np.int64) for x in (keys, starts, ends)]
    return as_array[0], as_array[1], as_array[2], left


def buffer_for(size: int) -> np.ndarray:
    """A zeroed array to read a log of ``size`` bytes into: a multiple of 8 long (for
    :func:`u64_at`), with PAD bytes after the file and room for the records split over
    blocks once joined (~1.3 % of a file of 440-byte records; 1/16 is kept)."""
    return np.zeros((size + size // 16 + 4 * PAD) // 8 * 8, dtype=np.uint8)


def records(arr: np.ndarray, size: int) -> Records:
    ch = chunks(arr, size)
    damage = list(ch.damage)
    j_key, j_start, j_end, too_big = _place_joined(arr, size, _joined(arr, ch, damage))
    full = np.flatnonzero(ch.kind == wl.FULL)
    n_full = len(full)
    key = np.concatenate([ch.pos[full], j_key])
    start = np.concatenate([ch.pos[full] + wl.CHUNK_HEADER, j_start])
    end = np.concatenate([ch.pos[full] + wl.CHUNK_HEADER + ch.length[full], j_end])
    top = walk(arr, start, end)
    is_hist = (top.number == R_HISTORY) & (top.wire == 2)
    is_exact = np.isin(top.number, EXACT_RECORDS) & (top.wire == 2)
    wanted = np.zeros(len(key), dtype=bool)
    wanted[top.owner[is_hist | is_exact]] = True
    wanted |= top.bad
    check = np.flatnonzero(wanted[:n_full])  # (joined ones were checked chunk by chunk)
    ok = np.ones(len(key), dtype=bool)
    ok[check] = crc_ok(arr, ch, full[check])
    _bad_checksums(ch, full[~ok[:n_full]], damage)
    damage.sort(key=lambda d: d.offset)
    usable = ok & ~top.bad
    hist = is_hist & usable[top.owner]
    owners = top.owner[hist]
    history = np.stack([key[owners], top.a[hist], top.b[hist], start[owners], end[owners]], axis=1)
    history = history[np.argsort(history[:, 0], kind="stable")]  # in file order
    exact = [
        (int(key[r]), arr[start[r] : end[r]].tobytes())
        for r in np.unique(top.owner[is_exact & usable[top.owner]]).tolist()
    ]
    return Records(
        history=history,
        exact=exact + too_big,
        damage=damage,
        undecodable=int((top.bad & ok).sum()),
        count=len(key) + len(too_big),
    )


# ---- history -------------------------------------------------------------------------------

H_ITEM = 1
KEY_FIELDS = (1, 2)  # key, nested_key
VALUE_JSON = 16
OWN = {"_step": "step", "_timestamp": "wall", "_runtime": "runtime"}


def _items(arr: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    """The items of many history records: (record, start, end) of each. The usual layout
    (tag 0x0A, a one-byte length) is followed with a few array operations per item;
    whatever follows it (the step field, longer items) goes through :func:`walk`."""
    n = len(a)
    pos = a.astype(np.int64).copy()
    live = np.flatnonzero(a < b)
    got: list[tuple[np.ndarray, ...]] = []
    while live.size:
        p = pos[live]
        length = arr[p + 1].astype(np.int64)
        nxt = p + 2 + length
        ok = (arr[p] == 0x0A) & (length < 0x80) & (nxt <= b[live])
        got.append((live[ok], p[ok] + 2, nxt[ok]))
        pos[live[ok]] = nxt[ok]
        live = live[ok & (nxt < b[live])]
    rest = np.flatnonzero(pos < b)
    tail = walk(arr, pos[rest], b[rest])
    sel = (tail.number == H_ITEM) & (tail.wire == 2)
    got.append((rest[tail.owner[sel]], tail.a[sel], tail.b[sel]))
    bad = np.zeros(n, dtype=bool)
    bad[rest[tail.bad]] = True
    owner, start, end = (np.concatenate(c) for c in zip(*got, strict=True))
    return owner, start, end, bad


def _item_parts(arr: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    """Key and value of each item in the layout the SDK writes, a one-part key then
    value_json (``0x12|0x0A klen key 0x82 0x01 vlen value``, exactly filling the item),
    and whether the value may be a number; ``ok`` False for any other layout."""
    klen = arr[a + 1].astype(np.int64)
    v = np.minimum(a + 2 + klen, len(arr) - PAD)
    vlen = arr[v + 2].astype(np.int64)
    ok = ((arr[a] == 0x12) | (arr[a] == 0x0A)) & (klen < 0x80) & (klen <= MAX_KEY)
    ok &= (arr[v] == 0x82) & (arr[v + 1] == 0x01) & (vlen >= 1) & (vlen <= MAX_VALUE)
    ok &= v + 3 + vlen == b
    ok &= _NUMERIC_START[arr[v + 3]]
    return ok, a + 2, klen, v + 3, vlen


def history_fast(
    arr: np.ndarray, recs: Records, out: list[pl.DataFrame], base: int
) -> list[tuple[int, bytes]]:
    """Decode the history records the numpy lane can (a frame appended to ``out``:
    rec, step, metric, value, wall_time); the others, with the exact-path records,
    returned as (order key, bytes)."""
    h = recs.history
    n = len(h)
    slow = np.zeros(n, dtype=bool)
    owner, start, end, bad = _items(arr, h[:, 1], h[:, 2])
    slow |= bad
    ok, ka, kl, va, vl = _item_parts(arr, start, end)
    slow[owner[~ok]] = True
    fast = np.flatnonzero(ok)
    codes, keys = intern(arr, ka[fast], kl[fast])
    slow[owner[fast[codes < 0]]] = True
    values = parse_numbers(arr, va[fast], vl[fast])
    # (NaN from a value that is not the text NaN — "Nope", "1,2" — is no NaN: exact path)
    a0 = va[fast]
    nan_text = (vl[fast] == 3) & (arr[a0] == ord("N")) & (arr[a0 + 1] == ord("a"))
    nan_text &= arr[a0 + 2] == ord("N")
    unparsed = np.isnan(values) & ~nan_text
    slow[owner[fast[unparsed]]] = True
    names = wl.unique_names([wl.text(k) for k in keys])
    own = {OWN[k]: i for i, k in enumerate(names) if k in OWN}
    step = np.full(n, np.nan)
    wall = np.full(n, np.nan)
    if "step" in own:
        at = codes == own["step"]
        step[owner[fast[at]]] = values[at]
    if "wall" in own:
        at = codes == own["wall"]
        wall[owner[fast[at]]] = values[at]
    # a step the exact decoder must judge (trainlens.core.steps): none, not a whole number,
    # below 0 (W&B never writes one), or past 2**53 (where the float may not be the integer
    # its text says)
    with np.errstate(invalid="ignore"):
        slow |= ~((step >= 0) & (step <= 2.0**53) & (step == np.floor(step)))
    keep = ~slow[owner[fast]] & ~np.isin(codes, list(own.values()))
    rows = owner[fast[keep]]
    code = codes[keep]
    metric_names = [n for i, n in enumerate(names) if i not in own.values()]
    remap = np.full(max(len(names), 1), -1, dtype=np.int64)
    remap[[i for i in range(len(names)) if i not in own.values()]] = np.arange(len(metric_names))
    code = remap[code]
    order = np.lexsort((rows, code))  # one block per metric, in the order logged
    rows, code = rows[order], code[order]
    if len(metric_names):
        metric = pl.Series("metric", metric_names, dtype=pl.Enum(metric_names)).gather(
            pl.Series(code)
        )
        out.append(
            pl.DataFrame(
                {
                    "rec": base + h[rows, 0],
                    "step": step[rows].astype(np.int64),
                    "metric": metric,
                    "value": values[keep][order],
                    "wall_time": pl.Series(wall[rows]).fill_nan(None),
                }
            )
        )
    exact = [(int(h[i, 0]), arr[h[i, 3] : h[i, 4]].tobytes()) for i in np.flatnonzero(slow)]
    return exact + recs.exact
