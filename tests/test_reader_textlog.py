"""The plain-text log reader, on real third-party logs and on logs written the way the
real programs write them (Megatron's format strings, llm.c's printf through libc, the
modded-nanogpt f-strings, the HF Trainer's ``tqdm.write(str(logs))``, Python logging)."""

from __future__ import annotations

import ctypes
import logging
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from trainlens.core.errors import UnreadableInputError, UsageError
from trainlens.core.run import Run
from trainlens.readers import textlog
from trainlens.readers.base import ReadOptions, read_head

NANOGPT = "real-logs/modded_nanogpt"
BLOOM = "real-logs/bigscience/tr11-176B-ml_chronicles.md"


def read_one(path: Path, **kw: object) -> Run:
    runs = textlog.read(path, ReadOptions(**kw))  # type: ignore[arg-type]
    assert len(runs) == 1
    return runs[0]


def kinds(run: Run) -> dict[str, int]:
    return {i.kind: i.count for i in run.data_quality}


# ---- independent counting for the real logs: str.startswith / split, no regex -------------


def llmc_columns(path: Path) -> dict[str, list[tuple[int, float]]]:
    """``s:N key:value ...`` lines → {key: [(step, value), ...]} in file order."""
    out: dict[str, list[tuple[int, float]]] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("s:"):
            continue
        tokens = line.split()
        step = int(tokens[0][2:])
        for tok in tokens[1:]:
            key, _, val = tok.partition(":")
            out.setdefault(key, []).append((step, float(val)))
    return out


def modded_columns(path: Path) -> dict[str, list[tuple[int, float]]]:
    """``step:N/M key:value[ms] ...`` lines (not the echoed script) → {key: [(step, v)]}."""
    out: dict[str, list[tuple[int, float]]] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("step:"):
            continue
        tokens = line.split()
        step = int(tokens[0][len("step:") :].split("/")[0])
        for tok in tokens[1:]:
            key, _, val = tok.partition(":")
            scale = 1e-3 if val.endswith("ms") else 1.0
            out.setdefault(key, []).append((step, float(val.removesuffix("ms")) * scale))
    return out


def last_per_step(pairs: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    d: dict[int, float] = {}
    for s, v in pairs:
        d[s] = v
    steps = np.array(sorted(d), dtype=np.int64)
    return steps, np.array([d[s] for s in steps])


# ---- real logs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "modded_nanogpt/2024-06-06_AdamW_f66d43d7.log",
        "modded_nanogpt/2024-10-13_llmc_main.log",
        "modded_nanogpt/2024-10-10_Muon_eb5659d0.txt",
        "bigscience/tr11-176B-ml_chronicles.md",
    ],
)
def test_real_logs_are_sniffed_and_fully_read(shared_dir: Path, name: str) -> None:
    path = shared_dir / "real-logs" / name
    assert textlog.sniff(path, read_head(path))
    run = read_one(path)
    assert run.format == "text"
    assert run.cursor == {str(path): path.stat().st_size}
    assert not [i for i in run.data_quality if i.severity == "warning"]


def test_adamw_log_counts_and_values(shared_dir: Path) -> None:
    path = shared_dir / NANOGPT / "2024-06-06_AdamW_f66d43d7.log"
    expected = llmc_columns(path)
    assert set(expected) == {"trl", "tel"}
    assert len(expected["trl"]) == 9536 and len(expected["tel"]) == 76
    run = read_one(path)
    assert set(run.metrics) == {"train/loss", "val/loss"}
    for canonical, raw in (("train/loss", "trl"), ("val/loss", "tel")):
        steps, values = run.series(canonical)
        want_steps, want_values = last_per_step(expected[raw])
        assert len(steps) == len(expected[raw])
        np.testing.assert_array_equal(steps, want_steps)
        np.testing.assert_array_equal(values, want_values)
        assert run.raw_names[canonical] == raw
    steps, values = run.series("train/loss")
    assert (steps[0], values[0], steps[-1], values[-1]) == (0, 10.965596, 9535, 3.340180)
    steps, values = run.series("val/loss")
    assert (steps[0], values[0], steps[-1], values[-1]) == (0, 10.968871, 9536, 3.275959)


