"""What every fmha pass is: a frozen dataclass whose fields are its textual options.

A pass instance is a callable with the signature MLIR's PassManager.add expects, so the same object
runs from `fmha-opt --pass-pipeline` and from a user's own PassManager. Failures are reported as
located MLIR diagnostics (`PassFailure` carries the op to blame), never as Python tracebacks.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import ClassVar

from fmha_mlir.backends.pipeline import render_pass
from fmha_mlir.errors import FmhaError
from fmha_mlir.mlir import ir


class PassFailure(Exception):
    """Raised inside a pass: the message is emitted as an error at `op`'s location."""

    def __init__(self, message: str, op=None):
        super().__init__(message)
        self.op = op


@contextlib.contextmanager
def rewriting(op: "ir.Operation"):
    """Build in front of `op`, at its location; a project error raised meanwhile (an fmha builder's
    VerifyError, say) is reported at `op` rather than at the module."""
    try:
        with ir.InsertionPoint(op), op.location:
            yield
    except FmhaError as exc:
        raise PassFailure(str(exc), op) from None


@dataclasses.dataclass(frozen=True)
class FmhaPass:
    NAME: ClassVar[str] = ""
    DESCRIPTION: ClassVar[str] = ""

    def run_on_module(self, module: "ir.Operation") -> None:
        raise NotImplementedError

    def __call__(self, op: "ir.Operation", pass_) -> None:
        try:
            with op.context:  # builders inside the pass need the context the pass manager runs in
                self.run_on_module(op)
        except PassFailure as failure:
            where = failure.op.location if failure.op is not None else op.location
            where.emit_error(f"{self.NAME}: {failure}")
            pass_.signal_pass_failure()
        except FmhaError as exc:
            op.location.emit_error(f"{self.NAME}: {exc}")
            pass_.signal_pass_failure()
        except Exception as exc:  # a bug in the pass: still a located diagnostic, never a traceback
            op.location.emit_error(f"{self.NAME}: internal error: {type(exc).__name__}: {exc}")
            pass_.signal_pass_failure()

    def add_to(self, pm) -> None:
        """Append this pass to an MLIR PassManager."""
        pm.add(self, name=type(self).__name__, argument=self.NAME, description=self.DESCRIPTION)

    def render(self) -> str:
        """This pass as a pipeline element: name{opt=value ...}, options only where not default."""
        changed = {f.name: getattr(self, f.name)
                   for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}
        return render_pass(self.NAME, **changed)
