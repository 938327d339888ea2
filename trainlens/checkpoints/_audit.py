"""Audit one checkpoint (a file or a folder) into a :class:`Checkpoint`."""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Callable
from typing import TypeVar

from trainlens.checkpoints import _layouts as L
from trainlens.checkpoints._budget import PickleBudget, Spend
from trainlens.checkpoints._files import (
    CRC_BUDGET,
    JSON_MAX,
    FileAudit,
    audit_pickled,
    audit_safetensors,
    budget_problem,
)
from trainlens.checkpoints._model import Checkpoint, Problem
from trainlens.checkpoints._named import inside, listing
from trainlens.checkpoints._pickles import scan

_T = TypeVar("_T")

#: a checkpoint folder with more files than this is audited on its first ones (a note says so)
MAX_FILES = 20_000


class _Auditor:
    """Collects the problems of one checkpoint's files, sharing one CRC budget and one
    pickle budget."""

    def __init__(
        self, ckpt: Checkpoint, base: str, budget: int, pickle_budget: PickleBudget
    ) -> None:
        self.ckpt = ckpt
        self.base = base  # folder the relative names are relative to
        self.budget = budget
        self.spend = Spend(pickle_budget)
        self.strings: set[str] = set()
        self.ints: dict[str, int] = {}

    def add(self, audit: FileAudit) -> None:
        self.ckpt.problems.extend(audit.problems)
        self.ckpt.notes.extend(audit.notes)
        self.budget = max(0, self.budget - audit.crc_bytes)
        for p in audit.pickles:
            self.strings |= p.strings
            for k, v in p.int_after.items():
                self.ints.setdefault(k, v)

    def guard(self, fn: Callable[[str], _T], rel: str, default: _T) -> _T:
        """``fn(rel)``; a file the machine will not let us read is a problem, not a crash
        (a checkpoint folder of another user on a shared cluster)."""
        try:
            return fn(rel)
        except OSError as exc:
            why = exc.strerror or str(exc)
            self.ckpt.problems.append(Problem("unreadable", rel, f"cannot be read ({why})"))
            return default

    def pickled(self, rel: str) -> None:
        self.add(audit_pickled(os.path.join(self.base, rel), rel, self.spend, self.budget))

    def safetensors(self, rel: str) -> FileAudit:
        audit = audit_safetensors(os.path.join(self.base, rel), rel)
        self.add(audit)
        return audit

    def index(self, rel: str) -> set[str]:
        """A sharded safetensors index: every shard there, whole, holding its tensors.
        Returns the shard names (relative), audited here and not again."""
        try:
            with open(os.path.join(self.base, rel), "rb") as fh:
                doc = json.loads(fh.read(JSON_MAX))
            weight_map = doc["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not an object")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            self.ckpt.problems.append(Problem("corrupt", rel, f"index does not parse ({exc})"))
            return set()
        folder = os.path.dirname(rel)
        by_shard: dict[str, list[str]] = {}
        for tensor, shard in weight_map.items():
            by_shard.setdefault(str(shard), []).append(str(tensor))
        covered = set()
        for shard, tensors in sorted(by_shard.items()):
            srel = os.path.join(folder, shard)
            if not inside(self.ckpt.problems, self.base, srel, os.path.basename(rel)):
                continue
            covered.add(os.path.normpath(srel))
            if not os.path.isfile(os.path.join(self.base, srel)):
                msg = f"shard named by {os.path.basename(rel)} ({len(tensors)} tensors) is missing"
                self.ckpt.problems.append(Problem("missing", srel, msg))
                continue
            audit = self.safetensors(srel)
            if audit.problems:
                continue
            absent = [t for t in tensors if t not in audit.tensors]
            if absent:
                msg = f"{len(absent)} tensor(s) the index puts here are not in it: {absent[0]}"
                self.ckpt.problems.append(Problem("corrupt", srel, msg))
        return covered

    def dcp(self, rel: str) -> None:
        """A torch.distributed.checkpoint folder: its ``.metadata`` pickle (opcodes only)
        names each storage file with an offset and length; each must exist and be long
        enough."""
        path = os.path.join(self.base, rel)
        audit = FileAudit()
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                found = scan(b"", spend=self.spend)
            else:
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                    found = scan(data, ref_suffix=".distcp", spend=self.spend)
        audit.pickles.append(found)
        verdict = found.verdict()
        if verdict:
            audit.problem("unsafe", rel, verdict)
        budget_problem(self.spend, rel, audit)
        if found.error is not None:
            status = "truncated" if "STOP" in found.error else "corrupt"
            audit.problem(status, rel, f"the metadata pickle does not parse: {found.error}")
        self.add(audit)
        folder = os.path.dirname(rel)
        need: dict[str, int] = {}
        for name, ints in found.refs:
            end = sum(ints[:2]) if len(ints) == 2 else 0
            need[name] = max(need.get(name, 0), end)
        for name, end in sorted(need.items()):
            srel = os.path.join(folder, name)
            spath = os.path.join(self.base, srel)
            if not inside(self.ckpt.problems, self.base, srel, os.path.basename(rel)):
                continue
            if not os.path.isfile(spath):
                self.ckpt.problems.append(Problem("missing", srel, "storage file is missing"))
            elif os.path.getsize(spath) < end:
                msg = f"{os.path.getsize(spath):,} B but the metadata needs {end:,} B"
                self.ckpt.problems.append(Problem("truncated", srel, msg))


