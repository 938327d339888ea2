"""The watch loop: find sources, read what they gained, judge when due, announce.

One tick: new sources are found (a folder's runs appear while watching), each follower is
polled, each run with new data is judged when its duty cycle allows, stalls are checked,
the sinks get the events and the state. Between ticks the loop waits for a file event
(watchfiles: inotify, FSEvents, ReadDirectoryChangesW) or, with ``poll``, for that many
seconds (network filesystems, where file events do not arrive). It wakes at least every
``TICK`` seconds so stalls and deferred judging are seen without file events.

When the watch ends (Ctrl-C, ``until_idle``, ``once``, ``exit_on``), every run with data
not yet judged is judged once more: a watch of a finished file ends with the findings
``trainlens analyze`` gives.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainlens.core.config import Config
from trainlens.core.dataclass import dataclass, field
from trainlens.core.findings import Severity, fail_rank
from trainlens.core.runstate import STATES
from trainlens.readers import ReadOptions
from trainlens.watch.discovery import Discovery
from trainlens.watch.events import WatchEvent
from trainlens.watch.incidents import Hold, IncidentTracker
from trainlens.watch.live import JudgeTiming, LiveRun
from trainlens.watch.settings import WatchSettings

if TYPE_CHECKING:
    from trainlens.gate.discover import Skipped

#: Longest wait between two ticks (seconds): stalls and deferred judging are checked then.
TICK = 0.5
#: Shortest time between two ticks (seconds): file events that come faster (a writer that
#: flushes every step, 100 times a second) are read together. Each poll of a source costs
#: a read call's fixed overhead (~1-2 ms of CPU); at 100 flushes/s that alone would be
#: 10-20 % of a core, at 2 ticks/s about 2 %, for at most 0.5 s more latency.
MIN_TICK = 0.5
#: How often folders are walked for new runs without a file event (seconds).
DISCOVER_EVERY = 2.0
#: The events ``exit_on`` looks at: an incident that opened or rose, as the notifiers (so a
#: held-back warning that flapped never ends the watch).
EXIT_EVENTS = ("incident-opened", "incident-changed")


@dataclass
class WatchState:
    """What the sinks' periodic ``update`` sees."""

    runs: list[LiveRun] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    events: int = 0


