"""What trainlens prints can't be forged by what it read (issue 23, item 8).

Every hostile name goes, as a metric name (JSONL keys; TensorBoard tags from torch's
SummaryWriter; W&B keys from the SDK, offline), a run folder's name and a zip member's
name, through every output: analyze as text (piped and on a TTY) and JSON, gate in each
format, checkpoints, the report (HTML, Markdown, SVG), and watch (lines, JSON,
notifications, --exec environment, Prometheus). Each output is made once per source (the
module's fixtures); the tests only read it.

What must hold: no raw ESC, C1, bidi control or lone surrogate in text outputs; no line
that starts with ``::`` unless trainlens wrote the annotation; JUnit and SVG parse with a
real XML parser; Markdown has no image, link or tag from the input; and every name is
still there, in its escaped form.
"""

from __future__ import annotations

import contextlib
import glob
import http.server
import io
import json
import math
import os
import pty
import re
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WebhookRecorder, run_wandb_offline
from trainlens.cli import main
from trainlens.core.sanitize import github_data, markdown, terminal, xml

HOSTILE = {
    "osc-title": "loss\x1b]0;pwned\x07",
    "hidden": "\x1b[8mhidden\x1b[0m",
    "forged-error": "a\nb::error file=x.py,line=1::forged",
    "cr-warning": "x\r::warning::y",
    "bidi": "\u202eevil",
    "nul": "nul\x00byte",
    "bel": "bel\x07",
    "vt": "vt\x0b",
    "md-image": "![img](http://evil/x.png)",
    "md-link": "[link](http://evil)",
    "html": "<script>alert(1)</script>",
    "backticks": "`code`",
    "pipes": "|pipe|",
    "surrogate": "\ud800lone",
}
# a folder name can hold all but NUL and '/'; a lone surrogate is what Python makes of a
# name's bytes that are not UTF-8 (os.fsdecode), so that is the folder's surrogate
FOLDERS = {
    k: v
    for k, v in HOSTILE.items()
    if "\x00" not in v and "/" not in v and not re.search("[\ud800-\udfff]", v)
}
FOLDERS["surrogate"] = os.fsdecode(b"\xfflone")

REPORTED_FOLDERS = (FOLDERS["forged-error"], FOLDERS["bidi"], FOLDERS["surrogate"])

# what no text output may hold raw: C0 but newline, DEL, C1, bidi controls, surrogates
RAW = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
ANNOTATION = re.compile(r"^::(error|warning|notice) file=[^:,]*,line=\d+,title=[^:,]*::")


