"""CRC-32C over many TFRecord records at once, with numpy (private to the TensorBoard reader).

The format and the pure-Python CRC are in :mod:`trainlens.readers._tfrecord_format`; this
module makes checking a whole file fast. Where the ``crc32c`` package is installed
(:data:`fast_crc32c`, hardware CRC), :func:`trainlens.readers._tfrecord.verify_records`
checks a stretch of records with one call, using the per-length :class:`Residues` below.
Without it, ``crc(data) = ~(K[L] ^ XOR_j B_{L-1-j}[data[j]])`` is evaluated for many
records at once, where ``B_d`` is the contribution of a byte value ``d`` bytes before the
end of the message and ``K[L]`` that of the initial register; two bytes at a time are looked
up in 64K-entry tables (:func:`data_crcs`). The tables start from the format module's
byte table, so the polynomial is written once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trainlens.readers._tfrecord_format import (
    LENGTH_BYTES,
    MASK_DELTA,
    crc32c_py,
    crc32c_table,
    masked_crc,
)

fast_crc32c: Callable[..., int] | None
try:  # hardware CRC32C (declared dependency); crc32c_py and the numpy tables are the fallback
    from crc32c import crc32c as fast_crc32c
except ImportError:  # pragma: no cover - exercised only without the crc32c package
    fast_crc32c = None

_U32 = np.uint32
_FULL = 0xFFFFFFFF

# records longer than this are checked with one CRC call each (images, graphs, histograms)
VECTOR_CRC_MAX_LEN = 160


def mask_array(crc: np.ndarray) -> np.ndarray:
    crc = crc.astype(_U32, copy=False)
    return ((crc >> _U32(15)) | (crc << _U32(17))) + _U32(MASK_DELTA)


_T_LIST = crc32c_table()
_T = np.array(_T_LIST, dtype=_U32)


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C of a buffer (the ``crc32c`` package when installed, else a table loop)."""
    if fast_crc32c is not None:
        return int(fast_crc32c(data))
    return crc32c_py(data)


def crc32c_from(data: bytes | memoryview, value: int) -> int:
    """CRC-32C continued from a previous CRC ``value``."""
    if fast_crc32c is not None:
        return int(fast_crc32c(data, value))
    return crc32c_py(data, value)


class _Tables:
    """Per-distance byte and byte-pair tables, grown on demand and shared by all reads."""

    def __init__(self) -> None:
        self.byte = np.empty((0, 256), dtype=_U32)  # byte[d][b]: b sitting d bytes from the end
        self.pairs: list[np.ndarray] = []  # pairs[m][lo | hi << 8]: hi at distance 2m, lo 2m+1
        self.init = np.array([_FULL], dtype=_U32)  # init[L]: initial register after L bytes

    def ensure(self, max_len: int) -> None:
        have = self.byte.shape[0]
        if have < max_len + 2:
            rows = [self.byte[i] for i in range(have)] or [_T.copy()]
            while len(rows) < max_len + 2:
                c = rows[-1]
                rows.append(_T[c & _U32(0xFF)] ^ (c >> _U32(8)))
            self.byte = np.stack(rows)
            init = [int(x) for x in self.init]
            while len(init) < max_len + 2:
                c = init[-1]
                init.append(_T_LIST[c & 0xFF] ^ (c >> 8))
            self.init = np.array(init, dtype=_U32)
        while 2 * len(self.pairs) + 2 <= max_len:
            m = len(self.pairs)
            hi, lo = self.byte[2 * m], self.byte[2 * m + 1]
            self.pairs.append((hi[:, None] ^ lo[None, :]).ravel())


_TABLES = _Tables()
_LEN_CRC: dict[int, int] = {}


def length_crc(length: int) -> int:
    """Masked CRC of a record's 8-byte length field (cached: lengths repeat)."""
    c = _LEN_CRC.get(length)
    if c is None:
        c = masked_crc(crc32c(length.to_bytes(LENGTH_BYTES, "little")))
        if len(_LEN_CRC) < 1 << 16:
            _LEN_CRC[length] = c
    return c


