"""Whether a text log says, before its first training step, that the job restored a
training checkpoint (issue 26): a run that continues an earlier one, whose loss may
start at the level the earlier one reached and stay there.

What counts is the trainer's word that it restored *training* state, not that it loaded
weights: OLMo's ``Restoring RNG states...``, HF Trainer's ``Continuing training from
checkpoint, will skip to saved global_step``, Lightning's ``Restoring states from the
checkpoint path at …``, MMEngine's ``Auto resumed from the latest checkpoint``, a
``Resuming training from …``. Loading a pretrained model (``Loading checkpoint shards``,
``load_from``) starts a fine-tune, whose loss must fall: it is no such line. Nor is a
configuration's ``resume: true`` / ``resume_from_checkpoint=None``.

The line (``line N: `text```) is put in ``run.metadata["restored_checkpoint"]``; the
detectors' start of a run (:func:`trainlens.detectors._start.resumed_reason`) reads it.
"""

from __future__ import annotations

import re
from pathlib import Path

#: the metadata key
KEY = "restored_checkpoint"
#: how much of a file's start is looked at: the set-up before the first step
HEAD_BYTES = 1 << 20

_RESTORED = re.compile(
    rb"(?im)^[^\n]*?(?P<what>"
    rb"\brestor(?:ing|ed)\b[^\n]*?"
    rb"\b(?:checkpoint|rng states?|optimizer|trainer state|training state)"
    rb"|\bresum(?:ing|ed)\b[^\n]*?\b(?:from|training|checkpoint)\b"
    rb"|\bcontinu(?:ing|ed) training from (?:a |the )?checkpoint"
    rb")[^\n]*"
)
#: a line that merely shows a setting (`resume: True`, `resume_from_checkpoint=None`)
_SETTING = re.compile(rb"[=:]\s*(?:true|false|none|null)\b|\bresume\w*\s*[=:]", re.I)


def restored_before(path: Path, first_line: int) -> str | None:
    """``line N: `text``` of the first restore line before line ``first_line`` (the
    first the reader took a training value from), or None."""
    try:
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None
    return restored_in(head, first_line)


def restored_in(head: bytes, first_line: int) -> str | None:
    end = -1
    for _ in range(first_line - 1):  # (the offset where line ``first_line`` starts)
        end = head.find(b"\n", end + 1)
        if end < 0:
            return None  # (the set-up is longer than the head: not looked at)
    before = head[: end + 1]
    for m in _RESTORED.finditer(before):
        text = m.group(0)
        if _SETTING.search(text):
            continue
        line = before.count(b"\n", 0, m.start()) + 1
        said = text[m.start("what") - m.start() :].decode("utf-8", errors="replace")
        return f"line {line}: `{' '.join(said.split())[:120]}`"
    return None
