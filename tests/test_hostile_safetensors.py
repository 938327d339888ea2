"""safetensors is checked, not trusted (issue 23, item 4).

Healthy files come from the ``safetensors`` package itself; hostile ones are the same
files with their header rewritten. Each break is CKPT001 with one sentence naming the
tensor, never ``ok`` and never an internal error; where the reference implementation
has an opinion (``safe_open``), it refuses the same files.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainlens.checkpoints import audit
from trainlens.checkpoints._files import audit_safetensors
from trainlens.cli import main

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")
safetensors = pytest.importorskip("safetensors")


def _write(path: Path) -> Path:
    st.save_file(
        {"a": torch.ones(2, 3), "b": torch.zeros(4, dtype=torch.bfloat16), "c": torch.ones(0)},
        path,
        metadata={"format": "pt"},
    )
    return path


def _split(path: Path) -> tuple[dict[str, Any], bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _rewrite(path: Path, header: dict[str, Any] | bytes, data: bytes) -> None:
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def _reference_refuses(path: Path) -> bool:
    try:
        with safetensors.safe_open(str(path), framework="pt") as f:
            for k in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                f.get_tensor(k)
    except Exception:  # the reference raises several types
        return True
    return False


def test_files_the_library_writes_are_intact(tmp_path: Path) -> None:
    path = _write(tmp_path / "model_step_5.safetensors")
    got = audit_safetensors(str(path), path.name)
    assert got.problems == [] and got.tensors == {"a": 24, "b": 8, "c": 0}
    assert not _reference_refuses(path)


Mutation = Callable[[dict[str, Any]], None]


def _set(name: str, key: str, value: object) -> Mutation:
    def mutate(h: dict[str, Any]) -> None:
        h[name][key] = value

    return mutate


def _offsets_overlap(h: dict[str, Any]) -> None:
    """The later of a and b moved 2 bytes into the earlier one."""
    later = max(("a", "b"), key=lambda k: h[k]["data_offsets"][0])
    h[later]["data_offsets"] = [x - 2 for x in h[later]["data_offsets"]]


def _extra_tensor(h: dict[str, Any]) -> None:
    end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
    h["d"] = {"dtype": "F32", "shape": [1 << 40], "data_offsets": [end, end + (4 << 40)]}


HOSTILE: dict[str, tuple[Mutation, str]] = {
    "negative shape": (_set("a", "shape", [-2, -3]), "shape [-2, -3] is not a list"),
    "huge shape": (_set("a", "shape", [2**62, 2**62]), "overflows 64 bits"),
    "float shape": (_set("a", "shape", [2.0, 3]), "not a list of non-negative integers"),
    "bool shape": (_set("a", "shape", [True, 6]), "not a list of non-negative integers"),
    "unknown dtype": (_set("a", "dtype", "F128"), 'dtype "F128" is not one'),
    "shape not matching bytes": (_set("a", "shape", [2, 4]), "24 B for F32 [2, 4] (32 B)"),
    "three offsets": (_set("a", "data_offsets", [0, 24, 48]), "are not two byte offsets"),
    "negative offset": (_set("a", "data_offsets", [-24, 0]), "are not two byte offsets"),
    "end before begin": (_set("c", "data_offsets", [32, 31]), "ends at 31 before it begins"),
    "overlap": (_offsets_overlap, "inside the tensor before it"),
    "out of file": (_extra_tensor, "header needs"),
    "metadata not strings": (_set("__metadata__", "format", 3), "__metadata__ is not a map"),
    "entry not an object": (lambda h: h.update(a=[1, 2]), "header entry is malformed"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_each_break_of_the_format_is_one_sentence(tmp_path: Path, case: str) -> None:
    path = _write(tmp_path / "model_step_5.safetensors")
    header, data = _split(path)
    mutate, says = HOSTILE[case]
    mutate(header)
    _rewrite(path, header, data)
    (problem,) = audit_safetensors(str(path), path.name).problems
    assert problem.status in ("corrupt", "truncated")
    assert says in problem.message, problem.message
    assert "\n" not in problem.message and len(problem.message) < 200
    assert _reference_refuses(path), f"the reference reads {case!r}"


HEADERS: dict[str, bytes] = {
    "1e400 shape": b'{"a":{"dtype":"F32","shape":[1e400],"data_offsets":[0,24]}}',
    "NaN shape": b'{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,24]}}',
    "200k deep": b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}",
    "200k deep, unclosed": b'{"a":' + b"{" * 200_000,
    "deep inside metadata": b'{"__metadata__":{"x":' + b"[" * 50 + b"]" * 50 + b"}}",
    "deep behind a bracket in a string": b'{"a[":' + b"[" * 5000 + b"]" * 5000 + b"}",
    "not an object": b"[1, 2, 3]",
    "not UTF-8": b'{"\xff":1}',
    "not JSON": b"{'a': 1}",
    "4300-digit offset": b'{"a":{"dtype":"F32","shape":[6],"data_offsets":[0,'
    + b"9" * 5000
    + b"]}}",
}


@pytest.mark.parametrize("case", list(HEADERS))
def test_crafted_headers_are_corrupt_never_a_crash(tmp_path: Path, case: str) -> None:
    path = tmp_path / "model_step_5.safetensors"
    _rewrite(path, HEADERS[case], b"\0" * 24)
    t0 = time.perf_counter()
    (problem,) = audit_safetensors(str(path), path.name).problems
    assert time.perf_counter() - t0 < 5
    assert problem.status == "corrupt"
    if "deep" in case:
        assert "nests deeper than the 3 levels" in problem.message


def test_header_length_past_the_file_or_the_cap(tmp_path: Path) -> None:
    path = _write(tmp_path / "model_step_5.safetensors")
    raw = path.read_bytes()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw[8:])
    (p,) = audit_safetensors(str(path), path.name).problems
    assert p.status == "truncated" and "shorter than its" in p.message
    path.write_bytes(struct.pack("<Q", 2**63) + raw[8:])
    (p,) = audit_safetensors(str(path), path.name).problems
    assert p.status == "corrupt" and "not plausible" in p.message


def test_through_the_command_each_is_ckpt001_never_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i, case in enumerate(["negative shape", "overlap"]):
        path = _write(tmp_path / f"model_step_{i + 1}.safetensors")
        header, data = _split(path)
        HOSTILE[case][0](header)
        _rewrite(path, header, data)
    _rewrite(tmp_path / "model_step_3.safetensors", HEADERS["200k deep"], b"")
    _write(tmp_path / "model_step_4.safetensors")
    inv, found, _ = audit(tmp_path, with_run=False)
    assert [c.status for c in inv.checkpoints] == ["corrupt", "corrupt", "corrupt", "ok"]
    assert [f.code for f in found if f.code != "CKPT005"] == ["CKPT001"] * 3  # (sizes vary)
    assert main(["checkpoints", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "internal error" not in out.out + out.err


def test_a_big_header_costs_a_few_times_its_size(tmp_path: Path) -> None:
    """20,000 one-element tensors (a 1.7 MB header): the audit's peak allocation stays
    under 5x the header (tracemalloc; the 92 MB figures are in bench/safetensors_header.py)."""
    import tracemalloc

    n = 20_000
    entry = '"model.layers.{i}.mlp.weight":{{"dtype":"F32","shape":[1],"data_offsets":[{a},{b}]}}'
    parts = [entry.format(i=i, a=4 * i, b=4 * i + 4) for i in range(n)]
    blob = ("{" + ",".join(parts) + "}").encode()
    path = tmp_path / "model_step_1.safetensors"
    _rewrite(path, blob, b"\0" * (4 * n))
    tracemalloc.start()
    got = audit_safetensors(str(path), path.name)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert got.problems == [] and len(got.tensors) == n
    assert peak < 5 * len(blob), f"{peak / len(blob):.1f}x the header"
