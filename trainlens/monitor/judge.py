"""In-process judging: the same detectors as ``trainlens analyze``, on the run so far.

Judging reads the whole file and runs every detector, which costs far more than a step,
so it is duty-cycled: after a judging that took t seconds the next waits at least
t / ``DUTY`` seconds (3 % of the wall clock at most). A record with a non-finite loss or
grad norm is judged at once, whatever the duty cycle, so a run told ``stop_on="error"``
stops at the step its loss turns NaN.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: share of the wall clock judging may take
DUTY = 0.03
_URGENT = ("train/loss", "grad_norm")


class Judge:
    def __init__(self, on_finding: Callable[[Any], None] | None, stop_on: str | None) -> None:
        from trainlens.core.findings import Severity

        self.on_finding = on_finding
        self.stop_rank = Severity.parse(stop_on).rank if stop_on is not None else None
        self._seen: set[tuple[str, str | None, int | None]] = set()
        self._next = 0.0

    @staticmethod
    def urgent(rows: list[dict[str, Any]]) -> bool:
        """A row holds a non-finite loss or grad norm: judge now."""
        return any(
            isinstance(row.get(k), float) and not math.isfinite(row[k])
            for row in rows
            for k in _URGENT
        )

    def judge(self, path: Path, urgent: bool) -> str | None:
        """Judge the run at ``path`` when the duty cycle allows (or ``urgent``); call
        ``on_finding`` for each new finding; return the message of the first new finding
        at or above ``stop_on`` (None when the run goes on)."""
        now = time.monotonic()
        if not urgent and now < self._next:
            return None
        from trainlens.api import analyze_run, read
        from trainlens.core.config import Config

        runs = read(path)
        # every non-finite metric its own NAN001: the detector lists 20 and folds the rest
        # into one warning, sorted by name, which hides train/loss (its error) behind the
        # per-tensor series when more than 20 turn NaN at once (reported to its owner)
        config = Config(detectors={"nonfinite": {"max_metrics": 1_000_000}})
        result = analyze_run(runs[0], config) if runs else None
        spent = time.monotonic() - now
        self._next = time.monotonic() + spent / DUTY
        stop = None
        for f in result.findings if result is not None else []:
            key = (f.code, f.metric, f.step_start)
            if key in self._seen:
                continue
            self._seen.add(key)
            if self.on_finding is not None:
                self.on_finding(f)
            if stop is None and self.stop_rank is not None and f.severity.rank >= self.stop_rank:
                stop = f"{f.code} {f.where}: {f.message}"
        return stop