def test_llmc_log_counts_and_values(shared_dir: Path) -> None:
    path = shared_dir / NANOGPT / "2024-10-13_llmc_main.log"
    expected = llmc_columns(path)
    assert {k: len(v) for k, v in expected.items()} == {
        "tel": 80,
        "trl": 19560,
        "lr": 19560,
        "norm": 19560,
    }
    run = read_one(path)
    assert set(run.metrics) == {"train/loss", "val/loss", "lr", "grad_norm"}
    for canonical, raw in (
        ("train/loss", "trl"),
        ("val/loss", "tel"),
        ("lr", "lr"),
        ("grad_norm", "norm"),
    ):
        steps, values = run.series(canonical)
        want_steps, want_values = last_per_step(expected[raw])
        np.testing.assert_array_equal(steps, want_steps)
        np.testing.assert_array_equal(values, want_values)
    all_steps = run.frame.get_column("step")
    assert (all_steps.min(), all_steps.max()) == (0, 19560)
    steps, values = run.series("train/loss")
    assert (steps[0], values[0], steps[-1], values[-1]) == (0, 11.0091, 19559, 3.2217)
    steps, values = run.series("grad_norm")
    assert (values[0], values[-1]) == (15.37, 0.22)
    steps, values = run.series("lr")
    assert (values[0], values[-1]) == (0.000001, 0.0)
    steps, values = run.series("val/loss")
    assert (steps[-1], values[-1]) == (19560, 3.2722)


def test_muon_log_ignores_the_echoed_script(shared_dir: Path) -> None:
    path = shared_dir / NANOGPT / "2024-10-10_Muon_eb5659d0.txt"
    expected = modded_columns(path)
    assert len(expected["train_loss"]) == 6200 and len(expected["val_loss"]) == 51
    run = read_one(path)
    # nothing named after the training script echoed at the top of the file
    assert set(run.metrics) == {"train/loss", "val/loss", "train_time", "step_time_avg"}
    for canonical, raw in (("train/loss", "train_loss"), ("val/loss", "val_loss")):
        steps, values = run.series(canonical)
        want_steps, want_values = last_per_step(expected[raw])
        assert len(steps) == len(expected[raw])
        np.testing.assert_array_equal(steps, want_steps)
        np.testing.assert_array_equal(values, want_values)
    # every value read, including the val lines' repeats of train_time / step_avg
    counts = run.frame.group_by("metric").len().sort("metric")
    assert dict(counts.iter_rows()) == {
        "step_time_avg": 6251,
        "train/loss": 6200,
        "train_time": 6251,
        "val/loss": 51,
    }
    # step_avg is in seconds; `nanms` (before the timer starts) is NaN
    steps, values = run.series("step_time_avg")
    by_step = dict(zip(steps.tolist(), values.tolist(), strict=True))
    assert math.isnan(by_step[0]) and math.isnan(by_step[12])
    assert by_step[13] == pytest.approx(0.21366)
    assert by_step[6200] == pytest.approx(0.21633)
    steps, values = run.series("train_time")
    assert dict(zip(steps.tolist(), values.tolist(), strict=True))[6199] == pytest.approx(1338.853)
    assert run.metadata["max_steps"] == 6200


