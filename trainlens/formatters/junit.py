"""``trainlens gate --format junit``: JUnit XML for GitLab, Jenkins and other CI test views.

One ``<testsuite>`` per run; one ``<testcase>`` per run × check, where the checks are the
detectors that ran or were skipped, and the configured outcome and baseline checks. A
check that fails the gate is a ``<failure>`` carrying its findings; a detector that could
not run, or a check without its inputs, is ``<skipped>``; an unreadable input is an
``<error>`` (``<skipped>`` under ``--allow-unreadable``). Findings that do not fail the
gate (below ``--fail-on``, or acknowledged) are listed in ``<system-out>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from trainlens.core.sanitize import xml

if TYPE_CHECKING:
    from trainlens.gate.result import GateResult, RunReport


def _suite(r: RunReport, allow_unreadable: bool) -> ET.Element:
    # every string from the input goes through ``xml`` (ElementTree escapes & < > and
    # quotes, but writes an ESC or a NUL as it is: a CI parser then rejects the report)
    suite = ET.Element("testsuite", name=xml(r.name), file=xml(r.source))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if r.verdict == "unreadable":
        case = ET.SubElement(
            suite, "testcase", name="read", classname=xml(r.name), file=xml(r.source)
        )
        counts["tests"] += 1
        if allow_unreadable:
            ET.SubElement(case, "skipped", message=xml(f"unreadable: {r.error}"))
            counts["skipped"] += 1
        else:
            err = ET.SubElement(
                case, "error", message=xml(r.error or "unreadable"), type="unreadable"
            )
            err.text = xml(r.error) if r.error is not None else None
            counts["errors"] += 1
    for check in r.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            name=xml(check.name),
            classname=xml(r.name),
            file=xml(r.source),
            time="0",
        )
        counts["tests"] += 1
        mine = [g for g in r.findings if g.check == check.name]
        if check.status == "fail":
            failing = [g for g in mine if g.fails]
            first = failing[0].finding
            fail = ET.SubElement(
                case,
                "failure",
                message=xml(f"{first.code} {first.name}: {first.message}"),
                type=xml(first.code),
            )
            fail.text = "\n".join(xml(g.line()) for g in failing)
            counts["failures"] += 1
        elif check.status == "skipped":
            ET.SubElement(case, "skipped", message=xml(check.detail))
            counts["skipped"] += 1
        quiet = [g for g in mine if not g.fails]
        if quiet:
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(
                xml((f"acknowledged ({g.reason}): " if g.acknowledged else "") + g.line())
                for g in quiet
            )
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{r.seconds:.3f}")
    return suite


def render_junit(result: GateResult) -> str:
    root = ET.Element("testsuites", name="trainlens gate")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for r in result.reports:
        suite = _suite(r, result.allow_unreadable)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"
