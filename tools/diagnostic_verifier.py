"""`--verify-diagnostics`: match emitted diagnostics against `// expected-<severity>` comments, as mlir-opt.

    // expected-error @+1 {{text}}      the next line (also @-N, @+N)
    // expected-warning {{text}}        this line
    // expected-note @above {{text}}    the nearest line above / below without an expectation
    // expected-remark @unknown {{t}}   a diagnostic without a file location
    // expected-error-re {{a {{[0-9]+}} b}}   text outside {{ }} is literal, inside is a regex

A diagnostic matches an expectation of its severity on its line whose text it contains. Lines are
those of the whole input file, so the split chunks of `--split-input-file` share one set.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from fmha_mlir.diagnostics import Diagnostic, Position, error

_EXPECTED = re.compile(
    r"expected-(error|note|remark|warning)(-re)? *(@([+-][0-9]+|above|below|unknown))? *\{\{(.*)\}\}$")


@dataclass
class Expectation:
    severity: str
    text: str
    pattern: "re.Pattern[str]"
    written_at: Position        # where the expected-* comment is
    line: int | None            # the line it expects a diagnostic on; None for @unknown
    matched: bool = field(default=False)

    def accepts(self, diag: Diagnostic) -> bool:
        return self.pattern.search(diag.message) is not None


def _pattern(text: str, is_regex: bool) -> "re.Pattern[str]":
    if not is_regex:
        return re.compile(re.escape(text))
    parts = re.split(r"\{\{(.*?)\}\}", text)  # odd indices are the regex parts
    return re.compile("".join(part if i % 2 else re.escape(part) for i, part in enumerate(parts)))


def parse_expectations(text: str, source_name: str) -> tuple[list[Expectation], list[Diagnostic]]:
    """The expectations written in `text`, and errors for those that point nowhere."""
    expectations: list[Expectation] = []
    problems: list[Diagnostic] = []
    waiting_for_next_line: list[Expectation] = []
    last_plain_line = 0
    for line_no, line in enumerate(text.splitlines(), start=1):
        found = _EXPECTED.search(line.rstrip())
        if not found:
            for expectation in waiting_for_next_line:
                expectation.line = line_no
            waiting_for_next_line = []
            last_plain_line = line_no
            continue
        severity, regex, _, offset, message = found.groups()
        written_at = Position(source_name, line_no, found.start() + 1)
        try:
            pattern = _pattern(message, bool(regex))
        except re.error as exc:
            problems.append(error(f"invalid regex in expected-{severity}-re {{{{{message}}}}}: {exc}", written_at))
            continue
        expectation = Expectation(severity, message, pattern, written_at, line_no)
        if offset == "unknown":
            expectation.line = None
        elif offset == "above":
            expectation.line = last_plain_line
        elif offset == "below":
            waiting_for_next_line.append(expectation)
        elif offset:
            expectation.line = line_no + int(offset)
        if expectation.line is not None and expectation.line < 1:
            problems.append(error(f"expected {severity} points to line {expectation.line}, before the file",
                                  written_at))
            continue
        expectations.append(expectation)
    for expectation in waiting_for_next_line:
        problems.append(error(f"expected {expectation.severity} @below has no line below it", expectation.written_at))
        expectations.remove(expectation)
    return expectations, problems


def verify(expectations: list[Expectation], diagnostics: list[Diagnostic], source_name: str) -> list[Diagnostic]:
    """Errors for each unexpected diagnostic and each expectation nothing matched, in file order."""
    problems: list[Diagnostic] = []
    for diag in diagnostics:
        if not _match(diag, expectations, source_name):
            problems.append(error(f"unexpected {diag.severity}: {diag.message}", diag.position))
    for expectation in expectations:
        if not expectation.matched:
            problems.append(error(f'expected {expectation.severity} "{expectation.text}" was not produced',
                                  expectation.written_at))
    return sorted(problems, key=lambda problem: _file_order(problem.position, source_name))


def _file_order(position: Position | None, source_name: str) -> tuple:
    """The input file's positions first, by line and column; then other files; then positionless ones."""
    if position is None:
        return (2,)
    return (0 if position.file == source_name else 1, position.file, position.line, position.col)


def _match(diag: Diagnostic, expectations: list[Expectation], source_name: str) -> bool:
    if diag.position is None:
        line = None
    elif diag.position.file == source_name:
        line = diag.position.line
    else:
        return False
    for expectation in expectations:
        if expectation.line == line and expectation.severity == diag.severity and expectation.accepts(diag):
            expectation.matched = True
            return True
    return False
