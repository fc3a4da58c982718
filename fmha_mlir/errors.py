"""Project exception types. Every user-facing failure is one of these, never an MLIR traceback."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    """One structured reason a spec or target is rejected: what is wrong and how to fix it."""

    field: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.field}: {self.message}"
        return f"{text} ({self.fix})" if self.fix else text


class FmhaError(Exception):
    """Base class of every error this package raises on purpose."""


class SpecError(FmhaError, ValueError):
    """A problem spec or target that cannot be compiled; carries the structured reasons."""

    def __init__(self, reasons: list[Reason] | tuple[Reason, ...]):
        self.reasons = tuple(reasons)
        super().__init__("invalid attention-backward spec:\n" + "\n".join(f"  - {r}" for r in self.reasons))


class CompileError(FmhaError):
    """MLIR rejected the IR or a pass failed; carries MLIR's diagnostics and the stage it failed in."""

    def __init__(self, message: str, diagnostics: tuple[str, ...] = (), stage: str = "", repro: str = ""):
        self.diagnostics = tuple(diagnostics)
        self.stage = stage
        self.repro = repro
        parts = [f"[{stage}] {message}" if stage else message]
        parts += [f"  {d}" for d in self.diagnostics]
        if repro:
            parts.append(f"  reproduce with: {repro}")
        super().__init__("\n".join(parts))


class PipelineError(FmhaError, ValueError):
    """A textual pass pipeline names an unknown pass or gives it a bad option."""


class RuntimeLaunchError(FmhaError):
    """A bundle cannot be loaded or launched on the chosen executor."""
