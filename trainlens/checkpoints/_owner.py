"""Which checkpoints are a run's: the ones its layout, its config or the user says are.

A search below and above a run finds whatever checkpoints lie near it, and near is not
the same as the run's: ``analyze mlflow.db`` reported a truncated ``checkpoint-600`` of
another run three levels below the store (an error, exit 1 with ``--fail-on error``), and
a run in ``/tmp`` was judged by the ``ckpt/`` folders of others. So ``analyze`` audits
only the checkpoints that are the run's by one of these:

- **the run's own folder** (the log file's folder, or the run folder): the checkpoints
  directly in it (``checkpoint-N/``, ``iter_N/``, ``global_stepN/``, a DCP folder, a
  ``*.ckpt`` or a ``.pt`` with a step, a ``latest`` pointer), and its ``checkpoints/``
  folder searched down (Lightning's ``version_N/checkpoints/``, a loop's own);
- **HF Trainer's output_dir**: a log read from inside ``checkpoint-N/`` has its siblings;
  a TensorBoard log in ``output_dir/runs/<date>/`` has output_dir's checkpoints (not the
  log's own folder, which holds none);
- **an MLflow run's artifacts**, when they are a local folder inside the store's;
- **a path its run config names** (``checkpoint_dir``, ``output_dir``, ``dirpath``, …),
  when it lies inside the run's folder (no path a file names is opened outside the tree
  the user gave: one outside is named in a note, not opened);
- **a path the user names** (``--checkpoints``, ``[tool.trainlens] checkpoints``), in
  :mod:`trainlens.checkpoints.attach`.

What the old search finds beyond these is at most a note naming the folder and
``--checkpoints``, never a finding. A SQLite or file store's folder is no run's own: it
holds every run of the store.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from trainlens.checkpoints import _layouts as L
from trainlens.checkpoints._discover import Found, find, find_in
from trainlens.core.dataclass import dataclass, field

if TYPE_CHECKING:
    from trainlens.core.run import Run

#: the folder beside a log that holds its run's checkpoints (Lightning, hand-rolled loops)
OWN_FOLDER = "checkpoints"
#: run-config keys that name where the run saved its checkpoints (HF TrainingArguments'
#: output_dir, Lightning ModelCheckpoint's dirpath, Megatron's save, common spellings)
CONFIG_KEYS = (
    "checkpoint_dir",
    "checkpoints_dir",
    "ckpt_dir",
    "save_dir",
    "dirpath",
    "output_dir",
    "save",
)
#: formats whose source is a store of many runs: its folder is none of them in particular
STORES = frozenset({"mlflow"})
#: stray folders named in the note, at most
NOTE_LIMIT = 3


@dataclass
class Places:
    """Where a run's own checkpoints are: folders whose own entries count (``shallow``),
    folders searched down (``deep``), and paths its config names outside its tree."""

    root: str
    shallow: list[str] = field(default_factory=list)
    deep: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)

    def add(self, folder: str, *, deep: bool = False) -> None:
        folder = os.path.abspath(folder)
        bucket = self.deep if deep else self.shallow
        if os.path.isdir(folder) and folder not in bucket:
            bucket.append(folder)


def _run_folder(run: Run) -> str:
    src = os.path.abspath(run.source)
    return src if os.path.isdir(src) else os.path.dirname(src)


def _local_artifacts(run: Run, store_folder: str) -> str | None:
    uri = run.metadata.get("artifact_uri")
    if not isinstance(uri, str) or not uri:
        return None
    path = uri.removeprefix("file://") if uri.startswith("file://") else uri
    if "://" in path or ":" in path.split("/", 1)[0]:  # s3://, gs://, mlflow-artifacts:
        return None
    from trainlens.core.paths import is_inside

    full = os.path.abspath(os.path.join(store_folder, path))
    inside = is_inside(os.path.realpath(store_folder), os.path.realpath(full))
    return full if inside and is_inside(store_folder, full) else None


def _config_paths(run: Run, folder: str, places: Places) -> None:
    from trainlens.core.paths import confined
    from trainlens.runconfig import find_run_config

    raw, _origin = find_run_config(run)
    for key in CONFIG_KEYS:
        value = _shallow_value(raw, key)
        if not isinstance(value, str) or not value.strip():
            continue
        inside = confined(folder, value) if not os.path.isabs(value) else None
        if inside is None:
            places.outside.append(value)
        else:
            places.add(str(inside), deep=True)


def _shallow_value(raw: dict[str, Any], key: str) -> Any:
    """``key`` at the top level or one section down (``trainer.output_dir``)."""
    if key in raw:
        return raw[key]
    for value in raw.values():
        if isinstance(value, dict) and key in value:
            return value[key]
    return None


def places_of(run: Run) -> Places:
    """Where the run's layout and config put its checkpoints."""
    folder = _run_folder(run)
    if run.format in STORES:
        places = Places(root=folder)
        artifacts = _local_artifacts(run, folder)
        if artifacts:
            places.add(artifacts, deep=True)
        return places
    parent = os.path.dirname(folder)
    if L.folder_kind(os.path.basename(folder)) is not None:
        # HF's log read from inside checkpoint-N/: the run's checkpoints are its siblings
        places = Places(root=parent)
        places.add(parent)
    elif os.path.basename(parent) == "runs":
        # HF's TensorBoard log in output_dir/runs/<date>/: output_dir holds checkpoint-N
        places = Places(root=os.path.dirname(parent))
        places.add(os.path.dirname(parent))
        places.add(folder)
    else:
        places = Places(root=folder)
        places.add(folder)
    places.add(os.path.join(folder, OWN_FOLDER), deep=True)
    _config_paths(run, folder, places)
    return places


def own_checkpoints(run: Run) -> tuple[Places, Found]:
    places = places_of(run)
    return places, find_in(places.shallow, places.deep)


def stray_folders(run: Run, own: Found) -> list[str]:
    """Folders holding checkpoints near the run (the search ``trainlens checkpoints``
    does) that are not its own: each the folder to pass as ``--checkpoints``."""
    _root, near = find(run.source)
    mine = {os.path.abspath(p) for p, _k, _s in own.folders + own.files}
    out: list[str] = []
    for path, _kind, _step in near.folders + near.files:
        full = os.path.abspath(path)
        if full in mine:
            continue
        holder = _shown(os.path.dirname(full))
        if holder not in out:
            out.append(holder)
    return out


def _shown(path: str) -> str:
    """A path as the user would type it: relative when under the working folder."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def stray_note(strays: list[str], outside: list[str]) -> str | None:
    """One sentence naming checkpoints that may be the run's but are not audited."""
    parts = []
    if strays:
        shown = ", ".join(strays[:NOTE_LIMIT])
        more = f" and {len(strays) - NOTE_LIMIT} more folders" if len(strays) > NOTE_LIMIT else ""
        target = strays[0] if len(strays) == 1 else "DIR"
        parts.append(
            f"found checkpoints in {shown}{more} that may belong to this run (not audited: "
            f"its layout does not say they are its own); pass --checkpoints {target} to "
            "audit them"
        )
    if outside:
        parts.append(
            f"the run config names {', '.join(outside[:NOTE_LIMIT])} as where it saves, "
            "outside the run's folder (not opened); pass --checkpoints PATH to audit it"
        )
    return "; ".join(parts) or None
