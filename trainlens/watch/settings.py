"""``[tool.trainlens.watch]``: the watch's settings, validated like every other section.

Precedence as everywhere: defaults < the config file < flags (the CLI passes its flags to
:meth:`WatchSettings.with_flags`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainlens.core.dataclass import dataclass, field
from trainlens.core.errors import ConfigError, UsageError, did_you_mean

EXIT_LEVELS = ("info", "warning", "error")

#: Every key of ``[tool.trainlens.watch]`` and what it means (the docs list this table).
WATCH_KEYS = {
    "poll": "seconds between polls instead of file events (network filesystems); 0: events",
    "notify": "notification URLs (apprise: slack://, discord://, ntfys://, json://, mailto://...)",
    "rate_limit": "seconds: at most one notification per this interval per target (default 60)",
    "notify_level": "the lowest severity sent to --notify and --exec (default warning)",
    "exit_on": "end the watch with exit 1 at the first finding at or above: warning or error",
    "exec": "a command run once per announced finding, the finding in its environment",
    "prometheus": "HOST:PORT to serve /metrics on",
    "prometheus_tensors": "per-tensor series exported per family and run (8; 0: none)",
    "stall_factor": "a run is stalled after its usual gap between records x this (default 10)",
    "min_stall_seconds": "... and at least this many seconds (default 30)",
    "judge_budget": "share of one core the re-judging may take on average (default 0.03)",
    "hold_steps": "an incident opens (closes) once shown (not shown) for this many steps (100)",
    "hold_seconds": "... or for this many seconds, whichever comes first (default 120)",
}


@dataclass
class WatchSettings:
    poll: float = 0.0
    notify: list[str] = field(default_factory=list)
    rate_limit: float = 60.0
    notify_level: str = "warning"
    exit_on: str | None = None
    exec: str | None = None
    prometheus: str | None = None
    # 8 of each per-tensor family (grad_norm/, update_ratio/): 16 series a run, where the
    # fixture runs' 4-layer model logs 58 and a large model hundreds (docs/watch.md)
    prometheus_tensors: int = 8
    stall_factor: float = 10.0
    min_stall_seconds: float = 30.0
    judge_budget: float = 0.03
    # The hold (docs/watch.md, "One alarm per incident"): replaying the fixture runs as a
    # watch judges them, the warnings that opened and closed again (TPUT001 on
    # nan_divergence, slow_loader, shock_then_slow; LOSS003 on slow_loader) lived 10-82
    # steps; 100 steps outlasts them all. 120 s caps the wait on a slow run (a step a
    # second); the throughput alert rule waits 10 min anyway. Errors and non-finite
    # values are not held: they open at once.
    hold_steps: float = 100.0
    hold_seconds: float = 120.0

    @classmethod
    def from_table(cls, table: dict[str, Any], *, origin: str = "config") -> WatchSettings:
        where = f"{origin}: [tool.trainlens.watch]"
        out = cls()
        for key, value in table.items():
            if key not in WATCH_KEYS:
                raise ConfigError(f"{where}: unknown key {key!r}{did_you_mean(key, WATCH_KEYS)}")
            setattr(out, key, _checked(key, value, where))
        return out

    def with_flags(self, **flags: Any) -> WatchSettings:
        """These settings with every flag that was given (not None) in place, checked."""
        given = {k: _flag_checked(k, v) for k, v in flags.items() if v is not None}
        if "notify" in given:  # --notify adds to the configured targets
            given["notify"] = [*self.notify, *(u for u in given["notify"] if u not in self.notify)]
        return dataclasses.replace(self, **given)


def _flag_checked(key: str, value: Any) -> Any:
    """:func:`_checked` for a flag, the message naming the flag as typed (``--exit-on``),
    not the config key (it said "flag: 'exit_on' must be ...")."""
    try:
        return _checked(key, value, "flag")
    except ConfigError as exc:
        flag = "--" + key.replace("_", "-")
        text = str(exc).replace(f"flag: {key!r}", flag, 1)
        if text.startswith("flag: "):
            text = f"{flag}: {text.removeprefix('flag: ')}"
        raise UsageError(text) from None


def _checked(key: str, value: Any, where: str) -> Any:
    if key in {
        "poll",
        "rate_limit",
        "stall_factor",
        "min_stall_seconds",
        "judge_budget",
        "hold_steps",
        "hold_seconds",
    }:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{where}: {key!r} must be a number of at least 0, not {value!r}")
        if key == "judge_budget" and not 0 < value <= 1:
            raise ConfigError(f"{where}: 'judge_budget' must be in (0, 1], not {value!r}")
        return float(value)
    if key == "notify":
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where}: 'notify' must be a list of URLs")
        return list(value)
    if key == "notify_level":
        if not isinstance(value, str) or value.lower() not in EXIT_LEVELS:
            raise ConfigError(
                f"{where}: 'notify_level' must be one of {', '.join(EXIT_LEVELS)}, not {value!r}"
            )
        return value.lower()
    if key == "exit_on":
        if not isinstance(value, str) or value.lower() not in (*EXIT_LEVELS, "none"):
            raise ConfigError(
                f"{where}: 'exit_on' must be one of {', '.join(EXIT_LEVELS)} or none, not {value!r}"
            )
        return None if value.lower() == "none" else value.lower()
    if key == "prometheus_tensors":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(
                f"{where}: 'prometheus_tensors' must be a whole number of at least 0, not {value!r}"
            )
        return value
    if key == "prometheus":
        if not isinstance(value, str):
            raise ConfigError(f"{where}: 'prometheus' must be HOST:PORT, not {value!r}")
        parse_host_port(value, where)
        return value
    if key == "exec":
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}: 'exec' must be a command line")
        return value
    raise AssertionError(key)  # every WATCH_KEYS key has a branch


def parse_host_port(text: str, where: str = "--prometheus") -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT`` / ``PORT`` for all interfaces' localhost default)."""
    host, _, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise ConfigError(f"{where}: {text!r} is not HOST:PORT (e.g. 127.0.0.1:9108)")
    return (host.strip("[]") or "127.0.0.1"), number
