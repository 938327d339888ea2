"""Plain outputs: one line per event (not a TTY), or one JSON object per event (``--json``)."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from trainlens.core.sanitize import terminal
from trainlens.formatters.json import json_safe
from trainlens.watch.events import WatchEvent

#: what a person reads of the lifecycle: the incidents; their findings' own events are in
#: ``--json`` (a NaN reaching 21 series was 21 lines, which scrolled the rest away)
PERSON_SKIPS = ("finding-opened", "finding-changed", "finding-closed")


class LineSink:
    """Each event as one plain line, flushed at once (a log file or a pipe reads it live);
    incidents, not the findings' own events."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def emit(self, event: WatchEvent) -> None:
        if event.kind in PERSON_SKIPS:
            return
        # run names and messages come from the input: one line, no control codes
        print(terminal(event.line()), file=self.stream, flush=True)

    def update(self, state: Any) -> None:
        pass

    def close(self) -> None:
        pass


class JsonSink(LineSink):
    """Each event as one JSON object on its own line (``--json``), for other programs."""

    def emit(self, event: WatchEvent) -> None:
        text = json.dumps(json_safe(event.to_dict()), allow_nan=False, separators=(",", ":"))
        print(text, file=self.stream, flush=True)
