"""The tag registry of a TensorBoard read: tag bytes -> id, for many records at once.

Every file of a read shares one registry, so one tag is one id across files. Ids are given
in order of first appearance. :meth:`Tags.lookup` maps the tag bytes of many records to
their ids with a hashed slot table and word compares in numpy, with no Python call per
record; only a tag not seen before costs a dictionary look-up.
"""

from __future__ import annotations

import numpy as np

from trainlens.readers import _tfrecord as tfr

MAX_FAST_TAG = 128  # longer tags go through the general decoder
BYTE_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)
# _WORD_MASKS[k][n]: which bytes of the k-th 8-byte word of an n-byte tag belong to the tag
_WORD_MASKS = BYTE_MASKS[
    np.clip(np.arange(MAX_FAST_TAG + 1)[None, :] - 8 * np.arange(MAX_FAST_TAG // 8)[:, None], 0, 8)
]


class Tags:
    """Tag registry shared by every file of a read: bytes -> id, plus a hashed slot table
    that maps a record's tag bytes to its id without a Python call per record."""

    MAX_WORDS = MAX_FAST_TAG // 8

    def __init__(self, slot_bits: int = 20) -> None:  # fewer bits: a look at a few tags
        self.names: list[bytes] = []
        self.ids: dict[bytes, int] = {}
        self.slot_bits = slot_bits
        self.slot = np.full(1 << slot_bits, -1, dtype=np.int32)
        self.rep_words = np.zeros((self.MAX_WORDS, 0), dtype=np.uint64)
        self.rep_len = np.zeros(0, dtype=np.int64)

    def id_for(self, tag: bytes) -> int:
        i = self.ids.get(tag)
        if i is None:
            i = self.ids[tag] = len(self.names)
            self.names.append(tag)
            if i >= self.rep_len.shape[0]:
                grow = max(64, 2 * i)
                self.rep_words = np.concatenate(
                    [self.rep_words, np.zeros((self.MAX_WORDS, grow), dtype=np.uint64)], axis=1
                )
                self.rep_len = np.concatenate([self.rep_len, np.full(grow, -1, dtype=np.int64)])
            padded = tag + bytes(-len(tag) % 8)
            for k in range(min(len(padded) // 8, self.MAX_WORDS)):
                self.rep_words[k, i] = int.from_bytes(padded[8 * k : 8 * k + 8], "little")
            self.rep_len[i] = len(tag)
        return i

    def lookup(self, buf: tfr.Buffer, pos: np.ndarray, tlen: np.ndarray) -> np.ndarray:
        """Tag id of each record's tag bytes buf[pos:pos+tlen]; -1 where unresolved."""
        n = len(pos)
        if n == 0:
            return np.empty(0, dtype=np.int64)
        nwords = (int(tlen.max()) + 7) // 8
        whole = int(tlen.min()) // 8  # words that lie inside every tag need no mask
        words = np.empty((nwords, n), dtype=np.uint64)
        h = tlen.astype(np.uint64)
        for k in range(nwords):
            w = buf.words(pos + 8 * k)
            if k >= whole:
                w &= _WORD_MASKS[k][tlen]
            words[k] = w
            h *= np.uint64(0x9E3779B97F4A7C15)
            h += w
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
        slot = (h >> np.uint64(64 - self.slot_bits)).astype(np.intp)
        ids = self.slot[slot].astype(np.int64)
        new = np.flatnonzero(ids < 0)
        if len(new):
            _, first = np.unique(slot[new], return_index=True)
            arr = buf.arr
            for i in np.sort(new[first]).tolist():  # ids in order of first appearance
                p, ln = int(pos[i]), int(tlen[i])
                self.slot[slot[i]] = self.id_for(arr[p : p + ln].tobytes())
            ids = self.slot[slot].astype(np.int64)
        ok = self.rep_len[ids] == tlen
        for k in range(nwords):
            ok &= self.rep_words[k][ids] == words[k]
        ids[~ok] = -1
        return ids
