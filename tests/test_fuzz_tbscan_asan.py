"""The compiled TensorBoard lane built once with AddressSanitizer and run over mutated
real event files (torch's SummaryWriter and tensorboardX, damaged as in
tests/_events.py): no read or write outside its buffers on any of them. Skipped where
there is no C compiler or it has no AddressSanitizer."""

from __future__ import annotations

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

_CHILD = """
import mmap, sys
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
    n += 1
print(n)
"""


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    return cc


def _build_asan(cc: str, out: Path, source: Path = SOURCE) -> Path:
    """The lane in ``source`` compiled with -fsanitize=address into ``out`` (named after
    the source), and the libasan to preload (Python itself is not built with it)."""
    probe = out / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    if subprocess.run(
        [cc, "-fsanitize=address", str(probe), "-o", str(out / "probe")], capture_output=True
    ).returncode:
        pytest.skip("the C compiler has no AddressSanitizer")
    lib = subprocess.run(
        [cc, "-print-file-name=libasan.so"], capture_output=True, text=True
    ).stdout.strip()
    if not lib or not Path(lib).exists():
        pytest.skip("libasan.so not found to preload")
    target = out / f"{source.stem}{sysconfig.get_config_var('EXT_SUFFIX')}"
    cmd = [
        cc,
        "-fsanitize=address",
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
    for i, raw in enumerate(_real_files(tmp_path / "written")):
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
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == str(len(names))