def test_bloom_chronicles_spike_and_wrapped_lines(shared_dir: Path) -> None:
    bloom = shared_dir / BLOOM
    text = bloom.read_text()
    n_iterations = text.count("| lm loss: ")  # one per quoted iteration line
    run = read_one(bloom)
    assert {"train/loss", "grad_norm", "lr", "tflops_per_gpu", "step_time"} <= set(run.metrics)
    steps, loss = run.series("train/loss")
    assert len(steps) == n_iterations == 18
    by_step = dict(zip(steps.tolist(), loss.tolist(), strict=True))
    # the first lm-loss spike (2022-04-12), values as quoted in the notes
    assert set(range(31214, 31223)) | {31250, 31251} <= set(by_step)
    assert by_step[31218] == 2.345279 and by_step[31219] == 5.098124
    assert by_step[31250] == 2.215699
    gsteps, gnorm = run.series("grad_norm")
    g = dict(zip(gsteps.tolist(), gnorm.tolist(), strict=True))
    assert (g[31214], g[31218], g[31219], g[31220]) == (0.242, 145.119, 960.351, 353.201)
    lsteps, lr = run.series("lr")
    assert dict(zip(lsteps.tolist(), lr.tolist(), strict=True))[31222] == 5.278e-05
    # lines hard-wrapped over three lines in the notes (the throughput drop at 42783)
    tsteps, tflops = run.series("tflops_per_gpu")
    t = dict(zip(tsteps.tolist(), tflops.tolist(), strict=True))
    assert (t[42780], t[42783], t[42784]) == (149.10, 142.32, 141.09)
    assert by_step[42783] == 2.124820
    assert "number of nan iterations" in run.metrics  # a key split across two lines
    # elapsed time per iteration (s) is already seconds
    ssteps, secs = run.series("step_time")
    assert dict(zip(ssteps.tolist(), secs.tolist(), strict=True))[42783] == 110.17
    # the validation line at 45000
    assert run.series("val/loss")[1].tolist() == [2.327091]
    assert run.series("val/perplexity")[1].tolist() == [10.24808]


# ---- logs written by the real format code ----------------------------------------------------


def megatron_line(
    iteration: int,
    train_iters: int,
    *,
    loss: float,
    grad_norm: float,
    lr: float = 6e-5,
    elapsed_ms: float = 1234.5,
) -> str:
    """Megatron-LM's training_log() format strings."""
    s = f" iteration {iteration:8d}/{train_iters:8d} |"
    s += f" consumed samples: {iteration * 512:12d} |"
    s += f" elapsed time per iteration (ms): {elapsed_ms:.1f} |"
    s += f" learning rate: {lr:.3E} |"
    s += f" global batch size: {512:5d} |"
    s += " {}: {:.6E} |".format("lm loss", loss)
    s += f" loss scale: {1.0:.1f} |"
    s += f" grad norm: {grad_norm:.3f} |"
    s += f" number of skipped iterations: {0:3d} |"
    s += f" number of nan iterations: {0:3d} |"
    return s


def megatron_validation(prefix: str, loss: float) -> list[str]:
    """Megatron-LM's evaluate_and_print_results()."""
    string = f" validation loss at {prefix} | "
    string += "{} value: {:.6E} | ".format("lm loss", loss)
    string += "{} PPL: {:.6E} | ".format("lm loss", math.exp(min(20, loss)))
    length = len(string) + 1
    return ["-" * length, string, "-" * length]


def test_megatron_nan_inf_validation_and_restart(tmp_path: Path) -> None:
    lines = [
        "using world size: 8, data-parallel size: 8",
        megatron_line(1, 100, loss=10.5, grad_norm=12.0),
        megatron_line(2, 100, loss=float("nan"), grad_norm=float("inf")),
        megatron_line(3, 100, loss=9.25, grad_norm=float("-inf")),
        *megatron_validation("iteration 3", 9.0),
        *megatron_validation("iteration 3 on test set", 9.5),
        megatron_line(4, 100, loss=9.125, grad_norm=2.0),
        "[after resume] loading checkpoint from iteration 2",
        "[default3]:" + megatron_line(3, 100, loss=9.0, grad_norm=1.5),
        megatron_line(4, 100, loss=8.5, grad_norm=1.25),
        *megatron_validation("the end of training for val data", 8.25),
    ]
    assert "NAN" in lines[2] and "inf" in lines[2]  # what Megatron's format writes
    path = tmp_path / "megatron.log"
    path.write_text("\n".join(lines) + "\n")
    assert textlog.sniff(path, read_head(path))
    run = read_one(path)
    frame = run.frame
    loss = frame.filter(pl.col("metric") == "train/loss")
    assert loss.get_column("step").to_list() == [1, 2, 3, 4, 3, 4]
    v = loss.get_column("value").to_list()
    assert v[0] == 10.5 and math.isnan(v[1]) and v[2:] == [9.25, 9.125, 9.0, 8.5]
    superseded = loss.get_column("superseded").to_list()
    assert superseded == [False, False, True, True, False, False]
    assert run.series("train/loss")[1][2:].tolist() == [9.0, 8.5]  # the resumed segment
    gn = frame.filter(pl.col("metric") == "grad_norm").get_column("value").to_list()
    assert gn[1] == math.inf and gn[2] == -math.inf
    secs = run.series("step_time")[1]
    assert secs[0] == pytest.approx(1.2345)  # ms → s through the alias table
    assert run.series("lr")[1][0] == 6e-5
    assert run.series("val/loss")[1].tolist() == [9.0]
    assert run.series("val/perplexity")[1][0] == pytest.approx(math.exp(9.0), rel=1e-6)
    assert run.series("lm loss test")[1].tolist() == [9.5]
    assert "number of skipped iterations" in run.metrics
    assert kinds(run).get("restart") == 1
    assert kinds(run).get("ignored-lines") == 1  # the end-of-training line has no step
    assert run.metadata["max_steps"] == 100


