"""Where the watch's events go: the terminal (a live view on a TTY, plain lines or JSON
otherwise), notifications, a command per finding, and a Prometheus endpoint."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from trainlens.watch.events import WatchEvent


class Fanout:
    """Every sink gets every event; one that raises is reported by the others and the watch
    goes on (a sink should not raise; this is the last guard)."""

    def __init__(self, sinks: list[Any]) -> None:
        self.sinks = sinks

    def emit(self, event: WatchEvent) -> None:
        for sink in self.sinks:
            try:
                sink.emit(event)
            except Exception as exc:
                self._failed(sink, event, exc)

    def update(self, state: Any) -> None:
        for sink in self.sinks:
            try:
                sink.update(state)
            except Exception as exc:
                self._failed(sink, None, exc)
        self._report_failures()

    def _report_failures(self) -> None:
        """Notifiers and --exec report their failures here (they run off the loop)."""
        for sink in self.sinks:
            drain = getattr(sink, "drain_failures", None)
            for text in drain() if drain else []:
                note = WatchEvent(
                    "notify-failed", "", "", time.time(), None, text, severity="warning"
                )
                for other in self.sinks:
                    if other is not sink:
                        with contextlib.suppress(Exception):
                            other.emit(note)

    def close(self) -> None:
        for sink in self.sinks:
            with contextlib.suppress(Exception):  # closing is best effort at exit
                sink.close()
        self._report_failures()

    def _failed(self, sink: Any, event: WatchEvent | None, exc: Exception) -> None:
        note = WatchEvent(
            "notify-failed",
            event.run if event else "",
            event.source if event else "",
            event.time if event else 0.0,
            event.step if event else None,
            f"{type(sink).__name__} failed: {exc}",
            severity="warning",
        )
        for other in self.sinks:
            if other is not sink:
                with contextlib.suppress(Exception):
                    other.emit(note)


def build_sink(settings: Any, *, json: bool, tty: bool) -> Fanout:
    """The sinks the settings ask for: the terminal (JSON lines with ``json``; the live view
    on a terminal when rich is installed; plain lines otherwise), then Prometheus,
    notifications and ``--exec``. An output whose package is missing is a usage error that
    says which extra to install."""
    from trainlens.watch.sinks.lines import JsonSink, LineSink

    sinks: list[Any] = []
    if json:
        sinks.append(JsonSink())
    elif tty and _installed("rich"):
        from trainlens.watch.sinks.view import LiveView

        sinks.append(LiveView())
    else:
        sinks.append(LineSink())
    if settings.prometheus:
        _need("prometheus_client", "--prometheus")
        from trainlens.watch.sinks.prometheus import PrometheusSink

        sinks.append(PrometheusSink(settings.prometheus, tensors=settings.prometheus_tensors))
    if settings.notify:
        _need("apprise", "--notify")
        from trainlens.watch.sinks.notify import NotifySink

        sinks.append(
            NotifySink(settings.notify, rate_limit=settings.rate_limit, level=settings.notify_level)
        )
    if settings.exec:
        from trainlens.watch.sinks.notify import ExecSink

        sinks.append(ExecSink(settings.exec, level=settings.notify_level))
    return Fanout(sinks)


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _need(module: str, option: str) -> None:
    if not _installed(module):
        from trainlens.core.errors import UsageError

        raise UsageError(f"{option} needs the {module} package: pip install 'trainlens[watch]'")
