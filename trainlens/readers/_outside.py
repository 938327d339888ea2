"""The note a reader leaves for a link it did not follow (one leading out of the folder
that holds it, or to a special file): the rule is :func:`trainlens.core.paths.confine`'s."""

from __future__ import annotations

from pathlib import Path

from trainlens.core.paths import link_leads_out
from trainlens.core.run import DataIssue


def outside_note(path: str | Path, why: str, scope: str) -> DataIssue:
    """``scope``: what is read and where ("a run's files are read inside its folder")."""
    return DataIssue(kind="outside-path", source=str(path), message=f"{why}; not read ({scope})")


def links_out(folder: Path, pattern: str) -> list[tuple[Path, str]]:
    """(link, why) for each entry of ``folder`` matching ``pattern`` that is a link leading
    out of it."""
    try:
        links = [p for p in sorted(folder.glob(pattern)) if p.is_symlink()]
    except OSError:
        return []
    return [(p, why) for p in links if (why := link_leads_out(folder, p)) is not None]