def data_crcs(arr: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Unmasked CRC-32C of ``arr[s:s+L]`` for each record, vectorized over records of up to
    VECTOR_CRC_MAX_LEN bytes (longer ones get one CRC call each)."""
    out = np.empty(len(starts), dtype=_U32)
    if not len(starts):
        return out
    long_ = lens > VECTOR_CRC_MAX_LEN
    if long_.any():
        for i in np.flatnonzero(long_).tolist():
            s, n = int(starts[i]), int(lens[i])
            out[i] = crc32c(arr.data[s : s + n])
        short = np.flatnonzero(~long_)
        if len(short):
            out[short] = data_crcs(arr, starts[short], lens[short])
        return out
    max_len = int(lens.max())
    _TABLES.ensure(max_len)
    # longest records first, so the records still active at distance 2m are a prefix
    order = np.argsort(-lens.astype(np.int16), kind="stable")
    ls = lens[order]
    ends = starts[order] + ls
    crc = _TABLES.init[ls].copy()
    neg = -ls
    pairs = _TABLES.pairs
    m = 0
    while 2 * m + 2 <= max_len:
        cnt = int(np.searchsorted(neg, -(2 * m + 2), side="right"))
        q = ends[:cnt] - (2 * m + 2)
        idx = arr[q].astype(np.intp) | (arr[q + 1].astype(np.intp) << 8)
        crc[:cnt] ^= pairs[m][idx]
        m += 1
    odd = np.flatnonzero(ls & 1)
    if len(odd):
        lo = ls[odd]
        crc[odd] ^= _TABLES.byte.ravel()[(lo - 1) * 256 + arr[ends[odd] - lo]]
    out[order] = crc ^ _U32(_FULL)
    return out


def window8_masked_crcs(arr: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Masked CRC of the 8 bytes at every offset in [lo, hi): candidate record headers."""
    _TABLES.ensure(8)
    pos = np.arange(lo, hi, dtype=np.int64)
    crc = np.full(len(pos), _TABLES.init[8], dtype=_U32)
    for m in range(4):
        q = pos + (6 - 2 * m)
        crc ^= _TABLES.pairs[m][arr[q].astype(np.intp) | (arr[q + 1].astype(np.intp) << 8)]
    return mask_array(crc ^ _U32(_FULL))


def unmask_array(masked: np.ndarray) -> np.ndarray:
    r = masked.astype(_U32, copy=False) - _U32(MASK_DELTA)
    return (r << _U32(15)) | (r >> _U32(17))


class Residues:
    """Per-length constants for the one-call-per-stretch check (see verify_records)."""

    LIMIT = 1 << 16

    def __init__(self) -> None:
        self.table = np.zeros(self.LIMIT, dtype=_U32)
        self.have = np.zeros(self.LIMIT, dtype=bool)

    @staticmethod
    def value(length: int) -> int:
        # crc32c of `length` zero bytes, xor the raw register of (header, `length` zeros)
        header = length.to_bytes(LENGTH_BYTES, "little") + length_crc(length).to_bytes(4, "little")
        zeros = bytes(length)
        raw_header = crc32c_from(header + zeros, _FULL) ^ _FULL
        return crc32c(zeros) ^ raw_header

    def lookup(self, lens: np.ndarray) -> np.ndarray:
        small = lens < self.LIMIT
        if not small.all():
            out = np.empty(len(lens), dtype=_U32)
            out[small] = self.lookup(lens[small])
            for i in np.flatnonzero(~small).tolist():
                out[i] = self.value(int(lens[i]))
            return out
        missing = lens[~self.have[lens]]
        for length in set(missing.tolist()):
            self.table[length] = self.value(length)
            self.have[length] = True
        return self.table[lens]


RESIDUES = Residues()
