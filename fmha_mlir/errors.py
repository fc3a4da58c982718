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


# Exit statuses of the command-line tools (fmha-opt, fmha-compile, fmha-bwd), the same in each; argparse
# already exits 2 on a bad option, so every other error the user can fix takes 2 as well.
EXIT_OK = 0
EXIT_FAIL = 1    # fmha-bwd only: the kernels ran and some gradient failed the gate
EXIT_ERROR = 2   # bad input or usage: the message names what is wrong and the fix


def exit_status_epilog(fail: str = "") -> str:
    """The --help epilog that documents the statuses above (`fail`: what status 1 means, if the tool has it)."""
    one = f", {EXIT_FAIL} {fail}" if fail else ""
    return (f"Exit status: {EXIT_OK} success{one}, {EXIT_ERROR} an error (bad input, options or IR; MLIR crashing "
            "on the input): the message names the problem and the fix.")