def _jsonl(
    path: Path, names: list[str], nan_at: int = 40, steps: int = 60, stagger: int = 0
) -> None:
    """``stagger``: name i is NaN at ``nan_at + i * stagger``, so each NaN is an incident
    of its own (NaNs that start together are one incident, shown by its first metric)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    steps = max(steps, nan_at + stagger * len(names) + 20)
    with path.open("w") as fh:
        for s in range(steps):
            rec: dict[str, Any] = {"step": s, "loss": 2.0 - s / 1000}
            for i, n in enumerate(names):
                rec[n] = math.nan if s == nan_at + i * stagger else 1.0
            fh.write(json.dumps(rec) + "\n")  # json.dumps writes NaN, as Python loggers do


def _capture(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _on_tty(argv: list[str]) -> str:
    """``python -m trainlens ARGV`` with a pseudo-terminal as stdout (what a person sees)."""
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    # a wide terminal: nothing cut to the width, so the TTY's text is the pipe's, in colour
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 4000, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainlens", *argv],
        env=env,
        stdout=follower,
        stderr=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[1],
    )
    os.close(follower)
    chunks = []
    with contextlib.suppress(OSError):  # EIO once the child has closed the terminal
        while data := os.read(leader, 65536):
            chunks.append(data)
    os.close(leader)
    proc.wait(timeout=120)
    return b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def _watch_outputs(paths: list[Path], tmp: Path) -> dict[str, str]:
    """One ``watch --once`` over ``paths`` into every sink: lines, JSON, notifications (to a
    webhook on 127.0.0.1), --exec (each run's environment saved), Prometheus (scraped from
    its registry before the sink closes)."""
    from prometheus_client import generate_latest

    from trainlens.core.config import Config
    from trainlens.watch.loop import watch
    from trainlens.watch.settings import WatchSettings
    from trainlens.watch.sinks import Fanout
    from trainlens.watch.sinks.lines import JsonSink, LineSink
    from trainlens.watch.sinks.notify import ExecSink, NotifySink
    from trainlens.watch.sinks.prometheus import PrometheusSink

    received: list[dict[str, Any]] = []
    server = http.server.HTTPServer(
        ("127.0.0.1", 0), type("Hook", (WebhookRecorder,), {"received": received})
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env_dir = tmp / "exec"
    env_dir.mkdir()
    lines, js = io.StringIO(), io.StringIO()
    prom = PrometheusSink("127.0.0.1:0")
    notify = NotifySink([f"json://127.0.0.1:{server.server_port}/h"], rate_limit=3600)
    # printenv prints the value as the environment holds it, byte for byte
    execs = ExecSink(f'printenv TRAINLENS_RUN TRAINLENS_MESSAGE > "{env_dir}/$$.env"')
    sinks = [LineSink(lines), JsonSink(js), prom, notify, execs]
    fan = Fanout(sinks)
    try:
        watch(paths, config=Config(), settings=WatchSettings(), sink=fan, once=True)
        exposition = generate_latest(prom.registry).decode("utf-8")
    finally:
        fan.close()
        server.shutdown()
        server.server_close()
    envs = sorted(env_dir.iterdir())
    return {
        "watch-lines": lines.getvalue(),
        "watch-json": js.getvalue(),
        "notify": "\n".join(f"{m['title']}\n{m['message']}" for m in received),
        "exec-env": "".join(p.read_bytes().decode("utf-8") for p in envs),
        "prometheus": exposition,
    }


def _outputs(paths: list[Path], tmp: Path, *, full: bool) -> dict[str, Any]:
    """Every output of these runs, as text (the SVGs as a list of texts)."""
    p = [str(x) for x in paths]
    out: dict[str, Any] = {}
    out["analyze-text"] = _capture(["analyze", *p])[1]
    out["analyze-json"] = _capture(["analyze", *p, "--json"])[1]
    for fmt in ("text", "markdown", "github", "junit", "json"):
        code, text, _ = _capture(["gate", *p, "-f", fmt, "-j", "1", "--fail-on", "warning"])
        assert code == 1, fmt  # the NaN warnings fail the gate: every finding is listed
        out[f"gate-{fmt}"] = text
    if full:
        # the piped run goes on while the TTY one runs (each is mostly start-up)
        piped = subprocess.Popen(
            [sys.executable, "-m", "trainlens", "analyze", *p],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[1],
        )
        out["analyze-tty"] = _on_tty(["analyze", *p])
        stdout, _ = piped.communicate(timeout=120)
        out["analyze-piped"] = stdout.decode("utf-8")  # strict: a surrogate would fail
        # the metric names' run and three hostile folders: eleven runs overlaid cost 9 s
        # of drawing, measured, and say no more
        drawn = [x for x in p if Path(x).name in ("metrics", *REPORTED_FOLDERS)]
        report = tmp / "report"
        code, _, err = _capture(["report", *drawn, "-o", str(report)])
        assert code == 0, err
        out["report-html"] = (report / "report.html").read_text("utf-8")
        out["report-md"] = (report / "report.md").read_text("utf-8")
        out["report-svg"] = [f.read_text("utf-8") for f in sorted(report.glob("*.svg"))]
        out.update(_watch_outputs(paths, tmp))
    return out


@pytest.fixture(scope="module")
def jsonl_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], dict[str, Any]]:
    """The hostile names as JSONL metric keys (one run) and as run folders (one run each,
    its loss NaN at one step)."""
    root = tmp_path_factory.mktemp("hostile")
    runs = root / "runs"
    _jsonl(runs / "metrics" / "metrics.jsonl", list(HOSTILE.values()), stagger=30)
    for name in FOLDERS.values():
        _jsonl(runs / name / "metrics.jsonl", ["loss"])
    paths = sorted(runs.iterdir())
    return paths, _outputs(paths, root, full=True)


@pytest.fixture(scope="module")
def writer_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The names as TensorBoard tags (torch's SummaryWriter) and W&B keys (the SDK,
    offline); a lone surrogate is left out: neither writer can encode one."""
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("writers")
    names = [v for k, v in HOSTILE.items() if k != "surrogate"]
    tb = root / "tb"
    w = torch_tb.SummaryWriter(str(tb))
    # name i NaN at step 40 + 30 i: each its own incident, headed by its own name
    steps = 40 + 30 * len(names) + 20
    for s in range(steps):
        w.add_scalar("loss", 2.0 - s / 1000, s)
        for i, n in enumerate(names):
            w.add_scalar(n, math.nan if s == 40 + 30 * i else 1.0, s)
    w.close()
    writer = root / "write_wandb.py"
    writer.write_text(
        "import json, math, sys\nimport wandb\n"
        "names = json.loads(open(sys.argv[2]).read())\n"
        "run = wandb.init(project='hostile', dir=sys.argv[1], mode='offline')\n"
        f"for s in range({steps}):\n"
        "    rec = {n: (math.nan if s == 40 + 30 * i else 1.0) for i, n in enumerate(names)}\n"
        "    rec['loss'] = 2.0 - s / 1000\n"
        "    run.log(rec, step=s)\n"
        "run.finish()\n"
    )
    (root / "names.json").write_text(json.dumps(names))
    wb_root = root / "wb"
    wb_root.mkdir()
    run_wandb_offline(writer, wb_root, str(root / "names.json"))
    [wb] = glob.glob(str(wb_root / "wandb" / "offline-run-*"))
    return {
        "tensorboard": _outputs([tb], root / "tb-out", full=False),
        "wandb": _outputs([Path(wb)], root / "wb-out", full=False),
    }