def libc_printf(fmt: bytes, *args: ctypes.c_int | ctypes.c_double) -> str:
    libc = ctypes.CDLL(None)
    buf = ctypes.create_string_buffer(256)
    libc.snprintf(buf, 256, fmt, *args)
    return buf.value.decode()


def test_llmc_printf_nan_inf(tmp_path: Path) -> None:
    try:
        ctypes.CDLL(None).snprintf  # noqa: B018
    except (OSError, AttributeError):
        pytest.skip("no C library to printf with")
    lines = [libc_printf(b"s:%d tel:%f", ctypes.c_int(0), ctypes.c_double(11.0))]
    values = [10.9, -math.nan, math.inf, -math.inf, 3.5]
    for step, x in enumerate(values):
        lines.append(
            libc_printf(
                b"s:%d trl:%f lr:%f norm:%f",
                ctypes.c_int(step),
                ctypes.c_double(x),
                ctypes.c_double(6e-4),
                ctypes.c_double(1.25),
            )
        )
    path = tmp_path / "main.log"
    path.write_text("\n".join(lines) + "\n")
    run = read_one(path)
    steps, loss = run.series("train/loss")
    assert steps.tolist() == [0, 1, 2, 3, 4]
    assert loss[0] == 10.9 and math.isnan(loss[1])
    assert loss[2] == math.inf and loss[3] == -math.inf and loss[4] == 3.5
    assert run.series("lr")[1].tolist() == [0.0006] * 5
    assert run.series("val/loss")[1].tolist() == [11.0]
    assert "non-numeric" not in kinds(run)


def test_modded_lines_need_every_token_numeric(tmp_path: Path) -> None:
    num_iterations, step = 100, 9
    val_loss, approx_time, timed_steps = 4.25, 1234.0, 10
    lines = [
        # an echoed script: f-strings with step:, dict literals, comments
        "for step in range(args.num_iterations + 1):",
        "    print(f'step:{step}/{args.num_iterations} val_loss:{val_loss:.4f}')",
        "# step:1/2 is the first step",
        "step:10/100 train_loss:abc train_time:5ms",  # a value that is not a number
        "step: 10/100 loss: 1.0",  # not key:value tokens
        f"step:{step + 1}/{num_iterations} train_loss:{3.5:.4f} "
        f"train_time:{approx_time:.0f}ms step_avg:{approx_time / timed_steps:.2f}ms",
        f"step:{step + 1}/{num_iterations} val_loss:{val_loss:.4f} "
        f"train_time:{approx_time:.0f}ms step_avg:{approx_time / timed_steps:.2f}ms",
    ]
    path = tmp_path / "log.txt"
    path.write_text("\n".join(lines) + "\n")
    run = read_one(path)
    assert set(run.metrics) == {"train/loss", "val/loss", "train_time", "step_time_avg"}
    assert run.series("train/loss")[0].tolist() == [10]
    assert run.series("train_time")[1].tolist() == [pytest.approx(1.234)]
    assert run.series("step_time_avg")[1].tolist() == [pytest.approx(0.1234)]


