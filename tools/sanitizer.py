"""compute-sanitizer: the command line of each tool, and what a run's output and exit status say.

A run is clean only on positive evidence: the tool's summary line with no errors, the child's exit
status 0 and its gate lines. A target that dies (a segfault, a Python error) can still end in a summary
of 0 hazards; that is a failure, not a clean run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

TOOLS = ("memcheck", "racecheck", "synccheck")
# Every hazard of racecheck, not only those it rates as errors; every leaked allocation for memcheck.
TOOL_OPTIONS = {"memcheck": ("--leak-check", "full"), "racecheck": ("--racecheck-report", "all"), "synccheck": ()}
ERROR_EXIT = 99
FIRST_LINES = 12   # error lines kept per run in the report
TAIL = 8
PREFIX = "========="

_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
# Sanitizer lines that are bookkeeping, not findings.
_NOT_FINDINGS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY",
                 "Target application returned an error")


def sanitizer_command(sanitizer: str, tool: str, child: list[str]) -> list[str]:
    if tool not in TOOLS:
        raise ValueError(f"unknown sanitizer tool {tool!r}: use {', '.join(TOOLS)}")
    return [sanitizer, "--tool", tool, *TOOL_OPTIONS[tool], "--error-exitcode", str(ERROR_EXIT), *child]


@dataclass(frozen=True)
class Findings:
    """What one sanitizer run reported: None errors when no summary line came (the tool did not finish)."""

    errors: int | None
    warnings: int
    first_lines: tuple[str, ...]


def parse_output(output: str) -> Findings:
    errors = warnings = None
    for match in _ERROR_SUMMARY.finditer(output):
        errors = (errors or 0) + int(match.group(1))
    for match in _RACE_SUMMARY.finditer(output):
        errors = (errors or 0) + int(match.group(2))
        warnings = (warnings or 0) + int(match.group(3))
    findings = []
    for line in output.splitlines():
        text = line.removeprefix(PREFIX).strip()
        if line.startswith(PREFIX) and text and not any(text.startswith(n) for n in _NOT_FINDINGS):
            findings.append(line.rstrip())
    return Findings(errors, warnings or 0, tuple(findings[:FIRST_LINES]))


def gate_lines(output: str, prefix: str) -> tuple[str, ...]:
    return tuple(line.removeprefix(prefix) for line in output.splitlines() if line.startswith(prefix))


@dataclass(frozen=True)
class Verdict:
    status: str              # clean | errors | gate_fail | failed | timeout
    findings: Findings
    gates: tuple[str, ...]   # the child's gate lines
    tail: tuple[str, ...]    # the output's last lines, when the run was not clean (the child's own error)


def judge(output: str, exit_status: int | None, gate_prefix: str, problems: int) -> Verdict:
    """exit_status None: the time limit killed it. `problems`: how many gate lines a whole run prints."""
    findings, gates = parse_output(output), gate_lines(output, gate_prefix)
    if exit_status is None:
        status = "timeout"
    elif findings.errors:
        status = "errors"
    elif findings.errors is None or exit_status not in (0, 1) or len(gates) != problems:
        status = "failed"
    else:
        status = "clean" if exit_status == 0 and all(": PASS" in g for g in gates) else "gate_fail"
    tail = () if status == "clean" else tuple(line.rstrip() for line in output.splitlines() if line.strip())[-TAIL:]
    return Verdict(status, findings, gates, tail)