def _torch_checkpoints(root: Path) -> None:
    """A torch.save checkpoint per name, the name in the file's name (where the filesystem
    allows) and as an extra zip member whose bytes are damaged (the audit names it)."""
    torch = pytest.importorskip("torch")
    root.mkdir()
    for i, (key, name) in enumerate(HOSTILE.items()):
        if key == "surrogate":
            continue  # zip member names are UTF-8: a lone surrogate cannot be written
        stem = f"step_{(i + 1) * 10}" + (f"_{FOLDERS[key]}" if key in FOLDERS else "")
        path = root / f"{stem}.pt"
        torch.save({"w": torch.zeros(4), "step": i}, path)
        with zipfile.ZipFile(path, "a") as zf:
            zf.writestr(f"archive/{name}", b"payload " * 64)
        raw = bytearray(path.read_bytes())
        at = raw.rindex(b"payload " * 64)
        raw[at] ^= 0xFF  # the member's CRC no longer matches
        path.write_bytes(bytes(raw))
    (root / "latest").write_text(HOSTILE["forged-error"])  # a DeepSpeed pointer


@pytest.fixture(scope="module")
def checkpoint_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("ckpt") / "ckpts"
    _torch_checkpoints(root)
    code, text, err = _capture(["checkpoints", str(root)])
    assert code == 1, err  # the damaged members are errors
    _, js, _ = _capture(["checkpoints", str(root), "--json"])
    return {"checkpoints": text, "checkpoints-json": js}


# ---- what every text output must hold --------------------------------------------------------

TEXT_KINDS = ("analyze-text", "analyze-piped", "analyze-tty", "gate-text", "gate-github")
WATCH_TEXT = ("watch-lines", "notify", "exec-env")


#: the colour trainlens itself lays over the severity words on a terminal (rich's SGR
#: codes for formatters.color.STYLES): the only ESC a TTY may see
OWN_COLOR = re.compile(r"\x1b\[(?:1;31|31;1|33|36)m(ERROR|WARNING|INFO)\x1b\[0m")


def uncolored(text: str) -> str:
    return OWN_COLOR.sub(r"\1", text)


def _plain_text_checks(kind: str, text: str) -> None:
    assert text, kind
    if kind == "analyze-tty":
        assert OWN_COLOR.search(text), "a terminal sees the severities in colour"
        text = uncolored(text)
    text.encode("utf-8")  # strict: a lone surrogate would have failed here, as on a pipe
    raw = RAW.search(text)
    near = "" if raw is None else text[max(0, raw.start() - 40) : raw.end() + 40]
    assert raw is None, f"{kind}: raw {raw.group()!r} in {near!r}"
    for line in text.splitlines():
        if line.startswith("::"):
            assert kind == "gate-github" and ANNOTATION.match(line), f"{kind}: forged {line!r}"


@pytest.mark.parametrize("kind", TEXT_KINDS + WATCH_TEXT)
def test_text_outputs_hold_no_control_codes_and_no_forged_lines(
    jsonl_source: tuple[list[Path], dict[str, Any]], kind: str
) -> None:
    _plain_text_checks(kind, jsonl_source[1][kind])


def test_the_tty_sees_what_the_pipe_sees(jsonl_source: tuple[list[Path], dict[str, Any]]) -> None:
    out = jsonl_source[1]
    assert uncolored(out["analyze-tty"]) == out["analyze-piped"] == out["analyze-text"]


