"""The compiled TensorBoard lane built once with AddressSanitizer and run over mutated
real event files (torch's SummaryWriter and tensorboardX, damaged as in
tests/_events.py): no read or write outside its buffers on any of them. Skipped where
there is no C compiler or it has no AddressSanitizer."""

from __future__ import annotations

import mmap
import os
import random
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from tests._events import MUTATIONS, event_files, mutate
from tests.conftest import REPO

torch_tb = pytest.importorskip("torch.utils.tensorboard")
tensorboardX = pytest.importorskip("tensorboardX")

SOURCE = REPO / "trainlens" / "readers" / "_tbscan.c"
MUTANTS_PER_KIND = 40

# (for the children: a file whose size is a whole number of pages, mapped so that the page
# after its end is mapped PROT_NONE: a lane reading one byte past the end faults there,
# which ASan reports. A file's own mapping is followed by whatever the kernel put next,
# often readable; a heap buffer's red zone is ASan's, but the lanes read mapped files.)
GUARD_PAGE = """
import ctypes, mmap, os
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long]
PAGE = mmap.PAGESIZE
def at_guard_page(name):
    size = os.path.getsize(name)
    assert size and size % PAGE == 0, name
    base = _libc.mmap(None, size + PAGE, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    fd = os.open(name, os.O_RDONLY)
    got = _libc.mmap(base, size, mmap.PROT_READ, mmap.MAP_PRIVATE | 0x10, fd, 0)  # MAP_FIXED
    os.close(fd)
    assert got == base, ctypes.get_errno()
    return (ctypes.c_char * size).from_address(got)
"""

_CHILD = (
    GUARD_PAGE
    + """
import sys
sys.path.insert(0, sys.argv[1])
import _tbscan
n = 0
for name in sys.argv[2:]:
    with open(name, "rb") as fh:
        data = fh.read()
    got = _tbscan.scan(data)
    if data:
        with open(name, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
            again = _tbscan.scan(m)
        assert isinstance(got, str) == isinstance(again, str), name
    if data and len(data) % PAGE == 0:
        again = _tbscan.scan(at_guard_page(name))
        assert isinstance(got, str) == isinstance(again, str), name
        assert isinstance(got, str) or got.records == again.records, name
    n += 1
print(n)
"""
)


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    return cc