def watch(
    paths: Sequence[Path],
    *,
    config: Config,
    settings: WatchSettings,
    sink: Any,
    format: str | None = None,
    options: ReadOptions | None = None,
    once: bool = False,
    until_idle: float | None = None,
    stop: threading.Event | None = None,
    on_waiting: Callable[[Path], None] | None = None,
) -> int:
    """Watch ``paths`` until stopped; return the exit code: 1 when ``settings.exit_on``
    was reached, else 0. ``once``: read what is there, judge, announce, end.
    ``until_idle``: end when no source grew for that many seconds. A path that does not
    exist yet is looked for at every tick until it appears (a watch started before its
    job; :func:`trainlens.watch.discovery.awaited` says which may be waited for), and
    ``on_waiting`` is told of it once, when the watch is ready (Ctrl-C from then on ends
    the watch as usual)."""
    from trainlens.gate.rules import parse_rules
    from trainlens.gate.runner import GateJob

    job = GateJob(cfg=config, rules=parse_rules(config), fail_rank=fail_rank("error"))
    discovery = Discovery(paths, format=format, options=options or ReadOptions())
    state = WatchState()
    stop = stop or threading.Event()
    exit_rank = fail_rank(settings.exit_on) if settings.exit_on else None
    code = 0
    last_growth = time.monotonic()
    last_discover = -float("inf")

    def announce(events: list[WatchEvent]) -> None:
        nonlocal code
        for e in events:
            state.events += 1
            sink.emit(e)
            if (
                exit_rank is not None
                and e.kind in EXIT_EVENTS
                and e.severity is not None
                and Severity.parse(e.severity).rank >= exit_rank
            ):
                code = 1

    waits = _waiter(paths, settings.poll, stop)
    try:
        for path in paths:
            if on_waiting is not None and not path.exists():
                on_waiting(path)
        while True:
            now = time.monotonic()
            if now - last_discover >= DISCOVER_EVERY or not state.runs:
                last_discover = now
                for follower in discovery.poll():
                    live = LiveRun(
                        follower,
                        job,
                        timing=JudgeTiming(budget=settings.judge_budget),
                        stall_factor=settings.stall_factor,
                        min_stall_seconds=settings.min_stall_seconds,
                        incidents=IncidentTracker(Hold(settings.hold_steps, settings.hold_seconds)),
                    )
                    state.runs.append(live)
                    announce([live.event("run-appeared", f"following {follower.format} run")])
                announce([_skipped_event(s) for s in discovery.new_skipped()])
            for live in state.runs:
                chunk = live.follower.poll(final=once)
                if chunk is not None:
                    if chunk.frame.height:
                        last_growth = time.monotonic()
                    announce(live.add(chunk))
                announce(live.read_error())
            for live in state.runs:
                end_before = live.end
                announce(live.check_end())
                # a run that just ended goes no further: judged now, nothing held back
                settle = live.end is not None and live.end != end_before
                announce(live.judge(force=once or settle, final=once or settle))
                if not once:
                    announce(live.check_stall())
            sink.update(state)
            if code or once or stop.is_set():
                break
            if until_idle is not None and time.monotonic() - last_growth >= until_idle:
                break
            if next(waits, StopIteration) is StopIteration:
                break
            rest = MIN_TICK - (time.monotonic() - now)
            if rest > 0 and stop.wait(rest):
                break
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        for live in state.runs:  # a last line without its line end counts now
            chunk = live.follower.poll(final=True)
            if chunk is not None:
                announce(live.add(chunk))
        # what arrived since the last judging is judged once more, and what is held back or
        # about to close is settled: the watch ends with what ``analyze`` would say
        for live in state.runs:
            if live.dirty or live.incidents.unsettled:
                announce(live.judge(force=True, final=True))
        ended = WatchEvent("watch-ended", "", "", time.time(), None, _ended_text(state, code))
        sink.emit(ended)
        sink.update(state)
    return code


def _skipped_event(skipped: Skipped) -> WatchEvent:
    """A FIFO (socket, device) in a watched folder: said once, never opened."""
    name = Path(skipped.path).name
    return WatchEvent(
        "read-issue", name, skipped.path, time.time(), None, skipped.text(), severity="info"
    )


def _ended_text(state: WatchState, code: int) -> str:
    n = len(state.runs)
    open_ = sum(len(r.open_findings()) for r in state.runs)
    incidents = sum(len(r.incidents.open) for r in state.runs)
    why = "exit-on level reached" if code else "stopped"
    states = Counter(r.state for r in state.runs)
    shown = ", ".join(f"{states[s]} {s}" for s in STATES if states[s])
    return (
        f"{why}: {n} run{'s' if n != 1 else ''} watched{f' ({shown})' if shown else ''}, "
        f"{incidents} incident(s) open ({open_} finding(s))"
    )


def _waiter(paths: Sequence[Path], poll: float, stop: threading.Event) -> Iterator[None]:
    """Yields after each file change under ``paths`` or after TICK seconds; with ``poll``
    (or without watchfiles installed) after ``poll`` (or TICK) seconds."""
    if poll > 0:
        return _sleeper(poll, stop)
    try:
        import watchfiles
    except ImportError:
        return _sleeper(TICK, stop)
    roots = sorted({str(p if p.is_dir() else p.parent) for p in paths})
    changes = watchfiles.watch(
        *roots,
        stop_event=stop,
        rust_timeout=int(TICK * 1000),
        yield_on_timeout=True,
        debounce=50,  # its default (1.6 s) alone would break the 2 s announcement target
        step=20,
        raise_interrupt=True,
        ignore_permission_denied=True,
    )
    return (None for _ in changes)


def _sleeper(seconds: float, stop: threading.Event) -> Iterator[None]:
    while not stop.wait(seconds):
        yield None
    yield None
