"""The compiled W&B lane's parts against Python's own: its exact float parser
(Clinger's fast path and Eisel–Lemire, trainlens/readers/_wbfloat.h) must give float()'s
double bit for bit for every text it accepts, and its CRC-32 (carry-less multiplication
folding where the CPU has it, else tables: _wbcrc.h) must be zlib.crc32. Skipped where
the lane is not built."""

from __future__ import annotations

import math
import random
import struct
import zlib
from decimal import Decimal, localcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_wbscan = pytest.importorskip("trainlens.readers._wbscan")


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _same(text: bytes) -> None:
    """The parser's double for ``text`` is float()'s, bit for bit (-0.0 too), or it
    declines (None) a text float() reads differently than plain decimal syntax."""
    got = _wbscan.parse_double(text)
    if got is not None:
        assert _bits(got) == _bits(float(text)), text


EDGES = [
    b"0",
    b"-0",
    b"0.0",
    b"-0.0",
    b"0e999",
    b"1",
    b"-1",
    b"0.1",
    b"0.30000000000000004",
    b"1e22",
    b"1e23",
    b"9007199254740992",
    b"9007199254740993",
    b"9007199254740994",
    b"9007199254740995",
    b"9007199254740992.5",
    b"18014398509481985",
    b"1.7976931348623157e308",
    b"1.7976931348623158e308",
    b"1.7976931348623159e308",
    b"1e308",
    b"1e309",
    b"1e400",
    b"2.2250738585072011e-308",
    b"2.2250738585072012e-308",
    b"2.2250738585072014e-308",
    b"2.225073858507201e-308",
    b"4.9406564584124654e-324",
    b"5e-324",
    b"2.4703282292062327e-324",
    b"2.4703282292062328e-324",
    b"1e-324",
    b"1e-400",
    b"-1e-400",
    b"7.1e-323",
    b"1.796147486892185e+09",
    b"1.7961474868922713e+09",
    b"9999999999999999999",
    b"1844674407370955161",
    b"1.234567890123456789e5",
    b"0.000000000000000000000000000001",
    b"123.456e-7",
    b"1E5",
    b"1e+05",
    b"1e-05",
    b"8.98846567431158e307",
    b"3.0517578125e-05",
    b"1.0000000000000002",
    b"0.9999999999999999",
]


@pytest.mark.parametrize("text", EDGES)
def test_edge_values_read_as_float_reads_them(text: bytes) -> None:
    assert _wbscan.parse_double(text) is not None
    _same(text)


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"-",
        b".",
        b"1e",
        b"1e+",
        b"--1",
        b"1.2.3",
        b"1x",
        b"0x10",
        b"nan",
        b"NaN",
        b"Infinity",
        b"-inf",
        b"+1",
        b" 1",
        b"1 ",
        b"1_000",
        b"true",
        b'"1"',
        b"12345678901234567890",
        b"1.2345678901234567890e5",
    ],
)
def test_what_is_no_plain_decimal_is_left_to_strtod(text: bytes) -> None:
    assert _wbscan.parse_double(text) is None


def test_random_doubles_as_repr_writes_them() -> None:
    """Random bit patterns over the whole range (subnormals, huge, tiny), as W&B writes
    them (repr: the shortest text that reads back); every one read, bit for bit."""
    rnd = random.Random(17)
    declined = 0
    for _ in range(300_000):
        x = struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0]
        if not math.isfinite(x):
            continue
        text = repr(x).encode()
        got = _wbscan.parse_double(text)
        if got is None:
            declined += 1
            continue
        assert _bits(got) == _bits(x), text
    assert declined == 0


def test_near_halfway_texts_round_as_float_does() -> None:
    """Texts of 15-19 digits at and next to the exact midpoint between two neighbouring
    doubles: where a parser that is not exact rounds the wrong way."""
    rnd = random.Random(5)
    with localcontext() as ctx:
        ctx.prec = 800
        for _ in range(20_000):
            x = abs(struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0])
            y = math.nextafter(x, math.inf)
            if not (math.isfinite(y) and x > 0):
                continue
            mid = (Decimal(x) + Decimal(y)) / 2
            for digits in (15, 17, 19):
                mantissa, exp = format(mid, f".{digits - 1}e").split("e")
                ulp = Decimal(10) ** -(digits - 1)
                for delta in (-1, 0, 1):
                    _same(f"{Decimal(mantissa) + delta * ulp}e{exp}".encode())


@settings(max_examples=3000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_double_reads_back(x: float) -> None:
    got = _wbscan.parse_double(repr(x).encode())
    assert got is not None and _bits(got) == _bits(x)


@settings(max_examples=2000, deadline=None)
@given(
    st.integers(min_value=0, max_value=10**19 - 1),
    st.integers(min_value=-360, max_value=330),
    st.booleans(),
)
def test_any_decimal_of_up_to_19_digits(digits: int, exp: int, neg: bool) -> None:
    _same(f"{'-' if neg else ''}{digits}e{exp}".encode())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000), st.integers(min_value=0, max_value=2**32 - 1))
def test_crc32_is_zlibs(data: bytes, crc: int) -> None:
    assert _wbscan.crc32(data, crc) == zlib.crc32(data, crc)


def test_crc32_of_every_length_around_the_folding_steps() -> None:
    """Lengths 0..300 (the table path below 64 bytes, then 4 lanes, 1 lane and the tail
    in every combination) and a 1 MB buffer, at odd alignments."""
    rnd = random.Random(3)
    big = rnd.randbytes(1 << 20)
    for n in range(301):
        for at in (0, 1, 7):
            data = big[at : at + n]
            assert _wbscan.crc32(data) == zlib.crc32(data), (n, at)
    assert _wbscan.crc32(big, 12345) == zlib.crc32(big, 12345)
