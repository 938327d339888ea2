"""Regenerate docs/metrics.md from the alias table (run from the repository root)."""

from __future__ import annotations

from pathlib import Path

from trainlens.core.names import (
    CANONICAL_METRICS,
    EXACT_ALIASES,
    GPU_DEVICE_PREFIX,
    GPU_FIELDS,
    MEMORY_NAMESPACES,
    NAMESPACES,
    OWN_PREFIX,
    PATTERN_ALIASES,
    SPLIT_NAMESPACES,
)

HEADER = """# Metric names

Every reader maps what the run logged to these canonical names through one alias table
(`trainlens/core/names.py`). Matching is on the name in lower case with surrounding
white space removed: the user's own aliases first (`[tool.trainlens.aliases]` or
`--alias logged=canonical`), then the exact table, then the patterns, then the namespace
rule below. A name that matches nothing keeps its own spelling. When two logged names
claim one canonical name, the one already spelled canonically wins (else the first seen)
and the other keeps its own name: nothing is merged silently.
`summary.metrics[...].logged_as` in the JSON output says what each canonical metric was
called in the file.
"""

DEVICE_RULE = """## Per-GPU metrics (the device rule)

A GPU's own samples are named `gpu<i>/<field>`, one name per device (`gpu0/power_w`,
`gpu7/util`). A logged name is one when it is a device prefix and a field: the prefix is
W&B's `gpu.<i>.` (its system metrics `system/gpu.0.powerWatts`; `system.gpu.0.…` in the
public API's history dumps), or `gpu<i>/`, `gpu_<i>/`, `gpu<i>.` (pattern
`{prefix}`); the field is one of the spellings below (W&B's keys and nvidia-smi's
`--query-gpu` fields). W&B's `gpu.process.<i>.…` (the same device again, as seen by the
process) is not mapped: it would count a GPU twice. `gpu<i>/power_w` is what measured
energy integrates (docs/calculators.md).

| field as logged | becomes | unit scale |
|---|---|---|
"""

NAMESPACE_RULE = """## Namespaces (a rule, not a list of spellings)

A name that is still unmatched and has a folder in front is looked up again without it
(up to four folders deep), so every spelling above also works under a folder:

- kind-of-signal folders — {folders} — are dropped: `perf/tokens_per_sec` is
  `tokens_per_sec`, `optim/grad_norm` is `grad_norm`, `train/update_to_weight` is
  `update_ratio`, `time/step_time_ms` is `step_time` (scaled ×0.001). Under {memory} the
  rest is also tried as `mem_<rest>` (`sys/mem_bytes`, `memory/allocated` are
  `mem/allocated`). When the rest matches nothing the whole name is kept
  (`train/f1`, `train/loss_epoch` stay as logged).
- split folders — {splits} — move the rest to the validation split, never to training:
  `eval/loss` is `val/loss`, `eval/ppl` is `val/perplexity`, `test/accuracy` is
  `val/accuracy`, `validation/loss_epoch` is `val/loss_epoch`.
- a test set (`test/…`, `test_acc`, `Test Acc`, `test_loss`) takes the validation name
  only when no other name claims it: a log that evaluates one held-out set each epoch and
  calls it the test set is watched on it (`Epoch 1/35, Train Loss: …, Test Acc: 59.86%`
  gives `val/accuracy`); beside a validation series it keeps its own name.

Last, words joined by `-` or a space are looked up joined by `_` (the separator rule):
Megatron's `grad norm`, `learning-rate`, `loss-scale`, `iteration-time`, NeMo's
`train_step_timing in s`."""

OWN_RULE = """## trainlens' own names (`{prefix}…`)

What trainlens writes, trainlens reads. `trainlens.monitor` writes canonical names as they
are; where its figures go into another tool's logger beside that tool's own
(`LightningCallback(log_to_lightning=True)` into Lightning's CSV, TensorBoard and W&B
loggers) they are named `{prefix}<canonical name>` (`{prefix}lr`, `{prefix}train/loss`,
`{prefix}grad_norm/<tensor>`), and read back as the name after the prefix, looked up as
the monitor's own file has it: `{prefix}lr` is `lr`. Before any other table, except the
user's own aliases. When such a name and another claim one canonical name, a name
already spelled canonically wins, then trainlens' own, then the rest in file order: its
`{prefix}lr`, measured every optimizer step, before a LearningRateMonitor's `lr-AdamW`
logged every 50th; the other keeps its own name."""

FOOTER = """
Sources of the spellings: HF Trainer's `log_history` keys (loss, learning_rate,
grad_norm, eval_*), Lightning's `self.log` names and LearningRateMonitor (`lr-<Optimizer>`,
`lr-<Optimizer>/pg<N>`), Megatron-LM / Megatron-DeepSpeed iteration lines ('lm loss',
'grad norm', 'learning rate', 'samples per second', 'TFLOPs', 'loss scale', 'elapsed time
per iteration (ms)'), llm.c and modded-nanogpt logs (`trl`, `tel`, `norm`, `lr`,
`train_loss`, `val_loss`, `step_avg`, `train_time`), torchtitan's metric logger
(`loss_metrics/global_avg_loss`, `throughput(tps)`, `mfu(%)`, `memory/max_active(GiB)`,
`time_metrics/end_to_end(s)`), and common TensorBoard tags.
This page is generated from the table: `python docs/gen_metrics.py`.
"""


def render() -> str:
    lines = [HEADER, "## Canonical names", "", "| name | meaning |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in CANONICAL_METRICS.items()]
    lines += ["", "## Exact aliases", "", "| logged as | canonical | unit scale |", "|---|---|---|"]
    for key, alias in sorted(EXACT_ALIASES.items(), key=lambda kv: (kv[1].canonical, kv[0])):
        scale = "" if alias.scale == 1 else f"×{alias.scale:g}"
        lines.append(f"| `{key}` | `{alias.canonical}` | {scale} |")
    lines += ["", "## Patterns", "", "| pattern | becomes |", "|---|---|"]
    lines += [f"| `{p.pattern}` | `{t}` |" for p, t in PATTERN_ALIASES]
    lines += ["", DEVICE_RULE.format(prefix=GPU_DEVICE_PREFIX.pattern).rstrip("\n")]
    for key, alias in GPU_FIELDS.items():
        scale = "" if alias.scale == 1 else f"×{alias.scale:g}"
        lines.append(f"| `{key}` | `gpu<i>/{alias.canonical}` | {scale} |")
    lines += [
        "",
        NAMESPACE_RULE.format(
            folders=", ".join(f"`{n}/`" for n in sorted(NAMESPACES)),
            memory=", ".join(f"`{n}/`" for n in sorted(MEMORY_NAMESPACES)),
            splits=", ".join(f"`{n}/`" for n in sorted(SPLIT_NAMESPACES)),
        ),
    ]
    lines += ["", OWN_RULE.format(prefix=OWN_PREFIX)]
    return "\n".join(lines) + "\n" + FOOTER


if __name__ == "__main__":
    Path(__file__).with_name("metrics.md").write_text(render())
