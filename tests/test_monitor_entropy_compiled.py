"""The monitor's compiled entropy (trainlens/monitor/_entropy.c) against torch's
softmax and entr in float64: every dtype it takes, row lengths on
each side of its 8- and 32-wide blocks, strided and masked logits, non-finite values, the
vectorized and the scalar loop alike; random inputs by hypothesis; and the lane built
with AddressSanitizer reading rows that end exactly at an unmapped page. Where the lane
is not built or not vectorized the monitor uses torch's ops, and these tests skip."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.conftest import REPO  # noqa: E402
from trainlens.monitor import stats  # noqa: E402
from trainlens.monitor.records import evaluate  # noqa: E402

_entropy = pytest.importorskip("trainlens.monitor._entropy")

CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
KINDS = {torch.bool: 1, torch.uint8: 1, torch.int32: 2, torch.int64: 3, torch.float32: 4}
KINDS[torch.int8] = 5


def _reference(logits: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[float, float]:
    """(sum of H * w, sum of w) by torch in float64, a masked-out row counting for nothing:
    -sum(p log p) of softmax(z - max z), which stays exact where z is huge (torch's
    Categorical normalizes by subtracting logsumexp, which loses ln 2 beside 1e30)."""
    z = logits.double()
    d = z - z.amax(-1, keepdim=True)
    h = torch.special.entr(torch.softmax(d, -1)).sum(-1)
    if mask is None:
        return float(h.sum()), float(h.numel())
    w = mask.double().reshape(h.shape)
    return float((h[w != 0] * w[w != 0]).sum()), float(w.sum())


def _compiled(
    logits: torch.Tensor, mask: torch.Tensor | None = None, scalar: bool = False
) -> tuple[float, float]:
    lead, strides = tuple(logits.shape[:-1]), tuple(logits.stride()[:-1])
    args = (logits.data_ptr(), CODES[logits.dtype], lead, strides, logits.shape[-1])
    if mask is None:
        return _entropy.entropy(*args, force_scalar=scalar)
    m = mask.contiguous()
    return _entropy.entropy(*args, m.data_ptr(), KINDS[m.dtype], force_scalar=scalar)


def _close(got: tuple[float, float], want: tuple[float, float], rel: float = 2e-6) -> None:
    assert got[1] == pytest.approx(want[1], rel=1e-12)
    assert got[0] == pytest.approx(want[0], rel=rel, abs=1e-6 * max(1.0, want[1]))


MODES = [False] + ([True] if _entropy.FAST else [])


@pytest.mark.parametrize("scalar", [True, False] if _entropy.FAST else [True])
@pytest.mark.parametrize("dtype", list(CODES))
@pytest.mark.parametrize("vocab", [1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 96, 1000, 50257])
def test_every_dtype_and_row_length_matches_torch(
    vocab: int, dtype: torch.dtype, scalar: bool
) -> None:
    g = torch.Generator().manual_seed(vocab)
    logits = (torch.randn(3, 4, vocab, generator=g) * 6).to(dtype)
    # the reference sees the very values the lane reads (rounded to the dtype)
    _close(_compiled(logits, scalar=scalar), _reference(logits.float()))


def test_the_monitor_uses_the_lane_where_it_is_vectorized() -> None:
    if not _entropy.FAST:
        pytest.skip("this CPU has no AVX2/FMA/F16C: torch's ops take the entropy")
    assert stats._FAST
    logits = torch.randn(2, 5, 50)
    entropy, padding = stats.entropy_and_padding(logits)
    assert padding is None
    # the compiled lane leaves two floats, not tensors for the conversion
    assert all(type(v) is float for v in entropy.nums + entropy.dens)
    assert evaluate(entropy) == pytest.approx(_reference(logits)[0] / 10, rel=1e-6)


@pytest.mark.parametrize("scalar", [True, False])
def test_strided_leading_dimensions(scalar: bool) -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 9, 70, generator=g) * 3
    for view in (logits[:, :-1], logits.transpose(0, 1), logits[::2, 1::3]):
        assert not view.is_contiguous()
        _close(_compiled(view, scalar=scalar), _reference(view))


def test_more_leading_dimensions_than_the_lane_walks_go_to_torch() -> None:
    logits = torch.randn(*([1] * 9), 2, 7)  # nine leading dimensions: torch's ops
    assert stats._entropy_cpu(logits, None) is None
    got = evaluate(stats.entropy_and_padding(logits)[0])
    assert got == pytest.approx(_reference(logits)[0] / 2, rel=1e-5)
    eight = torch.randn(*([1] * 7), 2, 7)  # eight: the lane
    assert stats._entropy_cpu(eight, None) is not None


def test_a_last_dimension_with_a_stride_goes_to_torch() -> None:
    logits = torch.randn(3, 40, 6).transpose(1, 2)  # rows of 40 with a stride of 6
    assert stats._entropy_cpu(logits, None) is None
    got = evaluate(stats.entropy_and_padding(logits)[0])
    assert got == pytest.approx(_reference(logits)[0] / 18, rel=1e-5)


@pytest.mark.parametrize("dtype", list(KINDS))
def test_masks_of_every_dtype_weight_and_count(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 6, 33, generator=g) * 2
    mask = torch.ones(2, 6)
    mask[0, 4:] = 0
    mask[1, 0] = 0
    mask = mask.to(dtype)
    for scalar in MODES:
        _close(_compiled(logits, mask, scalar=scalar), _reference(logits, mask))
    entropy, padding = stats.entropy_and_padding(logits, mask)
    assert evaluate(entropy) == pytest.approx(_reference(logits, mask)[0] / 9, rel=1e-5)
    assert padding is not None and evaluate(padding) == pytest.approx(3 / 12)


def test_a_fractional_mask_weights_its_rows_as_torch_lane_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logits = torch.randn(4, 5, 12)
    mask = torch.rand(4, 5)
    mask[1] = 0
    compiled = evaluate(stats.entropy_and_padding(logits, mask)[0])
    monkeypatch.setattr(stats, "_FAST", False)
    torch_lane = evaluate(stats.entropy_and_padding(logits, mask)[0])
    assert compiled == pytest.approx(torch_lane, rel=1e-5)


@pytest.mark.parametrize("scalar", [True, False])
def test_non_finite_logits(scalar: bool) -> None:
    g = torch.Generator().manual_seed(4)
    base = torch.randn(2, 3, 20, generator=g)
    masked = base.clone()
    masked[..., :7] = -math.inf  # masked tokens: probability 0, nothing added
    _close(_compiled(masked, scalar=scalar), _reference(masked))
    for where, value in (((0, 1, 19), math.nan), ((1, 2, 3), math.inf), ((0, 0, 0), math.nan)):
        bad = base.clone()
        bad[where] = value
        assert math.isnan(_compiled(bad, scalar=scalar)[0])
    every = base.clone()
    every[1, 1] = -math.inf  # a row of -inf only: no distribution, NaN as torch's softmax
    assert math.isnan(_compiled(every, scalar=scalar)[0])
    # a NaN at a position the mask leaves out is not read (in either lane)
    mask = torch.ones(2, 3, dtype=torch.bool)
    mask[0, 1] = False
    bad = base.clone()
    bad[0, 1, 5] = math.nan
    _close(_compiled(bad, mask, scalar=scalar), _reference(base, mask))


def test_a_masked_out_nan_counts_for_nothing_in_the_torch_lane_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logits = torch.randn(2, 4, 10)
    mask = torch.ones(2, 4)
    mask[1, 2] = 0
    logits[1, 2, 0] = math.nan
    monkeypatch.setattr(stats, "_FAST", False)
    got = evaluate(stats.entropy_and_padding(logits, mask)[0])
    clean = logits.clone()
    clean[1, 2] = 0.0
    assert got == pytest.approx(_reference(clean, mask)[0] / 7, rel=1e-5)


def test_no_positions_and_bad_arguments() -> None:
    logits = torch.zeros(0, 5)
    assert _compiled(logits) == (0.0, 0.0)
    with pytest.raises(ValueError):
        _entropy.entropy(8, 7, (1,), (5,), 5)  # no such dtype
    with pytest.raises(ValueError):
        _entropy.entropy(0, 0, (1,), (5,), 5)  # a row and no address
    with pytest.raises(ValueError):
        _entropy.entropy(8, 0, (1, 2), (5,), 5)  # shape and strides disagree
    with pytest.raises(ValueError):
        _entropy.entropy(8, 0, (1,) * 9, (1,) * 9, 5)  # more dimensions than it walks


_SPECIAL = st.sampled_from([0.0, -0.0, 1e-42, -1e-42, 88.0, -88.0, 1e30, -1e30, -math.inf])


@settings(max_examples=150, deadline=None)
@given(
    rows=st.integers(1, 6),
    vocab=st.integers(1, 80),
    scale=st.floats(0.0, 60.0),
    specials=st.lists(st.tuples(st.integers(0, 10_000), _SPECIAL), max_size=6),
    dtype=st.sampled_from(list(CODES)),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_rows_match_torch(
    rows: int,
    vocab: int,
    scale: float,
    specials: list[tuple[int, float]],
    dtype: torch.dtype,
    seed: int,
) -> None:
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(rows, vocab, generator=g) * scale).to(dtype).float()
    flat = logits.view(-1)
    for at, value in specials:
        flat[at % flat.numel()] = value
    logits = logits.to(dtype)  # (1e30 is inf in float16: a NaN row, as torch's)
    want = _reference(logits.float())
    for scalar in MODES:
        got = _compiled(logits, scalar=scalar)
        if math.isnan(want[0]):
            assert math.isnan(got[0])
        else:
            _close(got, want, rel=1e-5)


_CHILD = """
import ctypes, math, mmap, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import _entropy
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE = mmap.PAGESIZE
def at_page_end(data):
    # the bytes end exactly where an unmapped (PROT_NONE) page begins
    pages = -(-len(data) // PAGE)
    base = libc.mmap(None, (pages + 1) * PAGE, 3, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert libc.mprotect(base + pages * PAGE, PAGE, 0) == 0
    start = base + pages * PAGE - len(data)
    ctypes.memmove(start, data, len(data))
    return start
rng = np.random.default_rng(0)
n = 0
for vocab in map(int, sys.argv[2:]):  # (one row length an argument)
    for rows in (1, 2, 5):
        z = (rng.standard_normal((rows, vocab)) * 4).astype(np.float32)
        if vocab > 1:
            z[0, -1] = -np.inf
        mask = np.ones(rows, dtype=np.uint8)
        maddr = at_page_end(mask.tobytes())
        bf16 = (z.view(np.uint32) >> 16).astype(np.uint16).tobytes()
        for code, data in ((0, z.tobytes()), (1, bf16), (2, z.astype(np.float16).tobytes())):
            addr = at_page_end(data)
            for scalar in (False, True):
                a = _entropy.entropy(addr, code, (rows,), (vocab,), vocab, force_scalar=scalar)
                b = _entropy.entropy(
                    addr, code, (rows,), (vocab,), vocab, maddr, 1, force_scalar=scalar
                )
                assert a[1] == rows and b == a, (vocab, rows, code, a, b)
                assert math.isfinite(a[0]), (vocab, rows, code, a)
    n += 1
print(n)
"""


def test_the_lane_under_address_sanitizer(tmp_path: Path) -> None:
    from tests.test_fuzz_tbscan_asan import _build_asan, _compiler, run_under_asan

    source = REPO / "trainlens" / "monitor" / "_entropy.c"
    libasan = _build_asan(_compiler(), tmp_path, source)
    vocabs = [1, 3, 7, 8, 9, 16, 17, 31, 32, 33, 63, 64, 65, 100]  # around the 8/32 blocks
    run_under_asan(_CHILD, tmp_path, [str(v) for v in vocabs], libasan)
