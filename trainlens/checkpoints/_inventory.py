"""Finding a run's checkpoints and auditing each (:func:`inventory`, :func:`audit`).

Apart from the package's ``__init__``, which imports it on first use: the audit needs
zipfile (and with it bz2, lzma, shutil), the pickle walker and the safetensors reader,
about 40 ms of start-up that ``analyze`` of a run with no checkpoint beside it never
needs (issue 28)."""

from __future__ import annotations

import os

from trainlens.checkpoints._audit import audit_file, audit_folder
from trainlens.checkpoints._budget import PickleBudget
from trainlens.checkpoints._discover import MAX_ENTRIES, Found, find
from trainlens.checkpoints._files import CRC_BUDGET
from trainlens.checkpoints._model import Inventory, Pointer
from trainlens.checkpoints.findings import Params, RunSteps, findings
from trainlens.core.errors import UnreadableInputError
from trainlens.core.findings import Finding
from trainlens.core.paths import OutsideTree, confine, require_file_or_folder


def inventory(
    path: str | os.PathLike[str],
    *,
    crc_budget: int = CRC_BUDGET,
    pickle_budget: PickleBudget | None = None,
) -> Inventory:
    """Every checkpoint under ``path`` (a folder) or beside it (a run file), audited.

    ``crc_budget``: bytes of zip members read per checkpoint for CRC checks (the rest is
    checked for structure only, with a note). ``pickle_budget``: what walking one
    checkpoint's pickles may cost (bytes, opcodes, memo entries, seconds); a checkpoint
    that needs more is ``over-budget`` (CKPT011) and the next one is audited afresh."""
    p = os.fspath(path)
    if not os.path.exists(p):
        raise UnreadableInputError(f"{p}: no such file or folder")
    require_file_or_folder(p)  # a FIFO named here would hang reading the run beside it
    root, found = find(p)
    return audited(root, found, crc_budget=crc_budget, pickle_budget=pickle_budget)


def audited(
    root: str,
    found: Found,
    *,
    crc_budget: int = CRC_BUDGET,
    pickle_budget: PickleBudget | None = None,
) -> Inventory:
    """The inventory of what discovery found (named after ``root``), each one audited."""
    inv = Inventory(root=root)
    if found.truncated:
        inv.notes.append(f"more than {MAX_ENTRIES} entries under {root}: searched in part")
    for fpath, kind, step in found.folders:
        inv.checkpoints.append(audit_folder(fpath, kind, step, crc_budget, pickle_budget))
    for fpath, kind, step in found.files:
        inv.checkpoints.append(audit_file(fpath, kind, step, crc_budget, pickle_budget))
    inv.checkpoints.sort(key=lambda c: (c.step is None, c.step or 0, c.path))
    for ppath, kind in found.pointers:
        inv.pointers.append(_pointer(ppath, kind, inv))
    return inv


def _pointer(path: str, kind: str, inv: Inventory) -> Pointer:
    with open(path, "rb") as fh:
        target = fh.read(256).decode("utf-8", "replace").strip()
    folder = os.path.dirname(path)
    try:  # a pointer names a folder beside it: one elsewhere is not followed (CKPT010)
        if target:
            confine(folder, target)
    except OutsideTree as exc:
        return Pointer(path=path, kind=kind, target=target, resolved=None, refused=exc.reason)
    candidates = [os.path.join(folder, target)]
    if kind == "megatron" and target.isdigit():
        candidates.insert(0, os.path.join(folder, f"iter_{int(target):07d}"))
    resolved = next((c for c in candidates if target and os.path.exists(c)), None)
    return Pointer(path=path, kind=kind, target=target, resolved=resolved)


def run_steps_of(path: str | os.PathLike[str]) -> RunSteps | None:
    """The logged steps and wall times of the run at ``path``, or None when ``path`` is no
    run trainlens reads (a folder of checkpoints only): the CKPT findings that need a run
    (no recent checkpoint, save stalls) are then left out."""
    from trainlens.core.errors import TrainlensError
    from trainlens.readers import read_runs

    try:
        runs = read_runs([os.fspath(path)])
    except TrainlensError:
        return None
    if not runs:
        return None
    import polars as pl

    pts = runs[0].standing().group_by("step").agg(pl.col("wall_time").min()).sort("step")
    return RunSteps(pts.get_column("step").to_list(), pts.get_column("wall_time").to_list())


def audit(
    path: str | os.PathLike[str],
    *,
    params: Params | None = None,
    crc_budget: int = CRC_BUDGET,
    pickle_budget: PickleBudget | None = None,
    with_run: bool = True,
    run_path: str | os.PathLike[str] | None = None,
) -> tuple[Inventory, list[Finding], RunSteps | None]:
    """:func:`inventory` and its CKPT findings; the run at ``run_path`` (default: ``path``,
    when it is one) adds the findings that need its steps."""
    inv = inventory(path, crc_budget=crc_budget, pickle_budget=pickle_budget)
    if run_path is not None and not os.path.exists(run_path):
        raise UnreadableInputError(f"{os.fspath(run_path)}: no such file or folder")
    if run_path is not None:
        require_file_or_folder(run_path)
    # no checkpoint, nothing to judge against the run (and reading it costs seconds)
    run = None
    if with_run and inv.checkpoints:
        run = run_steps_of(path if run_path is None else run_path)
    return inv, findings(inv, params, run), run
