"""The compiled JSONL lane (`_jlscan`) built once with AddressSanitizer (and UBSan where
the compiler has it) and run over mutated real JSONL logs (the fixture runs, written by
json.dumps per step, MMEngine's scalars.json, a bench-generated run): no read or write
outside its buffers on any of them, files that end exactly at a page end read with the
page after them unmapped, and the same outcome from bytes, a mapping and the guarded
mapping. And, in this process, every mutant the lane takes reads as polars' path reads
it (tests/test_jsonl_compiled.py's check). Skipped where there is no C compiler or no
AddressSanitizer, as the other lanes' fuzz tests are."""

from __future__ import annotations

import mmap
import random
import sys
from pathlib import Path

import pytest

from tests.conftest import BENCH, FIXTURES, REPO
from tests.test_fuzz_tbscan_asan import GUARD_PAGE, _build_asan, _compiler, run_under_asan

SOURCE = REPO / "trainlens" / "readers" / "_jlscan.c"
MUTANTS = 300

_CHILD = (
    GUARD_PAGE
    + """
import sys
sys.path.insert(0, sys.argv[1])
import _jlscan
STEPS = (b"step", b"global_step", b"iter", b"it")
def outcome(got):
    if isinstance(got, str):
        return got
    names, values, ints, rows = got
    return (names, [len(v) for v in values], [i is None for i in ints], rows)
n = 0
for name in sys.argv[2:]:
    with open(name, "rb") as fh:
        data = fh.read()
    got = outcome(_jlscan.scan(data, len(data), STEPS))
    every = outcome(_jlscan.scan(data, len(data), (), True))  # (a small file's read)
    assert isinstance(every, str) == isinstance(got, str), name
    for stop in (0, len(data) // 2, max(len(data) - 1, 0)):
        _jlscan.scan(data, stop, STEPS)  # (a prefix: it may end inside a line)
        _jlscan.scan(data, stop, STEPS, True)
    if data:
        with open(name, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
            assert outcome(_jlscan.scan(m, len(m), STEPS)) == got, name
            assert outcome(_jlscan.scan(m, len(m), (), True)) == every, name
    if data and len(data) % PAGE == 0:  # the byte after the end faults
        assert outcome(_jlscan.scan(at_guard_page(name), len(data), STEPS)) == got, name
    n += 1
print(n)
"""
)


def _real_logs(tmp: Path) -> list[bytes]:
    files = [p.read_bytes() for p in sorted(FIXTURES.rglob("*.jsonl"))[:8]]
    files += [p.read_bytes() for p in sorted(FIXTURES.rglob("scalars.json"))]
    sys.path.insert(0, str(BENCH))
    import generate

    generate.generate(generate.Plan(steps=400, noisy=True), tmp, ("jsonl",))
    files.append((tmp / "run.jsonl").read_bytes())
    if len(files) < 3:
        pytest.skip("fixture runs not generated")
    return files


#: JSON-shaped damage: what a writer cut, a hand edit or another tool leaves
_SPLICES = [b'"', b"\\", b":", b",", b"{", b"}", b"[", b"\n", b"\n\n", b" ", b"\t", b"\r",
            b"NaN", b"-", b".", b"e", b"E+", b"0", b"1e999", b'"x"', b"null", b"\x00", b"\xff",
            b"99999999999999999999999", b'"step": 1.5', b'"a": 1, "a": 2']  # fmt: skip


def _mutants(raws: list[bytes], rnd: random.Random) -> list[bytes]:
    out = []
    for i in range(MUTANTS):
        b = bytearray(raws[i % len(raws)][: 1 << 16])
        kind = i % 5
        if kind == 0:  # bit flips anywhere
            for _ in range(rnd.randint(1, 6)):
                b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
        elif kind == 1:  # cut anywhere, or (a flush) after a line
            b = b[: rnd.randrange(len(b))]
            if i % 2:
                b = b[: b.rfind(b"\n") + 1]
        elif kind == 2:  # JSON-shaped splices
            for _ in range(rnd.randint(1, 4)):
                at = rnd.randrange(len(b))
                b[at : at + rnd.randint(0, 3)] = rnd.choice(_SPLICES)
        elif kind == 3:  # a run of garbage bytes
            at = rnd.randrange(len(b))
            b[at : at + 32] = bytes(rnd.randrange(256) for _ in range(32))
        else:  # edits that keep it JSON: digits changed, lines dropped or repeated
            lines = bytes(b).splitlines(keepends=True)
            for _ in range(rnd.randint(1, 5)):
                k = rnd.randrange(len(lines))
                if rnd.random() < 0.5:
                    line = bytearray(lines[k])
                    spots = [j for j, c in enumerate(line) if chr(c).isdigit()]
                    if spots:
                        line[rnd.choice(spots)] = ord(str(rnd.randrange(10)))
                    lines[k] = bytes(line)
                elif rnd.random() < 0.5:
                    del lines[k : k + 1]
                else:
                    lines.insert(k, lines[k])
            b = bytearray(b"".join(lines))
        out.append(bytes(b))
    return out


def _page_exact(raw: bytes) -> list[bytes]:
    """Sound files of whole lines whose size is a whole number of pages (the last line's
    value padded), and the same cut at each page before."""
    page = mmap.PAGESIZE
    lines = raw.splitlines(keepends=True)
    out = []
    for pages in (1, 2, 3):
        body, k = b"", 0
        while len(body) + len(lines[k % len(lines)]) < pages * page - 40:
            body += lines[k % len(lines)]
            k += 1
        pad = pages * page - len(body) - len(b'{"pad": 1}\n')
        last = b'{"pad": ' + b" " * pad + b"1}\n"  # (spaces before a value are JSON)
        out.append(body + last)
        assert len(out[-1]) % page == 0
    return out


@pytest.mark.slow
def test_the_jsonl_lane_under_address_sanitizer(tmp_path: Path) -> None:
    cc = _compiler()
    build = tmp_path / "build"
    build.mkdir()
    libasan = _build_asan(cc, build, SOURCE)
    raws = _real_logs(tmp_path / "written")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    exact = _page_exact(raws[0])
    files = [*raws, *exact, *(e[:-1] for e in exact), *_mutants(raws, random.Random(5))]
    names = []
    for i, data in enumerate(files):
        (corpus / f"m{i}").write_bytes(data)
        names.append(str(corpus / f"m{i}"))
    run_under_asan(_CHILD, build, names, libasan)


@pytest.mark.slow
def test_mutants_the_lane_takes_read_as_polars_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("trainlens.readers._jlscan")
    from tests.test_jsonl_compiled import _agree

    raws = _real_logs(tmp_path / "written")
    taken = 0
    for i, data in enumerate(_mutants(raws, random.Random(9))[:150]):
        path = tmp_path / f"m{i}.jsonl"
        path.write_bytes(data)
        taken += _agree(path, monkeypatch)
    assert taken > 20  # (cuts after a line and JSON-keeping edits leave files it takes)
