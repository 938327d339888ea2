"""The live terminal view (a TTY without ``--json``), drawn with rich.

Per run: its state (running, finished, crashed, stalled: docs/watch.md), the last step,
the steps/s it is making, the time since its last record (red once the run counts as
stalled), its open incidents (severity, headline, age), and the last
value of each metric of the minimum dashboard with a sparkline of its recent values (one
point per refresh); below, the latest events, newest first. Redrawn at most four times a
second.
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
STATE_STYLE = {"finished": "green", "crashed": "bold red", "stalled": "bold red", "running": "dim"}


def state_text(live: Any) -> str:
    """``running``, ``stalled``, ``finished``, ``crashed (RuntimeError)``: the error type
    comes from the input, made printable."""
    state = str(getattr(live, "state", "running"))
    end = getattr(live, "end", None)
    if end is not None and end.error:
        state += f" ({terminal(end.error)})"
    return state


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


def age_text(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``: how long an incident has been shown."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def incident_lines(live: Any, now: float) -> list[Any]:
    """One line per open incident of ``live``, worst first then oldest: severity, headline
    code, headline, age (since it was first shown). The headline is from the input (metric
    names): made one printable line, as everywhere on the terminal."""
    from rich.text import Text

    tracker = getattr(live, "incidents", None)
    opened = list(tracker.open.values()) if tracker is not None else []
    opened.sort(key=lambda o: (-o.severity.rank, o.opened_at))
    out = []
    for oi in opened:
        code = oi.last.incident.code if oi.last is not None else oi.members[0].code
        head = oi.last.incident.headline() if oi.last is not None else oi.members[0].message
        t = Text("  ")
        t.append(f"{oi.severity.value.upper():<7} {code:<8}", STYLE[oi.severity.value])
        t.append(f" {terminal(head)}")
        t.append(f"  {age_text(now - oi.opened_at)}", "dim")
        out.append(t)
    return out


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
            line.append(f"  {state_text(live)}", STATE_STYLE.get(getattr(live, "state", ""), ""))
            line.append(f"  step {live.last_step if live.last_step is not None else '—'}")
            line.append(f"  {_num(rate)} steps/s" if rate is not None else "  — steps/s")
            if since is not None:
                line.append(
                    f"  last record {since:.0f}s ago", "bold red" if live.stalled else "dim"
                )
            parts.append(line)
            parts.extend(incident_lines(live, time.time()))
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
