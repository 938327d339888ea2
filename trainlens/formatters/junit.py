"""``trainlens gate --format junit``: JUnit XML for GitLab, Jenkins and other CI test views.

One ``<testsuite>`` per run. In it, one ``<testcase>`` per incident (``incident:<id>``):
an incident that fails the gate is one ``<failure>`` (its headline as the message, its
members as the text), however many checks its findings came from — one root cause, one
failure; one that does not (below ``--fail-on``, or acknowledged) passes, its members in
``<system-out>``. Then one ``<testcase>`` per check (the detectors that ran or were
skipped, the configured outcome and baseline checks) with no incident: passed, or
``<skipped>`` (a detector that could not run, a check without its inputs). An unreadable
input is an ``<error>`` (``<skipped>`` under ``--allow-unreadable``).
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
    for i in r.incidents:
        case = ET.SubElement(
            suite,
            "testcase",
            name=xml(f"incident:{i.id}"),
            classname=xml(r.name),
            file=xml(r.source),
            time="0",
        )
        counts["tests"] += 1
        members = "\n".join(
            xml((f"acknowledged ({g.reason}): " if g.acknowledged else "") + g.line())
            for g in i.members
        )
        if i.fails:
            fail = ET.SubElement(case, "failure", message=xml(i.line()), type=xml(i.incident.code))
            fail.text = members
            counts["failures"] += 1
        else:
            ET.SubElement(case, "system-out").text = members
    with_incident = {g.check for g in r.findings}
    for check in r.checks:
        if check.name in with_incident and check.status != "skipped":
            continue  # its findings are in their incidents' test cases
        case = ET.SubElement(
            suite,
            "testcase",
            name=xml(check.name),
            classname=xml(r.name),
            file=xml(r.source),
            time="0",
        )
        counts["tests"] += 1
        if check.status == "skipped":
            ET.SubElement(case, "skipped", message=xml(check.detail))
            counts["skipped"] += 1
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
