"""The baseline a gated run is compared with: a run in any format (read and analyzed with
the same rules), or a stored summary JSON — the output of ``trainlens analyze --json`` or
``trainlens gate --format json``. When it holds several runs, each gated run is compared
with the baseline run of the same name; a single baseline run serves every gated run.

Reading a baseline that is a run (not a stored summary) gates it with ``detect=False``:
that is :func:`trainlens.gate.runner.load_baseline`, so this module depends on nothing
of the runner and the runner on this one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainlens.core.dataclass import dataclass, field
from trainlens.core.errors import UnreadableInputError
from trainlens.gate.outcomes import outcomes_from_summary


@dataclass
class Baseline:
    path: str
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # run name -> outcomes

    def pick(self, run: str) -> tuple[str | None, dict[str, Any] | None, str]:
        """(baseline run name, its outcomes, why there is none)."""
        if run in self.records:
            return run, self.records[run], ""
        if len(self.records) == 1:
            ((name, outcomes),) = self.records.items()
            return name, outcomes, ""
        names = ", ".join(list(self.records)[:5])
        return None, None, f"no baseline run named {run!r} in {self.path} (it has {names})"


def read_stored(path: Path) -> Baseline | None:
    """A stored summary JSON, or None when the file is not one (e.g. trainer_state.json)."""
    if path.suffix.lower() != ".json" or not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        return None
    records: dict[str, dict[str, Any]] = {}
    for i, rec in enumerate(doc["runs"], 1):
        if not isinstance(rec, dict) or not isinstance(rec.get("run"), str):
            raise UnreadableInputError(f"{path}: runs[{i}] has no run name")
        if rec.get("verdict") == "unreadable":
            continue
        outcomes = rec.get("outcomes")
        if not isinstance(outcomes, dict):
            summary = rec.get("summary")
            if not isinstance(summary, dict):
                raise UnreadableInputError(f"{path}: runs[{i}] ({rec['run']}) has no summary")
            outcomes = outcomes_from_summary(summary)
        records[rec["run"]] = outcomes
    if not records:
        raise UnreadableInputError(f"{path}: no readable run in this baseline summary")
    return Baseline(str(path), records)