def test_hf_trainer_printed_dicts_through_tqdm(tmp_path: Path) -> None:
    tqdm = pytest.importorskip("tqdm").tqdm
    path = tmp_path / "stdout.log"
    train_logs = [
        {"loss": 2.5, "grad_norm": 3.25, "learning_rate": 5e-05, "epoch": 0.1},
        {"loss": 2.25, "grad_norm": float("nan"), "learning_rate": 4e-05, "epoch": 0.2},
        {"loss": 2.0, "grad_norm": 1.5, "learning_rate": 3e-05, "epoch": 0.3},
    ]
    eval_log = {"eval_loss": 2.125, "eval_runtime": 1.5, "epoch": 0.2}
    final = {"train_runtime": 12.5, "train_samples_per_second": 80.0, "train_loss": 2.3}
    with path.open("w") as fh:
        fh.write("***** Running training *****\n  Num examples = 100\n")
        bar = tqdm(total=30, file=fh, mininterval=0, ascii=True)
        for i, logs in enumerate(train_logs):
            bar.update(10)
            bar.write(str(logs), file=fh)  # ProgressCallback.on_log
            if i == 1:
                bar.write(str(eval_log), file=fh)
        bar.write(str(final), file=fh)
        bar.close()
        fh.write("{'config': 'x', 'seed': 42}\n")  # a printed dict that is not metrics
    assert b"\r" in path.read_bytes()  # tqdm redraws with carriage returns
    assert textlog.sniff(path, read_head(path))
    run = read_one(path)
    steps, loss = run.series("train/loss")
    assert steps.tolist() == [1, 2, 3] and loss.tolist() == [2.5, 2.25, 2.0]
    gn = run.series("grad_norm")[1]
    assert gn[0] == 3.25 and math.isnan(gn[1])
    assert run.series("lr")[1].tolist() == [5e-05, 4e-05, 3e-05]
    assert run.series("val/loss")[0].tolist() == [2] and run.series("val/loss")[1][0] == 2.125
    assert run.series("final/train_loss")[1].tolist() == [2.3]
    assert run.series("final/train_runtime")[0].tolist() == [3]
    assert "seed" not in run.metrics
    assert kinds(run)["inferred-step"] == 5


