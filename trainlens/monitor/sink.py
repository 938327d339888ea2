"""Where the monitor writes: one JSON object per line (canonical names), the run config
beside it, and optionally TensorBoard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

METRICS_FILE = "metrics.jsonl"
#: ``<stem>.config.json`` is the first name trainlens.runconfig looks for beside a file;
#: a plain config.json would collide with the model config HF saves in its output dir
CONFIG_FILE = "metrics.config.json"
#: json.dumps(row, separators=(",", ":")) without a new encoder per call (3 µs a record)
_encode = json.JSONEncoder(separators=(",", ":")).encode


#: keys written exactly; every other float is written to 6 significant digits
_EXACT = frozenset({"time", "lr"})


def _row(rec: dict[str, Any]) -> dict[str, Any]:
    """6 significant digits for measured figures (the fixtures' precision: half the file);
    the LR and the wall clock exactly (an LR is set, not measured: the schedule detector
    compares it with the declared one). NaN / Infinity are written as json writes them
    (``f"{nan:.6g}"`` reads back as nan), which trainlens' JSONL reader reads back."""
    return {
        k: float(f"{v:.6g}")
        if type(v) is float and k not in _EXACT and not k.startswith("lr/")
        else v
        for k, v in rec.items()
    }


class JsonlSink:
    """Appends records to ``<out>/metrics.jsonl``; line-buffered per flush."""

    #: written to on the monitor's writer thread (trainlens.monitor.writer)
    thread_safe = True

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / METRICS_FILE
        self._fh: TextIO | None = self.path.open("a", encoding="utf-8")

    def write(self, records: list[dict[str, Any]]) -> None:
        if self._fh is None or not records:
            return
        lines = []
        for rec in records:
            lines.append(_encode(_row(rec)))
        self._fh.write("\n".join(lines) + "\n")
        self._fh.flush()

    def end(self, record: dict[str, Any]) -> None:
        """The end record (:func:`trainlens.core.runstate.end_record`), the file's last line."""
        self.write([record])

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class TensorBoardSink:
    """The same records as TensorBoard scalars (torch's SummaryWriter)."""

    thread_safe = True  # (only the writer thread writes to it after it is made)

    def __init__(self, out: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._w = SummaryWriter(str(out / "tb"))

    def write(self, records: list[dict[str, Any]]) -> None:
        for rec in records:
            step = int(rec["step"])
            for key, value in rec.items():
                if key not in ("step", "time") and isinstance(value, float):
                    self._w.add_scalar(key, value, step, walltime=rec.get("time"))
        self._w.flush()

    def close(self) -> None:
        self._w.close()


def write_config(out: Path, config: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / CONFIG_FILE
    path.write_text(json.dumps(config, indent=2, default=str) + "\n", encoding="utf-8")
    return path
