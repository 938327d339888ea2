"""Every line shape textlog reads, in the order their values are read: the built-in
shapes (:mod:`.shapes`), then the frameworks' (:mod:`.frameworks`)."""

from __future__ import annotations

import functools
import re

from trainlens.readers.textlog import frameworks, shapes

SHAPES: tuple[shapes.Shape, ...] = (*shapes.SHAPES, *frameworks.SHAPES)


@functools.cache
def training_lines() -> re.Pattern[bytes]:
    """A line of a training step of any shape (its cheap hint; not an evaluation's result,
    which follows the steps): where the run's log last trained."""
    hints = [s.hint or s.line for s in SHAPES if not s.follows and s.sniff != "" and not s.stepless]
    return re.compile("|".join(f"(?:{h})" for h in hints).encode(), re.M)
