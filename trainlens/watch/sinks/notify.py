"""Notifications (``--notify URL``) and a command per finding (``--exec CMD``).

Notifications go through apprise, which speaks Slack, Discord, Teams, ntfy, email, plain
JSON webhooks and a hundred more from one URL each (``slack://…``, ``ntfys://topic``,
``json://host/path``); trainlens contacts only the URLs the user gave. Each finding is
one message; per target at most one message per ``rate_limit`` seconds — what comes
within the window is held and sent as one digest when the window opens (and at the end of
the watch), so a run that opens twenty findings at once is one message, not twenty.
Sending happens on a worker thread: a slow or failing endpoint never holds up the watch,
and a failure is reported (a ``notify-failed`` event) and never stops it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from trainlens.core.dataclass import dataclass, field
from trainlens.core.findings import Severity
from trainlens.core.sanitize import terminal, terminal_lines
from trainlens.watch.events import WatchEvent

#: The events worth telling a person about: incidents, not their findings (one NaN that
#: reaches 21 series is one incident, one page), early warnings, stalls and ends (a crash
#: is an error; a finish is info, sent at ``notify_level = "info"``; a closed incident or
#: a read note is not).
ALERT_EVENTS = (
    "incident-opened",
    "incident-changed",
    "early-warning",
    "run-stalled",
    "run-crashed",
    "run-finished",
)


def worth_alerting(event: WatchEvent, level: str) -> bool:
    """An alert event at or above ``level``; a finding that changed only if it got worse."""
    if event.kind not in ALERT_EVENTS or event.severity is None:
        return False
    if event.details.get("acknowledged"):  # the gate's acknowledge table covers it
        return False
    if event.kind == "incident-changed" and event.change != "severity-up":
        return False
    return Severity.parse(event.severity).rank >= Severity.parse(level).rank


def redacted(url: str) -> str:
    """A target as it may be shown: scheme and host, never the tokens in its path."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}" + ("/…" if parts.path.strip("/") or parts.query else "")


def message_of(events: list[WatchEvent]) -> tuple[str, str, str]:
    """(title, body, worst severity) of one message for one or more events. Run names and
    messages come from the input: each line of the message is one plain-text line (no
    control codes for a chat client or a mail reader to act on, no forged lines)."""
    worst = max((Severity.parse(e.severity or "info") for e in events), key=lambda s: s.rank)
    first = events[0]
    if len(events) == 1:
        code = f"{first.code} " if first.code else ""
        title = f"trainlens: {first.severity} {code}in {first.run}"
        step = f" (last step {first.step})" if first.step is not None else ""
        return terminal(title), terminal(f"{first.message}{step}"), worst.value
    runs = sorted({e.run for e in events})
    title = f"trainlens: {len(events)} alerts in {', '.join(runs)}"
    lines = [f"- {e.severity} {e.code or e.kind} {e.run}: {e.message}" for e in events]
    return terminal(title), terminal_lines(lines), worst.value


@dataclass
class _Target:
    url: str
    last_sent: float = -float("inf")
    pending: list[WatchEvent] = field(default_factory=list)