def _stat(path: str) -> tuple[int, float]:
    st = os.stat(path)
    return st.st_size, st.st_mtime


def audit_file(
    path: str,
    kind: str,
    step: int | None,
    budget: int = CRC_BUDGET,
    pickle_budget: PickleBudget | None = None,
) -> Checkpoint:
    """A one-file checkpoint: torch ``.pt``/``.pth``, Lightning ``.ckpt``, ``.safetensors``."""
    size, mtime = _stat(path)
    ckpt = Checkpoint(path=path, kind=kind, step=step, wall_time=mtime, size=size)
    base, rel = os.path.split(path)
    auditor = _Auditor(ckpt, base, budget, pickle_budget or PickleBudget())
    if path.endswith(L.INDEX):
        covered: set[str] = auditor.guard(auditor.index, rel, set())
        for shard in covered:
            spath = os.path.join(base, shard)
            if os.path.isfile(spath):
                ssize, smtime = _stat(spath)
                ckpt.size += ssize
                ckpt.wall_time = max(ckpt.wall_time or 0.0, smtime)
    elif path.endswith(L.SAFETENSORS):
        auditor.guard(auditor.safetensors, rel, None)
    else:
        auditor.guard(auditor.pickled, rel, None)
        ckpt.optimizer = _has_optimizer_key(auditor.strings) if kind == "lightning" else None
        if kind == "torch" and _has_optimizer_key(auditor.strings):
            ckpt.optimizer = True
    if kind == "lightning":
        ckpt.selective = _monitored(auditor.strings)
    if ckpt.step is None and "global_step" in auditor.ints:
        ckpt.step = auditor.ints["global_step"]
    return ckpt


def _monitored(strings: set[str]) -> bool:
    """Lightning keys each ModelCheckpoint's state by its settings, e.g.
    ``ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', ...}``; a monitor other than
    None keeps the top k by that metric."""
    return any(
        s.startswith("ModelCheckpoint{'monitor': ")
        and not s.startswith("ModelCheckpoint{'monitor': None")
        for s in strings
    )


def _has_optimizer_key(strings: set[str]) -> bool:
    return any(k in strings for k in L.OPTIMIZER_KEYS)


