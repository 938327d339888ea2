"""The live terminal view (a TTY without ``--json``), drawn with rich.

Per run: the last step, the steps/s it is making, the time since its last record (red once
the run counts as stalled), and the last value of each metric of the minimum dashboard
with a sparkline of its recent values (one point per refresh); below, the latest events,
newest first. Redrawn at most four times a second.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from trainlens.core.sanitize import terminal
from trainlens.watch.events import WatchEvent

#: The minimum dashboard's metrics, in the order shown.
DASHBOARD = (
    "train/loss",
    "val/loss",
    "grad_norm",
    "lr",
    "tokens_per_sec",
    "mfu",
    "update_ratio",
    "entropy",
    "mem/allocated",
)
BLOCKS = "▁▂▃▄▅▆▇█"
STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def sparkline(values: list[float]) -> str:
    finite = [v for v in values if v == v and abs(v) != float("inf")]
    if not finite:
        return ""
    lo, hi = min(finite), max(finite)
    span = hi - lo or 1.0
    out = []
    for v in values:
        if v != v or abs(v) == float("inf"):
            out.append("!")
        else:
            out.append(BLOCKS[min(len(BLOCKS) - 1, int((v - lo) / span * len(BLOCKS)))])
    return "".join(out)


def _num(x: float | None) -> str:
    from trainlens.formatters.text import number_text

    return number_text(x)


class LiveView:
    def __init__(self, console: Any = None, history: int = 40, events: int = 12) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = console or Console()
        self.live = Live(console=self.console, refresh_per_second=4, transient=False)
        self.live.start()
        self.events: deque[WatchEvent] = deque(maxlen=events)
        self.history: dict[tuple[str, str], deque[float]] = {}
        self.keep = history
        self.state: Any = None

    def emit(self, event: WatchEvent) -> None:
        from trainlens.watch.sinks.lines import PERSON_SKIPS

        if event.kind in PERSON_SKIPS:  # the pane shows incidents
            return
        self.events.appendleft(event)
        self._draw()

    def update(self, state: Any) -> None:
        self.state = state
        for live in getattr(state, "runs", []):
            for m in DASHBOARD:
                if m in live.last_values:
                    key = (live.name, m)
                    h = self.history.setdefault(key, deque(maxlen=self.keep))
                    h.append(float(live.last_values[m]))
        self._draw()

    def close(self) -> None:
        self._draw()
        self.live.stop()

    def _draw(self) -> None:
        self.live.update(self.render(), refresh=False)

    def render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        parts: list[Any] = []
        runs = list(getattr(self.state, "runs", []) or [])
        head = Text(f"trainlens watch — {len(runs)} run{'s' if len(runs) != 1 else ''}", "bold")
        parts.append(head)
        for live in runs:
            since = live.seconds_since_record()
            rate = live.steps_per_sec()
            # rich strips only some control codes (not ESC sequences' tails, not bidi)
            line = Text(terminal(live.name), "bold")
            line.append(f"  step {live.last_step if live.last_step is not None else '—'}")
            line.append(f"  {_num(rate)} steps/s" if rate is not None else "  — steps/s")
            if since is not None:
                line.append(
                    f"  last record {since:.0f}s ago", "bold red" if live.stalled else "dim"
                )
            worst = live.worst_open()
            if worst is not None:
                n = len(live.open_findings())
                line.append(f"  {n} open, worst {worst.value}", STYLE[worst.value])
            parts.append(line)
            table = Table(show_header=False, box=None, padding=(0, 2))
            for m in DASHBOARD:
                if m in live.last_values:
                    h = list(self.history.get((live.name, m), []))
                    table.add_row(m, _num(live.last_values[m]), sparkline(h))
            parts.append(table)
        if self.events:
            parts.append(Text("events (newest first)", "bold"))
            for e in self.events:
                when = time.strftime("%H:%M:%S", time.localtime(e.time))
                t = Text(f"{when} ")
                t.append(terminal(e.line()), STYLE.get(e.severity or "", ""))
                parts.append(t)
        return Group(*parts)
