"""Memory check results as a JUnit XML report, the format CI systems show as test results."""

from __future__ import annotations

import contextlib
import errno
import os
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from core.checks.runner import ERROR, FAIL, CheckResult


def junit_xml(results: Sequence[CheckResult], *, suite: str, properties: Mapping[str, Any] | None = None) -> str:
    """One ``<testsuite>`` (named after the checks file) with a ``<testcase>`` per check; a failed check
    has a ``<failure>`` per assertion that did not hold, a check that could not run an ``<error>``."""
    failures = sum(1 for r in results if r.status == FAIL)
    errors = sum(1 for r in results if r.status == ERROR)
    seconds = sum(r.seconds for r in results)
    root = ET.Element("testsuites", name="memory-studio test", tests=str(len(results)), failures=str(failures),
                      errors=str(errors), time=f"{seconds:.3f}")
    node = ET.SubElement(root, "testsuite", name=suite, tests=str(len(results)), failures=str(failures),
                         errors=str(errors), skipped="0", time=f"{seconds:.3f}",
                         timestamp=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"))
    if properties:
        props = ET.SubElement(node, "properties")
        for key, value in properties.items():
            ET.SubElement(props, "property", name=str(key), value=str(value))
    classname = "memory_checks." + Path(suite).stem.replace(".", "_")
    for result in results:
        case = ET.SubElement(node, "testcase", classname=classname, name=result.check.name,
                             time=f"{result.seconds:.3f}")
        where = f"thread {result.check.thread}, {result.check.turn_label}"
        if result.status == ERROR:
            err = ET.SubElement(case, "error", message=result.error or "could not run", type="CheckError")
            err.text = f"{where}: {result.error}"
        for failure in result.failures:
            fail = ET.SubElement(case, "failure", message=failure.message, type=failure.assertion)
            fail.text = f"{where} (turn {result.turn_number}, {result.replay or 'rebuilt'}):\n{failure.excerpt}"
        if result.tokens is not None:
            out = ET.SubElement(case, "system-out")
            out.text = f"{where}: turn {result.turn_number}, {result.tokens:,} tokens, {result.replay or 'rebuilt'}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(path: str | os.PathLike[str], results: Sequence[CheckResult], *, suite: str,
                properties: Mapping[str, Any] | None = None) -> None:
    where = Path(path)
    if where.is_dir():
        raise IsADirectoryError(errno.EISDIR, "it is a folder", str(where))
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = where.with_name(where.name + ".tmp")
    try:
        tmp.write_text(junit_xml(results, suite=suite, properties=properties), encoding="utf-8")
        os.replace(tmp, where)
    except OSError:
        with contextlib.suppress(OSError):  # no half-written report left beside the one asked for
            tmp.unlink(missing_ok=True)
        raise


__all__ = ["junit_xml", "write_junit"]
