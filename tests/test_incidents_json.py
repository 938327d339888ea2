"""``analyze --json`` against its documented schema (docs/analyze.schema.json).

jsonschema is not a dependency (nor in the test venv): a small validator below covers the
keywords the schema uses (type, required, properties, items, enum, minItems, $ref), and
refuses any other, so the schema cannot grow a keyword this test silently ignores. When
jsonschema is installed it validates too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DOCS, REAL_LOGS, fixture_path
from trainlens.cli import main

SCHEMA = json.loads((DOCS / "analyze.schema.json").read_text("utf-8"))
KNOWN = {"$schema", "$id", "title", "description", "$defs", "type", "required", "properties"}
KNOWN |= {"items", "enum", "minItems", "$ref"}
TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def errors(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    unknown = set(schema) - KNOWN
    assert not unknown, f"{where}: schema keywords this validator does not know: {unknown}"
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return errors(value, SCHEMA["$defs"][name], where)
    out: list[str] = []
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        ok = any(
            isinstance(value, TYPES[n]) and not (n in ("integer", "number") and value is True)
            for n in names
        )
        if not ok or (isinstance(value, bool) and "boolean" not in names):
            return [f"{where}: {type(value).__name__} is not {names}"]
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        out += [f"{where}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                out += errors(value[key], sub, f"{where}.{key}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            out.append(f"{where}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for k, item in enumerate(value):
                out += errors(item, schema["items"], f"{where}[{k}]")
    return out


def analyzed_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    main(["analyze", str(path), "--json"])
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def check(doc: dict[str, Any]) -> None:
    assert errors(doc, SCHEMA) == []
    try:
        import jsonschema
    except ImportError:
        pass
    else:
        jsonschema.validate(doc, SCHEMA)
    for run in doc["runs"]:  # what a schema cannot say: members index the findings, once
        members = sorted(m for i in run["incidents"] for m in i["members"])
        assert members == list(range(len(run["findings"])))
        for inc in run["incidents"]:
            assert {run["findings"][m]["incident"] for m in inc["members"]} == {inc["id"]}


@pytest.mark.parametrize(
    "name", ["nan_divergence", "lr_shock_diverge", "shock_then_slow", "healthy_cosine"]
)
def test_fixture_json_matches_its_schema(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    check(analyzed_json(fixture_path(name), capsys))


def test_real_hf_json_matches_its_schema(
    shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = REAL_LOGS / "aigoncharov_trainer_state_viz" / "trainer_state.json"
    doc = analyzed_json(path, capsys)
    check(doc)
    [inc] = doc["runs"][0]["incidents"]
    assert inc["id"] == "VAL001@401" and len(inc["members"]) == 6


def test_the_validator_catches_what_breaks_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    doc = analyzed_json(fixture_path("nan_divergence"), capsys)
    inc = doc["runs"][0]["incidents"][0]
    inc["severity"] = "fatal"
    del inc["members"]
    doc["runs"][0]["findings"][0]["incident"] = None
    found = errors(doc, SCHEMA)
    assert any("'fatal' not in" in e for e in found)
    assert any("missing 'members'" in e for e in found)
    assert any("findings[0].incident: NoneType" in e for e in found)
