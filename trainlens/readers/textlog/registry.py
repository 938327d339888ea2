"""Every line shape textlog reads, in the order their values are read: the built-in
shapes (:mod:`.shapes`), then the frameworks' (:mod:`.frameworks`)."""

from __future__ import annotations

from trainlens.readers.textlog import frameworks, shapes

SHAPES: tuple[shapes.Shape, ...] = (*shapes.SHAPES, *frameworks.SHAPES)