def audit_folder(
    path: str,
    kind: str,
    step: int | None,
    budget: int = CRC_BUDGET,
    pickle_budget: PickleBudget | None = None,
) -> Checkpoint:
    """A folder checkpoint (HF, Megatron, DeepSpeed, DCP): every file it holds that a
    format here knows, its ``latest`` pointer if it has one, and its optimizer state."""
    ckpt = Checkpoint(path=path, kind=kind, step=step, wall_time=None, size=0)
    auditor = _Auditor(ckpt, path, budget, pickle_budget or PickleBudget())
    files, links_out = listing(path, MAX_FILES)
    ckpt.problems.extend(links_out)
    if len(files) >= MAX_FILES:
        ckpt.notes.append(f"over {MAX_FILES} files: only the first {MAX_FILES} audited")
    for rel in files:
        try:
            size, mtime = _stat(os.path.join(path, rel))
        except OSError:  # gone since the listing (a rotation deleting it)
            continue
        ckpt.size += size
        ckpt.wall_time = max(ckpt.wall_time or 0.0, mtime)
    covered: set[str] = set()
    for rel in files:
        if rel.endswith(L.INDEX):
            covered |= auditor.guard(auditor.index, rel, set())
    optimizer_file = False
    for rel in files:
        name = os.path.basename(rel)
        if L.OPTIMIZER_FILE.search(name):
            optimizer_file = True
        if rel in covered or rel.endswith(L.INDEX):
            continue
        if name.endswith(L.SAFETENSORS):
            auditor.guard(auditor.safetensors, rel, None)
        elif name.endswith(L.PICKLED):
            auditor.guard(auditor.pickled, rel, None)
        elif name == L.DCP_METADATA:
            auditor.guard(auditor.dcp, rel, None)
        elif name in dict(L.POINTERS).values():
            auditor.guard(lambda r: _inner_pointer(ckpt, path, r), rel, None)
        elif name == "trainer_state.json":
            auditor.guard(lambda r: _trainer_state(ckpt, path, r), rel, None)
    if not files:
        ckpt.problems.append(Problem("missing", "", "the folder is empty"))
    elif kind == "hf-trainer" and not _has_weights(files):
        ckpt.problems.append(Problem("missing", "", "no model weights file"))
    # HF and DeepSpeed keep the optimizer in files of their own (a key named "optimizer"
    # in scheduler.pt is the scheduler's); Megatron and DCP inside the state dict
    by_key = kind not in ("hf-trainer", "deepspeed") and _has_optimizer_key(auditor.strings)
    ckpt.optimizer = optimizer_file or by_key
    return ckpt


def _has_weights(files: list[str]) -> bool:
    return any(
        f.endswith((L.SAFETENSORS, L.INDEX, ".bin", ".pt", ".index.json", L.DCP_METADATA))
        and "optim" not in f
        and "rng_state" not in f
        and "scheduler" not in f
        and "training_args" not in f
        for f in files
    )


def _inner_pointer(ckpt: Checkpoint, folder: str, rel: str) -> None:
    """HF + DeepSpeed write ``checkpoint-N/latest`` naming ``global_stepN`` inside it."""
    with open(os.path.join(folder, rel), "rb") as fh:
        target = fh.read(256).decode("utf-8", "replace").strip()
    named = os.path.join(os.path.dirname(rel), target)
    if target and not inside(ckpt.problems, folder, named, os.path.basename(rel)):
        return
    where = os.path.join(folder, named)
    if target and not os.path.exists(where) and target != "release":
        msg = f"names {target!r}, which is not there"
        ckpt.problems.append(Problem("missing", rel, msg))


def _trainer_state(ckpt: Checkpoint, folder: str, rel: str) -> None:
    try:
        with open(os.path.join(folder, rel), "rb") as fh:
            state = json.loads(fh.read(JSON_MAX))
        step = state.get("global_step")
    except (ValueError, AttributeError, RecursionError) as exc:
        ckpt.problems.append(Problem("corrupt", rel, f"not valid JSON ({exc})"))
        return
    if isinstance(step, int) and ckpt.step is not None and step != ckpt.step:
        ckpt.notes.append(f"{rel}: global_step {step}, the folder's name says {ckpt.step}")