class NotifySink:
    """Sends alert events to apprise URLs, rate-limited per target (see the module doc)."""

    def __init__(self, urls: list[str], *, rate_limit: float, level: str = "warning") -> None:
        import apprise  # the watch extra

        self.level = level
        self.rate_limit = rate_limit
        self.targets = [_Target(u) for u in urls]
        self.failures: list[str] = []
        self.sent = 0
        self._apprise: dict[str, Any] = {}
        for url in urls:
            a = apprise.Apprise()
            if not a.add(url):
                from trainlens.core.errors import UsageError

                raise UsageError(f"--notify: {redacted(url)} is not a URL apprise knows")
            self._apprise[url] = a
        self._jobs: queue.Queue[tuple[str, str, str, str] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._worker = threading.Thread(target=self._run, name="trainlens-notify", daemon=True)
        self._worker.start()

    def emit(self, event: WatchEvent) -> None:
        if not worth_alerting(event, self.level):
            return
        for t in self.targets:
            t.pending.append(event)
        self._flush(time.monotonic())

    def update(self, state: Any) -> None:
        self._flush(time.monotonic())

    def close(self) -> None:
        self._flush(time.monotonic(), force=True)
        self._jobs.put(None)
        self._worker.join(timeout=30)

    def drain_failures(self) -> list[str]:
        with self._lock:
            out, self.failures = self.failures, []
        return out

    def _flush(self, now: float, *, force: bool = False) -> None:
        for t in self.targets:
            if t.pending and (force or now - t.last_sent >= self.rate_limit):
                title, body, sev = message_of(t.pending)
                t.pending, t.last_sent = [], now
                self._jobs.put((t.url, title, body, sev))

    def _run(self) -> None:
        import apprise

        types = {
            "info": apprise.NotifyType.INFO,
            "warning": apprise.NotifyType.WARNING,
            "error": apprise.NotifyType.FAILURE,
        }
        while (job := self._jobs.get()) is not None:
            url, title, body, sev = job
            try:
                ok = self._apprise[url].notify(body=body, title=title, notify_type=types[sev])
                why = "" if ok else "the endpoint did not accept it"
            except Exception as exc:
                ok, why = False, f"{type(exc).__name__}: {exc}"
            with self._lock:
                if ok:
                    self.sent += 1
                else:
                    self.failures.append(f"notification to {redacted(url)} failed: {why}")


class ExecSink:
    """Runs ``command`` (through the shell, as the user wrote it) once per alert event —
    once per incident, then once per rise of its severity — with the event in its
    environment: TRAINLENS_EVENT, TRAINLENS_RUN, TRAINLENS_SOURCE, TRAINLENS_CODE (the
    headline code), TRAINLENS_SEVERITY, TRAINLENS_STEP (an incident's onset; else the last
    step read), TRAINLENS_INCIDENT (its id), TRAINLENS_CODES (its members' codes, comma
    separated), TRAINLENS_MESSAGE and TRAINLENS_EVENT_JSON (the ``--json`` object). The
    watch does not wait for it; a command that cannot start or exits non-zero is
    reported."""

    def __init__(self, command: str, *, level: str = "warning") -> None:
        self.command = command
        self.level = level
        self.running: list[tuple[subprocess.Popen[bytes], str]] = []
        self.failures: list[str] = []

    def emit(self, event: WatchEvent) -> None:
        if not worth_alerting(event, self.level):
            return
        import json

        from trainlens.formatters.json import json_safe

        env = dict(os.environ)
        # values, never code: the shell does not expand a variable's value, so the input
        # cannot inject a command; ``terminal`` keeps them printable when the command echoes
        # them, and a NUL or a lone surrogate would stop Popen altogether (ValueError,
        # UnicodeEncodeError). The JSON is ASCII (json.dumps escapes the rest).
        incident = event.details.get("incident") or {}
        step = incident.get("onset", event.step) if incident else event.step
        env.update(
            TRAINLENS_INCIDENT=terminal(incident.get("id", "")),
            TRAINLENS_CODES=terminal(",".join(event.details.get("codes") or [])),
        )
        env.update(
            TRAINLENS_EVENT=event.kind,
            TRAINLENS_RUN=terminal(event.run),
            TRAINLENS_SOURCE=terminal(event.source),
            TRAINLENS_CODE=terminal(event.code or ""),
            TRAINLENS_SEVERITY=event.severity or "",
            TRAINLENS_STEP="" if step is None else str(step),
            TRAINLENS_MESSAGE=terminal(event.message),
            TRAINLENS_EVENT_JSON=json.dumps(json_safe(event.to_dict()), allow_nan=False),
        )
        what = terminal(f"{event.code or event.kind} in {event.run}")
        try:
            proc = subprocess.Popen(self.command, shell=True, env=env, stdin=subprocess.DEVNULL)
        except OSError as exc:
            self.failures.append(f"--exec for {what} could not start: {exc}")
            return
        self.running.append((proc, what))

    def update(self, state: Any) -> None:
        still = []
        for proc, what in self.running:
            code = proc.poll()
            if code is None:
                still.append((proc, what))
            elif code != 0:
                self.failures.append(f"--exec for {what} exited with {code}")
        self.running = still

    def close(self) -> None:
        deadline = time.monotonic() + 10
        for proc, _ in self.running:
            with contextlib.suppress(subprocess.TimeoutExpired):  # it goes on; the watch ends
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        self.update(None)

    def drain_failures(self) -> list[str]:
        out, self.failures = self.failures, []
        return out