def _build_asan(cc: str, out: Path, source: Path = SOURCE) -> Path:
    """The lane in ``source`` compiled with -fsanitize=address (and UndefinedBehavior
    Sanitizer, where the compiler has it, stopping at its first report) into ``out``
    (named after the source), and the libasan to preload (Python itself is not built
    with it)."""
    probe = out / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    if subprocess.run(
        [cc, "-fsanitize=address", str(probe), "-o", str(out / "probe")], capture_output=True
    ).returncode:
        pytest.skip("the C compiler has no AddressSanitizer")
    ubsan = ["-fsanitize=undefined", "-fno-sanitize-recover=undefined"]
    if subprocess.run(
        [cc, "-fsanitize=address", *ubsan, str(probe), "-o", str(out / "probe")],
        capture_output=True,
    ).returncode:
        ubsan = []
    lib = subprocess.run(
        [cc, "-print-file-name=libasan.so"], capture_output=True, text=True
    ).stdout.strip()
    if not lib or not Path(lib).exists():
        pytest.skip("libasan.so not found to preload")
    target = out / f"{source.stem}{sysconfig.get_config_var('EXT_SUFFIX')}"
    cmd = [
        cc,
        "-fsanitize=address",
        *ubsan,
        "-fno-omit-frame-pointer",
        "-g",
        "-O1",
        "-shared",
        "-fPIC",
        f"-I{sysconfig.get_paths()['include']}",
        str(source),
        "-o",
        str(target),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return Path(os.path.realpath(lib))


def _real_files(d: Path) -> list[bytes]:
    rng = np.random.default_rng(0)
    files: list[bytes] = []
    for name, writer, kw in (
        ("torch", torch_tb.SummaryWriter, {}),
        ("torch-tensor", torch_tb.SummaryWriter, {"new_style": True}),
        ("tbx", tensorboardX.SummaryWriter, {}),
    ):
        w = writer(str(d / name))
        for s in range(25):
            for tag in ("loss", "lr", "a-tag-of-seventy-" + "x" * 53):
                w.add_scalar(tag, float(rng.normal()), s - 3, **kw)  # negative steps too
        w.close()
        [path] = event_files(d / name)
        files.append(path.read_bytes())
    return files


def _page_exact(d: Path) -> bytes:
    """An events file written by tensorboardX whose size is a whole number of pages: 40
    scalars, then scalars whose tags (1-100 bytes: every length field one byte) bring
    the file to the end of a page."""
    page = mmap.PAGESIZE

    def write(tags: list[str]) -> bytes:
        sub = d / f"w{len(tags)}-{sum(map(len, tags))}"
        w = tensorboardX.SummaryWriter(str(sub))
        for s in range(40):
            w.add_scalar("loss", 0.5 + s, s, walltime=1.0)
        for t in tags:
            w.add_scalar(t, 1.0, 1, walltime=1.0)
        w.close()
        [path] = event_files(sub)
        return path.read_bytes()

    base = len(write([]))
    per = len(write(["t"])) - base - 1  # a record's bytes besides its tag's
    need = -base % page
    while need < 2 * (per + 100):
        need += page
    n = -(-need // (per + 100))
    lens = [need // n - per] * n
    lens[0] += need % n
    raw = write(["t" * k for k in lens])
    assert len(raw) % page == 0
    return raw


def _outgrowing(d: Path) -> bytes:
    """A tensorboardX file of events holding 24 values each under one-byte tags (~10 bytes
    a row): more rows than the lane's first guess from the file's size, so its columns
    grow while it is read; steps go back once (the rows stay in file order) in the second
    half, so cuts of the file take both layouts."""
    from tensorboardX.proto.summary_pb2 import Summary

    w = tensorboardX.SummaryWriter(str(d))
    for i, s in enumerate([*range(300), *range(250, 300)]):
        values = [Summary.Value(tag=chr(97 + t), simple_value=float(i + t)) for t in range(24)]
        w._get_file_writer().add_summary(Summary(value=values), s, walltime=1.0 + i)
    w.close()
    [path] = event_files(d)
    return path.read_bytes()


@pytest.mark.slow
def test_the_lane_under_address_sanitizer(tmp_path: Path) -> None:
    cc = _compiler()
    build = tmp_path / "build"
    build.mkdir()
    libasan = _build_asan(cc, build)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rnd = random.Random(13)
    names: list[str] = []
    # files that end exactly at a page end: whole (sound), and cut at each page before
    exact = _page_exact(tmp_path / "exact")
    for k in range(len(exact) // mmap.PAGESIZE, 0, -1):
        (corpus / f"page-{k}").write_bytes(exact[: k * mmap.PAGESIZE])
        names.append(str(corpus / f"page-{k}"))
    # columns that outgrow their first guess, the file cut at each page (at each of those
    # ends the next page is unmapped)
    grows = _outgrowing(tmp_path / "grows")
    assert len(grows) // 10 > len(grows) // 37 + 16
    for k in range(1, len(grows) // mmap.PAGESIZE + 1):
        (corpus / f"grows-{k}").write_bytes(grows[: k * mmap.PAGESIZE])
        names.append(str(corpus / f"grows-{k}"))
    for i, raw in enumerate([*_real_files(tmp_path / "written"), grows]):
        (corpus / f"{i}-intact").write_bytes(raw)
        names.append(str(corpus / f"{i}-intact"))
        for how in MUTATIONS:
            for j in range(MUTANTS_PER_KIND):
                damaged, _ = mutate(raw, how, rnd)
                path = corpus / f"{i}-{how}-{j}"
                path.write_bytes(damaged)
                names.append(str(path))
    run_under_asan(_CHILD, build, names, libasan)


def run_under_asan(child: str, build: Path, names: list[str], libasan: Path) -> None:
    """Run ``child`` (a script importing the lane from ``build``) over the files ``names``
    with AddressSanitizer preloaded; fail on any report, a crash, or a file not done."""
    # (PYTHONMALLOC=malloc: small bytes objects come from malloc, with red zones, not
    # from pymalloc's arenas, where an overrun would go unseen)
    env = dict(
        os.environ,
        LD_PRELOAD=str(libasan),
        ASAN_OPTIONS="detect_leaks=0:exitcode=99",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=98",
        PYTHONMALLOC="malloc",
    )
    proc = subprocess.run(
        [sys.executable, "-c", child, str(build), *names],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert "AddressSanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert "runtime error" not in proc.stderr, proc.stderr[-4000:]  # (UBSan's reports)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == str(len(names))
