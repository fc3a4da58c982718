"""MLIR diagnostics as plain records with a source position, printed as `file:line:col: error: message`.

MLIR hands diagnostics over only during a callback (or inside an MLIRError), and its location text
(`loc("f.mlir":3:5)`) is not what tools print: these records carry what `fmha-opt` needs afterwards.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from .mlir import ir

# The name MLIR's text parser gives a buffer parsed from a string (Module.parse has no source name).
PARSER_BUFFER_NAME = "-"


@dataclass(frozen=True)
class Position:
    file: str
    line: int
    col: int


@dataclass(frozen=True)
class Diagnostic:
    severity: str                 # error | warning | remark | note
    message: str
    position: Position | None     # None when the location names no file (unknown, a bare name)
    location_text: str            # MLIR's rendering of the location, for positionless diagnostics

    def format(self) -> str:
        where = self.location_text if self.position is None else \
            f"{self.position.file}:{self.position.line}:{self.position.col}"
        return f"{where}: {self.severity}: {self.message}"


def error(message: str, position: Position | None = None) -> Diagnostic:
    return Diagnostic("error", message, position, "<unknown>")


def position_of(location: "ir.Location", source_name: str) -> Position | None:
    """The file position a location points at, looking through name, call-site and fused locations."""
    location = ir.Location.from_attr(location.attr)  # MLIRError hands out un-downcast locations
    if isinstance(location, ir.FileLineColLoc):
        file = source_name if location.filename == PARSER_BUFFER_NAME else location.filename
        return Position(file, location.start_line, location.start_col)
    if isinstance(location, ir.NameLoc):
        return position_of(location.child_loc, source_name)
    if isinstance(location, ir.CallSiteLoc):
        return position_of(location.callee, source_name)
    if isinstance(location, ir.FusedLoc):
        for inner in location.locations:
            position = position_of(inner, source_name)
            if position is not None:
                return position
    return None


def from_mlir(diag, source_name: str) -> list[Diagnostic]:
    """One MLIR diagnostic (with its notes, flattened after it) as records."""
    severity = str(diag.severity).rsplit(".", 1)[-1].lower()
    records = [Diagnostic(severity, str(diag.message), position_of(diag.location, source_name), str(diag.location))]
    for note in diag.notes:
        records += from_mlir(note, source_name)
    return records


@contextmanager
def capture(ctx: "ir.Context", source_name: str):
    """Collect every diagnostic emitted in `ctx` as records (MLIR prints none of them itself)."""
    records: list[Diagnostic] = []

    def handler(diag) -> bool:
        records.extend(from_mlir(diag, source_name))
        return True

    handle = ctx.attach_diagnostic_handler(handler)
    try:
        yield records
    finally:
        handle.detach()