def test_github_annotations_are_trainlens_own(
    jsonl_source: tuple[list[Path], dict[str, Any]],
) -> None:
    """Exactly one annotation per failing finding, each one line; the last line the verdict."""
    doc = json.loads(jsonl_source[1]["gate-json"])
    findings = len(doc["findings"])
    lines = jsonl_source[1]["gate-github"].splitlines()
    assert len(lines) == findings + 1 and findings >= len(HOSTILE) + len(FOLDERS)
    assert all(ANNOTATION.match(line) for line in lines[:-1])
    assert lines[-1].startswith("trainlens gate failed")


@pytest.mark.parametrize("kind", ["analyze-json", "gate-json", "watch-json"])
def test_json_outputs_parse_and_keep_the_names(
    jsonl_source: tuple[list[Path], dict[str, Any]], kind: str
) -> None:
    text = jsonl_source[1][kind]
    assert text.isascii()  # json.dumps escapes every non-ASCII character, surrogates too
    docs = (
        [json.loads(line) for line in text.splitlines()]
        if kind == "watch-json"
        else [json.loads(text)]
    )
    assert docs
    dumped = json.dumps(docs)
    for name in (*HOSTILE.values(), *FOLDERS.values()):
        assert json.dumps(_as_read(name))[1:-1] in dumped, name  # the raw name, JSON-escaped


def _as_read(name: str) -> str:
    # the JSONL reader reads the key "\ud800lone" as "\x00lone" (polars' ndjson decoder;
    # noted for the readers): what the outputs must show is the name as read
    return "\x00lone" if name == HOSTILE["surrogate"] else name


@pytest.mark.parametrize("kind", ["gate-junit"])
def test_junit_is_valid_xml(jsonl_source: tuple[list[Path], dict[str, Any]], kind: str) -> None:
    root = ET.fromstring(jsonl_source[1][kind])
    text = "\n".join(
        [*(v for e in root.iter() for v in e.attrib.values()), *(e.text or "" for e in root.iter())]
    )
    assert RAW.search(text) is None
    assert int(root.get("failures", "0")) >= len(FOLDERS) + 1


def test_report_svgs_are_valid_xml(jsonl_source: tuple[list[Path], dict[str, Any]]) -> None:
    svgs = jsonl_source[1]["report-svg"]
    assert svgs
    for svg in svgs:
        ET.fromstring(svg)  # matplotlib writes each text into a comment, as it is
        assert RAW.search(svg) is None
    assert any(xml(HOSTILE["osc-title"]) in svg for svg in svgs)  # the escaped name is drawn


@pytest.mark.parametrize("kind", ["gate-markdown", "report-md"])
def test_markdown_has_no_markup_from_the_input(
    jsonl_source: tuple[list[Path], dict[str, Any]], kind: str
) -> None:
    text = jsonl_source[1][kind]
    assert RAW.search(text) is None
    assert "![img]" not in text and "](http" not in text and "[link]" not in text
    assert "<script" not in text and "`code`" not in text and "\r" not in text
    assert not re.search(r"(?<!\\)\|pipe", text)


def test_report_html_escapes_the_input(jsonl_source: tuple[list[Path], dict[str, Any]]) -> None:
    page = jsonl_source[1]["report-html"]
    assert "<script" not in page and RAW.search(page) is None
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "\\u202eevil" in page


def test_prometheus_exposition_parses(jsonl_source: tuple[list[Path], dict[str, Any]]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(jsonl_source[1]["prometheus"])}
    labels = [s.labels for f in families.values() for s in f.samples]
    assert all(RAW.search(v) is None for lab in labels for v in lab.values())
    metrics = {lab["metric"] for lab in labels if "metric" in lab}
    runs = {lab["run"] for lab in labels if "run" in lab}
    assert {terminal(_as_read(n)) for n in HOSTILE.values()} <= metrics
    assert {terminal(n) for n in FOLDERS.values()} <= runs


# ---- each name, in its escaped form, in each output ------------------------------------------

SHOWN_AS = {
    "analyze-text": terminal,
    "analyze-tty": terminal,
    "gate-text": terminal,
    "gate-github": github_data,
    "gate-markdown": markdown,
    "report-md": markdown,
    "watch-lines": terminal,
    "notify": terminal,
    "exec-env": terminal,
}


@pytest.mark.parametrize("kind", list(SHOWN_AS))
@pytest.mark.parametrize("key", list(HOSTILE))
def test_each_metric_name_is_shown_escaped(
    jsonl_source: tuple[list[Path], dict[str, Any]], key: str, kind: str
) -> None:
    text = jsonl_source[1][kind]
    shown = SHOWN_AS[kind](_as_read(HOSTILE[key]))
    assert shown in text, f"{kind}: {shown!r} not found"


