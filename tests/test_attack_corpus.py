"""The held-out attack corpus (tests/_attack_corpus.py) through the real CLI, each command
in its own process: exit 0/1/2 without a traceback, no signal, no hang, no code run, no
outside read, XML that parses, text without raw controls, the verdict and values kept."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import _attack_corpus as corpus

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 60.0
# raw controls a terminal or a CI parser would act on (newline is the line break itself)
_RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class Server:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "_attack_corpus.py"), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )

    def run(self, argv: list[str], tmp: Path, env: dict[str, str]) -> tuple[dict, str, str]:
        out, err = tmp / "stdout", tmp / "stderr"
        req = {"argv": argv, "out": str(out), "err": str(err), "timeout": TIMEOUT, "env": env}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        return answer, _text(out), _text(err)


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "replace") if path.exists() else ""


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    assert s.proc.stdin is not None
    s.proc.stdin.close()
    s.proc.wait(timeout=30)


def _check_text(what: str, text: str) -> None:
    raw = _RAW.search(text)
    assert raw is None, (
        f"{what}: raw {raw.group()!r} in …{text[max(0, raw.start() - 60) : raw.end() + 20]!r}"
    )


# the name attacks run three commands on a 60-step run each (3 s a name on a loaded box):
# two stay in the quick loop, the rest are slow
_QUICK_NAMES = {"name_line_separator", "name_csi_8bit"}
_CASES = [
    pytest.param(n, marks=pytest.mark.slow)
    if n.startswith("name_") and n not in _QUICK_NAMES
    else n
    for n in sorted(corpus.ATTACKS)
]


@pytest.mark.parametrize("name", _CASES)
def test_attack_is_answered_cleanly(server: Server, tmp_path: Path, name: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    attack = corpus.ATTACKS[name](work)
    summary = tmp_path / "step_summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary), "COLUMNS": "200"}
    outputs = []
    for argv in attack.commands:
        if argv[0] == "gate":
            argv = [*argv, "--jobs", "1"]
        answer, out, err = server.run(argv, tmp_path, env)
        what = f"{name}: trainlens {' '.join(a[:80] for a in argv)}"
        assert not answer["hung"], f"{what}: no answer in {TIMEOUT:g} s"
        assert answer["signal"] is None, f"{what}: killed by signal {answer['signal']}"
        assert answer["code"] in (0, 1, 2), f"{what}: exit {answer['code']}\n{err[-3000:]}"
        for stream, text in (("stdout", out), ("stderr", err)):
            assert "Traceback" not in text and "internal error" not in text.lower(), (
                f"{what}: {stream}\n{text[-3000:]}"
            )
            assert corpus.SECRET not in text, f"{what}: the outside secret was printed"
            if "--json" not in argv and not (argv[0] == "gate" and "junit" in argv):
                _check_text(f"{what} {stream}", text)
        outputs.append((argv, answer["code"], out))
    assert attack.marker is None or not attack.marker.exists(), f"{name}: input code ran"
    for target in attack.xml:
        files = sorted(target.rglob("*.svg")) if target.is_dir() else [target]
        for f in files:
            ET.parse(f)  # a CI parser or a browser rejects the file whole otherwise
    for f in [*attack.outputs, summary]:
        if f.exists():
            _check_text(f"{name}: {f.name}", f.read_text(encoding="utf-8", errors="replace"))
    if attack.unsafe is not None:
        argv, _, out = next(o for o in outputs if "--json" in o[0])
        integrity = [c["integrity"] for c in json.loads(out)["checkpoints"]]
        if attack.unsafe:
            assert integrity == ["unsafe"], f"{name}: {out[:2000]}"
            assert all(code == 1 for _, code, _ in outputs), name
        else:
            assert "unsafe" not in integrity, f"{name}: {out[:2000]}"
    if attack.values is not None and attack.values[1] is not None:
        frame, want = attack.values
        rows = [json.loads(line) for line in frame.read_text().splitlines() if line.strip()]
        kept = [r for r in rows if str(r.get("metric")).endswith("loss")]
        assert len(kept) == want, f"{name}: {len(kept)} loss values kept, {want} written"
    if attack.note is not None:
        assert attack.note in outputs[0][2], f"{name}: {outputs[0][2][-2000:]}"


def test_escaped_dunder_is_a_dunder_to_pickle() -> None:
    """Why p0_escaped_dunder_key is an attack: pickle decodes a STRING's escapes, so the
    key BUILD sets is ``__setstate__`` (safe to load: it holds no global)."""
    assert pickle.loads(b"S'__setstate\\x5f_'\n.") == "__setstate__"


@pytest.mark.slow
def test_legacy_second_pickle_really_runs_under_torch_load(tmp_path: Path) -> None:
    """Why legacy_second_pickle_protocol0 is an attack: torch.load (weights_only=False, as
    older code and many scripts call it) runs the protocol-0 second pickle."""
    attack = corpus.legacy_second_pickle_protocol0(tmp_path)
    assert attack.marker is not None
    blob = tmp_path / "ckpts" / "ckpt_step_7.pt"
    code = (
        "import sys, torch\n"
        "try: torch.load(sys.argv[1], weights_only=False)\n"
        "except Exception: pass"
    )
    subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, timeout=120)
    assert attack.marker.exists()


def test_the_fork_server_is_the_real_cli(server: Server, tmp_path: Path) -> None:
    """One command both ways: ``python -m trainlens`` and the fork server agree."""
    attack = corpus.jsonl_duplicate_keys(tmp_path)
    argv = attack.commands[0]
    real = subprocess.run(
        [sys.executable, "-m", "trainlens", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    answer, out, _ = server.run(argv, tmp_path, {})
    assert answer["code"] == real.returncode
    assert out == real.stdout
