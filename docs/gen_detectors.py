"""Regenerate docs/detectors/<name>.md from each detector module (run from the repository
root: ``python docs/gen_detectors.py [name ...]``).

A page is the module's own text. The docstring's first paragraph is the title; the
paragraphs at the left margin before the first section are the introduction; each
section — a line at the left margin with an indented body right under it (What it flags,
Why it matters, Default thresholds, Known false positives, Example, and others such as
Measured) — becomes a ``##`` heading, in the docstring's order; bodies are Markdown. Then
the codes table from ``CODES`` and the parameters table from ``Params``: each field's
default and the ``#:`` comment above it. tests/test_detector_registry.py checks that the
committed pages equal this output.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import textwrap
from pathlib import Path
from types import ModuleType

if __name__ == "__main__":  # run as a script from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainlens.detectors import available, load

OUT = Path(__file__).with_name("detectors")


def _sections(doc: str) -> tuple[str, str, list[tuple[str, str]]]:
    """(title, introduction, [(heading, body)]) of a detector module's docstring."""
    lines = inspect.cleandoc(doc).splitlines()
    n = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
    title = " ".join(line.strip() for line in lines[:n])  # the first paragraph
    intro: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    rest = lines[n:]
    for i, line in enumerate(rest):
        # a heading: at the left margin, with an indented line right under it
        below = rest[i + 1] if i + 1 < len(rest) else ""
        if line and not line[0].isspace() and below[:1].isspace() and below.strip():
            sections.append((line.strip(), []))
        elif sections:
            sections[-1][1].append(line)
        else:
            intro.append(line)
    out = [(head, textwrap.dedent("\n".join(body)).strip()) for head, body in sections]
    return title, "\n".join(intro).strip(), out


def _param_comments(params: type) -> dict[str, str]:
    """Each field's ``#:`` comment (several lines joined), from the class source."""
    src = textwrap.dedent(inspect.getsource(params))
    lines = src.splitlines()
    out: dict[str, str] = {}
    for node in ast.parse(src).body[0].body:  # type: ignore[attr-defined]
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        words: list[str] = []
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#:"):
            words.insert(0, lines[i].strip()[2:].strip())
            i -= 1
        out[node.target.id] = " ".join(words)
    return out


def _default(f: dataclasses.Field[object]) -> str:
    if f.default is not dataclasses.MISSING:
        value: object = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    return f"`{value!r}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(name: str, module: ModuleType | None = None) -> str:
    module = module or load(name)
    title, intro, sections = _sections(module.__doc__ or "")
    codes = ", ".join(module.CODES)
    lines = [
        f"# {name} — {title.rstrip('.')}",
        "",
        f"Module: `trainlens/detectors/{name}.py` · codes {codes} · "
        f"cases: `tests/detector_cases/{name}.yml`",
        "",
    ]
    if intro:
        lines += [intro, ""]
    lines += ["| code | name |", "|---|---|"]
    lines += [f"| `{code}` | `{cname}` |" for code, cname in module.CODES.items()]
    for head, body in sections:
        lines += ["", f"## {head}", "", body]
    comments = _param_comments(module.Params)
    lines += [
        "",
        "## Parameters",
        "",
        f"Set under `[tool.trainlens.detectors.{name}]`.",
        "",
        "| parameter | default | meaning |",
        "|---|---|---|",
    ]
    for f in dataclasses.fields(module.Params):
        lines.append(f"| `{f.name}` | {_default(f)} | {_cell(comments.get(f.name, ''))} |")
    lines += ["", "This page is generated from the module: `python docs/gen_detectors.py`."]
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    """File name -> generated text, for every detector."""
    return {f"{name}.md": render(name) for name in available()}


if __name__ == "__main__":
    names = sys.argv[1:]  # optionally only these detectors
    for file, text in pages().items():
        if not names or file.removesuffix(".md") in names:
            (OUT / file).write_text(text, encoding="utf-8")
