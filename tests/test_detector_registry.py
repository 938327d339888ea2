"""The detector registry: discovery, listing order, and finding codes (one owner each)."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import DOCS
from trainlens import detectors
from trainlens.core.codes import GATE_CODES
from trainlens.detectors import FAMILIES, available, family, listing_key, load, module_names
from trainlens.gate.codes import CHECK_CODES

DETECTORS_DIR = Path(detectors.__file__).parent
CODE = re.compile(r"[A-Z]+\d{3}")


def test_every_public_module_is_a_detector_and_no_private_one_is() -> None:
    """A public module that misses the contract is a helper that lost its ``_`` (it would
    be silently skipped); a private module is never run, whatever it defines."""
    names = available()
    assert names, "no detector discovered"
    assert all(not n.startswith("_") and n != "base" for n in names)
    assert set(names) == set(module_names())
    on_disk = {p.stem for p in DETECTORS_DIR.glob("*.py")} | {
        p.parent.name for p in DETECTORS_DIR.glob("*/__init__.py")
    }
    private = {n for n in on_disk if n.startswith("_") and n != "__init__"}
    assert private, "expected private helper modules (e.g. _causes) in trainlens/detectors"
    assert not private & set(names)


def test_listing_order_is_family_then_code() -> None:
    names = available()
    keys = [listing_key(load(n).CODES) for n in names]
    assert keys == sorted(keys)
    # the order the findings were listed in before discovery replaced the hand-kept tuple
    assert names[:2] == ["nonfinite", "lr_schedule"]
    assert names.index("restarts") < names.index("stalls") < names.index("data_path")


def _detector_codes() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in available():
        for code in load(name).CODES:
            out.setdefault(code, []).append(name)
    return out


def test_finding_codes_are_unique_across_detectors_and_the_gate() -> None:
    owners = _detector_codes()
    twice = {c: o for c, o in owners.items() if len(o) > 1}
    assert not twice, f"codes declared by more than one detector: {twice}"
    both = sorted(set(owners) & set(GATE_CODES))
    assert not both, f"codes declared by a detector and by the gate: {both}"
    # every gate check raises a gate code, and the gate declares no code it never raises
    # (the reference checks' REF codes are raised per curve: trainlens/gate/reference.py)
    from trainlens.gate.reference import REF_CODES

    assert set(CHECK_CODES.values()) | set(REF_CODES) == set(GATE_CODES)
    assert all(GATE_CODES[c] == n for c, n in REF_CODES.items())


def test_every_code_is_spelled_and_its_family_listed() -> None:
    for code in [*_detector_codes(), *GATE_CODES]:
        assert family(code) in FAMILIES, f"{code}: family not in detectors.FAMILIES"
    with pytest.raises(ValueError, match="family prefix"):
        family("GRAD01")


def _code_literals(path: Path) -> set[str]:
    """String constants spelled like a finding code (docstrings are prose: not counted)."""
    tree = ast.parse(path.read_text("utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and CODE.fullmatch(node.value)
    }


def test_every_code_a_detector_module_spells_is_declared() -> None:
    """A detector can only emit what it declares in CODES (``select``, ``ignore``,
    ``[tool.trainlens.severity]`` and the docs all go by CODES). A private helper module
    may only spell codes some detector declares. Codes built at run time are not seen
    here; the cases driver checks every emitted code as well."""
    owners = _detector_codes()
    names = set(available())
    for path in sorted(DETECTORS_DIR.rglob("*.py")):
        name = path.stem if path.parent == DETECTORS_DIR else path.parent.name
        spelled = _code_literals(path)
        allowed = set(load(name).CODES) if name in names else set(owners)
        stray = spelled - allowed
        assert not stray, f"{path.name} spells codes not declared in its CODES: {sorted(stray)}"


def _gen_detectors() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_detectors", DOCS / "gen_detectors.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    "name",
    available(),
)
def test_docs_page_is_generated_from_the_module(name: str) -> None:
    page = DOCS / "detectors" / f"{name}.md"
    assert page.read_text("utf-8") == _gen_detectors().render(name), (
        f"docs/detectors/{name}.md differs from its module: run python docs/gen_detectors.py"
    )


def test_the_generated_page_holds_every_section_code_and_parameter() -> None:
    gen = _gen_detectors()
    import dataclasses

    for name in available():
        text = gen.render(name)
        module = load(name)
        for code in module.CODES:
            assert f"`{code}`" in text
        for field in dataclasses.fields(module.Params):
            assert f"| `{field.name}` |" in text, (name, field.name)
        heads = [line[3:] for line in text.splitlines() if line.startswith("## ")]
        for section in detectors.DOC_SECTIONS:
            assert any(h.startswith(section) for h in heads), (name, section, heads)


def test_no_docs_page_without_a_detector() -> None:
    pages = {p.stem for p in (DOCS / "detectors").glob("*.md")}
    assert pages == set(available())