@pytest.mark.parametrize("kind", ["analyze-text", "gate-text", "gate-github", "gate-markdown"])
@pytest.mark.parametrize("key", list(FOLDERS))
def test_each_folder_name_is_shown_escaped(
    jsonl_source: tuple[list[Path], dict[str, Any]], key: str, kind: str
) -> None:
    text = jsonl_source[1][kind]
    fn = SHOWN_AS[kind] if kind != "gate-github" else github_data
    assert fn(FOLDERS[key]) in text, f"{kind}: {fn(FOLDERS[key])!r} not found"


@pytest.mark.slow
@pytest.mark.parametrize("source", ["tensorboard", "wandb"])
@pytest.mark.parametrize("kind", ["analyze-text", "gate-text", "gate-github", "gate-markdown"])
def test_tensorboard_tags_and_wandb_keys(
    writer_sources: dict[str, dict[str, Any]], source: str, kind: str
) -> None:
    out = writer_sources[source]
    text = out[kind]
    if kind != "gate-markdown":
        _plain_text_checks(kind, text)
    else:
        assert RAW.search(text) is None and "![img]" not in text and "<script" not in text
    ET.fromstring(out["gate-junit"])
    for key, name in HOSTILE.items():
        if key != "surrogate":
            assert SHOWN_AS[kind](name) in text, f"{source} {kind}: {name!r}"


def test_checkpoint_names_and_members(checkpoint_outputs: dict[str, str]) -> None:
    text = checkpoint_outputs["checkpoints"]
    _plain_text_checks("checkpoints", text)
    for key, name in HOSTILE.items():
        if key == "surrogate":
            continue
        # zipfile cuts a member's name at a NUL, as the zip readers do
        member = name.split("\x00")[0]
        assert terminal(f"archive/{member}") in text, name
        if key in FOLDERS:
            assert terminal(FOLDERS[key]) in text, name
    doc = json.loads(checkpoint_outputs["checkpoints-json"])
    assert len(doc["checkpoints"]) == len(HOSTILE) - 1


def test_a_name_with_nothing_to_escape_is_kept_as_it_is() -> None:
    plain = "train/loss · 損失 (σ²) [1/2] — 👩‍🔬"
    assert terminal(plain) is plain and xml(plain) == plain
    assert github_data(plain) == plain
    assert markdown("a*b_c") == r"a\*b\_c" and markdown("<b>&") == "&lt;b&gt;&amp;"
    assert terminal("a\tb\r\nc\x1b\x85\u2028") == "a\\tb\\r\\nc\\x1b\\x85\\u2028"
    assert xml("\ufffe") == "\\ufffe"


def test_the_live_view_shows_names_escaped() -> None:
    """rich draws the view with its own ESC codes on a terminal; none may come from a name."""
    from rich.console import Console

    from trainlens.core.findings import Finding, Severity
    from trainlens.watch.events import WatchEvent
    from trainlens.watch.sinks.view import LiveView

    stream = io.StringIO()
    console = Console(file=stream, width=200, force_terminal=True, color_system="standard")
    view = LiveView(console=console, events=len(HOSTILE))
    for name in HOSTILE.values():
        f = Finding("NAN001", "non-finite-value", Severity.WARNING, name, 4, 4, f"{name} is NaN")
        # the pane shows incidents (what pages a person), each headed by its finding
        view.emit(WatchEvent("incident-opened", name, "x.jsonl", 0.0, 4, f.message, f, "warning"))
    view.close()
    drawn = stream.getvalue()
    assert "\x1b]" not in drawn and "\x1b[8m" not in drawn  # no title change, no hidden text
    assert re.search("[\x00\x07\x0b\r\u202e\ud800]", drawn) is None
    assert "\\x1b]0;pwned\\x07" in drawn and "\\u202eevil" in drawn


def test_an_unreadable_input_is_named_on_one_line(tmp_path: Path) -> None:
    """The error names the file, whose folder's name is hostile: still one stderr line."""
    bad = tmp_path / FOLDERS["forged-error"] / "metrics.jsonl"
    bad.parent.mkdir()
    bad.write_bytes(b"\x00\x01 not a metrics file\n")
    for argv in (["analyze", str(bad)], ["gate", str(bad), "-f", "github", "-j", "1"]):
        code, out, err = _capture(argv)
        assert code == 2, (argv, out, err)
        for line in (out + err).splitlines():
            assert not line.startswith("b::error"), line
            assert not line.startswith("::") or ANNOTATION.match(line), line
        assert terminal(FOLDERS["forged-error"]) in err