def test_user_regex_with_python_logging(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    logger = logging.getLogger("trainlens-test-textlog")
    logger.propagate = False
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info("starting run")
        for step, value in ((10, 2.5), (20, float("nan")), (30, 2.0)):
            logger.info("step %d | loss %.4f | acc %s", step, value, "n/a" if step == 30 else 0.5)
        logger.info("done")
    finally:
        logger.removeHandler(handler)
        handler.close()
    regex = r"step (?P<step>\d+) \| loss (?P<loss>\S+) \| acc (?P<acc>\S+)"
    run = read_one(path, regex=regex)
    steps, loss = run.series("train/loss")
    assert steps.tolist() == [10, 20, 30]
    assert loss[0] == 2.5 and math.isnan(loss[1]) and loss[2] == 2.0
    assert run.series("acc")[1].tolist() == [0.5, 0.5]
    issues = {i.kind: i for i in run.data_quality}
    assert issues["unmatched-line"].count == 2 and issues["unmatched-line"].severity == "info"
    assert issues["non-numeric"].count == 1 and issues["non-numeric"].location == "line 4"

    with pytest.raises(UsageError, match="no named group `step`"):
        read_one(path, regex=r"loss (?P<loss>\S+)")
    with pytest.raises(UsageError, match="does not compile"):
        read_one(path, regex=r"step (?P<step>\d+")
    with pytest.raises(UnreadableInputError, match=str(path)):
        read_one(path, regex=r"iteration (?P<step>\d+) (?P<loss>\S+)")


def test_non_utf8_byte_is_replaced_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "main.log"
    with path.open("wb") as fh:
        fh.write(b"s:0 trl:10.5\n")
        fh.write(b"s:1 trl:10.25\n")
        fh.write("run: café au lait\n".encode("latin-1"))
        fh.write(b"s:2 trl:10.0\n")
    run = read_one(path)
    assert run.series("train/loss")[1].tolist() == [10.5, 10.25, 10.0]
    issue = next(i for i in run.data_quality if i.kind == "encoding")
    assert issue.location == "line 3" and issue.count == 1


def test_empty_and_prose_files_are_unreadable(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(UnreadableInputError, match=r"empty\.log: the file is empty"):
        read_one(empty)
    prose = tmp_path / "notes.txt"
    prose.write_text(
        "We trained for 3 days.\nThe loss: fine, mostly.\nstep: see the wiki | lr: 3e-4\n"
    )
    assert not textlog.sniff(prose, read_head(prose))
    with pytest.raises(UnreadableInputError, match=r"notes\.txt: no training metrics found"):
        read_one(prose)


def test_sniff_leaves_jsonl_and_csv_alone(tmp_path: Path) -> None:
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text('{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.25}\n')
    csv = tmp_path / "m.csv"
    csv.write_text("step,loss\n1,2.5\n2,2.25\n")
    assert not textlog.sniff(jsonl, read_head(jsonl))
    assert not textlog.sniff(csv, read_head(csv))
    assert not textlog.sniff(tmp_path, b"")


def test_sniff_looks_past_a_long_preamble(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    preamble = "".join(f"    x_{i} = compute({i})  # step:{i}\n" for i in range(400))
    path.write_text(preamble + "step:1/10 train_loss:3.5 train_time:12ms\n")
    head = read_head(path)
    assert b"train_loss" not in head
    assert textlog.sniff(path, head)


def test_resume_from_offset_and_unterminated_line(tmp_path: Path) -> None:
    path = tmp_path / "main.log"
    path.write_text("s:0 trl:10.5\ns:1 trl:10.25\n")
    first = read_one(path)
    cursor = first.cursor[str(path)]
    assert cursor == path.stat().st_size

    with path.open("a") as fh:
        fh.write("s:2 trl:10.0\ns:3 trl:9.7")  # the last line still being written
    second = read_one(path, start_offset=cursor)
    steps, loss = second.series("train/loss")
    assert steps.tolist() == [2, 3] and loss.tolist() == [10.0, 9.7]
    assert second.cursor[str(path)] == path.stat().st_size - len("s:3 trl:9.7")
    issue = next(i for i in second.data_quality if i.kind == "unterminated-line")
    assert issue.location == f"line 2 after byte {cursor}"

    with path.open("a") as fh:
        fh.write("5\ns:4 trl:9.5\n")
    third = read_one(path, start_offset=second.cursor[str(path)])
    assert third.series("train/loss")[1].tolist() == [9.75, 9.5]
    assert third.cursor[str(path)] == path.stat().st_size

    nothing_new = read_one(path, start_offset=third.cursor[str(path)])
    assert nothing_new.frame.height == 0
    assert nothing_new.cursor[str(path)] == path.stat().st_size

    path.write_text("s:0 trl:11.0\n")  # rotated: shorter than the offset
    rotated = read_one(path, start_offset=third.cursor[str(path)])
    assert rotated.series("train/loss")[1].tolist() == [11.0]
    assert "truncated-file" in kinds(rotated)
    assert rotated.cursor[str(path)] == path.stat().st_size


def _nanogpt_log(losses: list[float], eval_every: int, prefix: str = "") -> list[str]:
    """Lines printed by nanoGPT's train.py, with its own format strings; running_mfu is
    -1.0 until the fifth iteration, as there."""
    out: list[str] = ['print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms")']
    running_mfu = -1.0
    for iter_num, lossf in enumerate(losses):
        if iter_num % eval_every == 0:
            val = lossf + 0.1
            out.append(f"{prefix}step {iter_num}: train loss {lossf:.4f}, val loss {val:.4f}")
        dt = 0.5 + iter_num * 1e-3
        if iter_num >= 5:
            running_mfu = 0.1668 if running_mfu < 0 else 0.9 * running_mfu + 0.1 * 0.1668
        out.append(
            f"{prefix}iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms, "
            f"mfu {running_mfu * 100:.2f}%"
        )
    return out


@pytest.mark.parametrize("prefix", ["", "> 2023-03-22 09:30:39 ", "[rank0]: "])
def test_nanogpt_lines_without_a_regex(tmp_path: Path, prefix: str) -> None:
    from trainlens.readers import detect_format

    losses = [4.2 - 0.01 * i for i in range(30)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(_nanogpt_log(losses, eval_every=10, prefix=prefix)) + "\n")
    # every line has commas, but it is a log, not a CSV
    assert detect_format(path) == "text"
    run = read_one(path)
    wide = run.wide()
    assert wide.get_column("step").to_list() == list(range(30))
    assert wide.get_column("train/loss").to_list() == pytest.approx(losses, abs=5e-5)
    assert wide.get_column("step_time").to_list() == pytest.approx(
        [0.5 + i * 1e-3 for i in range(30)], abs=1e-5
    )
    # the evaluation: val/loss at its step; its train-split estimate beside train/loss
    val = wide.filter(pl.col("val/loss").is_not_null())
    assert val.get_column("step").to_list() == [0, 10, 20]
    assert val.get_column("val/loss").to_list() == pytest.approx([4.3, 4.2, 4.1], abs=5e-5)
    assert val.get_column("train loss (eval)").to_list() == pytest.approx([4.2, 4.1, 4.0])
    # mfu is a fraction; nanoGPT's -100% placeholder of the first 5 iterations is dropped
    mfu = wide.filter(pl.col("mfu").is_not_null())
    assert mfu.get_column("step").to_list() == list(range(5, 30))
    assert mfu.get_column("mfu")[0] == pytest.approx(0.1668)
    assert kinds(run)["ignored-values"] == 5
    assert run.metadata["text_shapes"] == {"nanogpt": 33}


def test_torchtitan_metrics_lines_with_colours(tmp_path: Path) -> None:
    """torchtitan's console line (its metrics.py f-string, each field coloured), through
    Python logging with its `[titan]` format, as torchrun prefixes it per rank."""
    red, green, orange, blue, reset = "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[34m", "\x1b[39m"
    rows = [(1, 10.8512, 4.123, 9.46, 64.99, 7282.4, 0.52, 0.17)]
    rows += [(s, 10.8512 - 0.3 * s, 1.0, 9.46, 64.99, 7300.0 + s, 0.53, 0.17) for s in range(2, 12)]
    lines = ["[rank0]:[titan] 2026-05-18 16:04:45,001 - root - INFO - Training starts at step 1"]
    for step, loss, gn, mem, pct, tps, tflops, mfu in rows:
        msg = (
            f"{red}step: {step:2}  {green}loss: {loss:7.5f}  {orange}grad_norm: {gn:7.4f}  "
            f"{blue}memory: {mem:5.2f}GiB({pct:.2f}%)  tps: {round(tps):,}  "
            f"tflops: {tflops:,.2f}  mfu: {mfu:.2f}%{reset}"
        )
        lines.append(f"[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - {msg}")
    path = tmp_path / "titan.log"
    path.write_text("\n".join(lines) + "\n")
    from trainlens.readers import detect_format

    assert detect_format(path) == "text"
    wide = read_one(path).wide()
    assert wide.get_column("step").to_list() == list(range(1, 12))
    assert wide.get_column("train/loss").to_list() == pytest.approx([r[1] for r in rows], 1e-5)
    assert wide.get_column("grad_norm")[0] == pytest.approx(4.123)
    assert wide.get_column("tokens_per_sec")[0] == 7282  # "7,282"
    assert wide.get_column("mem/reserved")[0] == pytest.approx(9.46 * 2**30)
    assert wide.get_column("mfu")[0] == pytest.approx(0.0017)
    assert wide.get_column("tflops_per_gpu")[1] == pytest.approx(0.53)


def test_nanotron_iteration_lines_with_si_suffixes(tmp_path: Path) -> None:
    """nanotron logs Megatron's line as `iteration: N / M | key: value |`, its sizes and
    rates in human_format (634K, 11.5K, 90.9M: powers of 1000)."""
    lines = [
        f"01/17/2024 14:02:16 [INFO|DP=0|PP=0|TP=0|ip-26-0-160-225]: iteration: {i} / 1000 | "
        f"consumed_tokens: {634 + i - 991}K | elapsed_time_per_iteration_ms: {t} | "
        f"tokens_per_sec: {tps}K | global_batch_size: 20 | lm_loss: {loss} | lr: 1e-05 | "
        f"model_tflops_per_gpu: 0.00744 | grad_norm: 1.11 | cuda_memory_allocated: 90.9M"
        for i, t, tps, loss in [(991, 272, 2.35, 9.63), (992, "11.5K", 2.39, 9.69)]
    ]
    path = tmp_path / "nanotron.log"
    path.write_text("\n".join(lines) + "\n")
    from trainlens.readers import detect_format

    assert detect_format(path) == "text"
    wide = read_one(path).wide()
    assert wide.get_column("step").to_list() == [991, 992]
    assert wide.get_column("train/loss").to_list() == [9.63, 9.69]
    assert wide.get_column("step_time").to_list() == pytest.approx([0.272, 11.5])
    assert wide.get_column("tokens_per_sec").to_list() == pytest.approx([2350, 2390])
    assert wide.get_column("consumed_tokens").to_list() == [634_000, 635_000]
    assert wide.get_column("mem/allocated")[0] == pytest.approx(90.9e6)


def test_build_nanogpt_stdout_and_log_file(tmp_path: Path) -> None:
    """build-nanogpt's print and its log/log.txt lines, with its own format strings."""
    out, log = ["using device: cuda", "total desired batch size: 524288"], []
    for step in range(12):
        loss, lr, norm, dt, tps = 10.9 - 0.5 * step, 6e-4 * (step + 1) / 12, 1.5, 0.35, 1.5e6
        if step % 5 == 0:
            log += [f"{step} val {loss + 0.1:.4f}", f"{step} hella {0.25:.4f}"]
        log.append(f"{step} train {loss:.6f}")
        out.append(
            f"step {step:5d} | loss: {loss:.6f} | lr {lr:.4e} | norm: {norm:.4f} | "
            f"dt: {dt * 1000:.2f}ms | tok/sec: {tps:.2f}"
        )
    (tmp_path / "stdout.txt").write_text("\n".join(out) + "\n")
    (tmp_path / "log.txt").write_text("\n".join(log) + "\n")
    wide = read_one(tmp_path / "stdout.txt").wide()
    assert wide.get_column("step").to_list() == list(range(12))
    assert wide.get_column("train/loss").to_list() == pytest.approx(
        [10.9 - 0.5 * s for s in range(12)]
    )
    assert wide.get_column("lr")[11] == pytest.approx(6e-4)
    assert wide.get_column("grad_norm")[0] == 1.5
    assert wide.get_column("step_time")[0] == pytest.approx(0.35)
    assert wide.get_column("tokens_per_sec")[0] == pytest.approx(1.5e6)
    wide = read_one(tmp_path / "log.txt").wide()
    assert wide.get_column("train/loss").to_list() == pytest.approx(
        [10.9 - 0.5 * s for s in range(12)]
    )
    val = wide.filter(pl.col("val/loss").is_not_null())
    assert val.get_column("step").to_list() == [0, 5, 10]
    assert val.get_column("hellaswag").to_list() == [0.25] * 3


def test_llmc_stdout_lines(tmp_path: Path) -> None:
    """llm.c's printf to stdout (train_gpt2.cu), the current and the older shape; its
    -100% MFU before it is measured is left out."""
    tail = " | lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s"
    new = "step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)|" + tail[2:]
    old = "step %4d/%d | train loss %7.6f | norm %6.4f" + tail
    lines = [
        new
        % (s, 74, 3.5 - 0.01 * s, 0.1, 1.25, -0.2, 3e-4, 44.57, -100.0 if s < 3 else 41.5, 91886)
        for s in range(1, 8)
    ]
    lines += [old % (s, 74, 3.4, 1.25, 3e-4, 44.6, 41.5, 91880) for s in range(8, 10)]
    path = tmp_path / "stdout.log"
    path.write_text("\n".join(lines) + "\n")
    run = read_one(path)
    wide = run.wide()
    assert wide.get_column("step").to_list() == list(range(1, 10))
    assert wide.get_column("train/loss").to_list() == pytest.approx(
        [3.5 - 0.01 * s for s in range(1, 8)] + [3.4, 3.4]
    )
    assert wide.get_column("grad_norm").to_list() == [1.25] * 9
    assert wide.get_column("step_time")[0] == pytest.approx(0.04457)
    assert wide.get_column("tokens_per_sec")[-1] == 91880
    mfu = wide.filter(pl.col("mfu").is_not_null())
    assert mfu.get_column("step").to_list() == list(range(3, 10))
    assert mfu.get_column("mfu")[0] == pytest.approx(0.415)
    assert kinds(run)["ignored-values"] == 2
