"""How each framework names its checkpoints: one table, asked by discovery and audit."""

from __future__ import annotations

import re

#: folder-shaped checkpoints: (kind, the folder name's pattern with the step as group 1)
FOLDERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("hf-trainer", re.compile(r"checkpoint-(\d+)")),
    ("megatron", re.compile(r"iter_(\d{7})")),
    ("deepspeed", re.compile(r"global_step(\d+)")),
)
#: the step in a file or DCP folder name: ``step=800``, ``step_800``, ``iter-800``,
#: ``ckpt_000800``, ``model_800`` (a trailing number); Lightning's ``epoch=2-step=800``
#: gives 800, not the epoch
STEP_IN_NAME = (
    re.compile(r"(?:^|[^a-z])(?:global_?)?step[=_-]?(\d+)", re.I),
    re.compile(r"(?:^|[^a-z])(?:iter|iteration|it|ckpt|checkpoint)[=_-]?(\d+)", re.I),
    re.compile(r"[_=-](\d+)$"),
)
#: the suffixes of files torch.save / pickle write
PICKLED = (".pt", ".pth", ".bin", ".ckpt", ".pkl")
SAFETENSORS = ".safetensors"
INDEX = ".safetensors.index.json"
DCP_METADATA = ".metadata"
#: pointer files: (kind, file name)
POINTERS = (("deepspeed", "latest"), ("megatron", "latest_checkpointed_iteration.txt"))
#: files whose presence in a checkpoint folder means the optimizer state is saved
OPTIMIZER_FILE = re.compile(r"(^optimizer\.(pt|bin)$|optim_states\.pt$|^distrib_optim\.pt$)")
#: pickled dict keys that hold optimizer state (Lightning, Megatron, hand-rolled loops)
OPTIMIZER_KEYS = ("optimizer_states", "optimizer", "optimizer_state_dict", "optim", "opt")


#: a shard's name (``model-00002-of-00007``): its numbers are no step
_SHARD = re.compile(r"-\d+-of-\d+$")


def step_in_name(name: str) -> int | None:
    stem = name
    for suffix in (*PICKLED, SAFETENSORS):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    stem = _SHARD.sub("", stem)
    for pattern in STEP_IN_NAME:
        m = pattern.search(stem)
        if m:
            return int(m.group(1))
    return None


def folder_kind(name: str) -> tuple[str, int] | None:
    for kind, pattern in FOLDERS:
        m = pattern.fullmatch(name)
        if m:
            return kind, int(m.group(1))
    return None
