"""The one place this project imports MLIR from.

MLIR's Python bindings come embedded in the `flydsl` wheel as `flydsl._mlir`. Every other module
imports `ir`, `passmanager`, the dialect builders and the helpers below from here, so a change of the
bindings' home touches this file alone. The runtime, the oracles and the launchers never import it:
the GPU machines have no MLIR.
"""
from __future__ import annotations

from contextlib import contextmanager

try:
    from flydsl._mlir import ir, passmanager, rewrite  # noqa: F401
    from flydsl._mlir.dialects import arith, func, gpu, llvm, math, memref, scf, vector  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only where flydsl is missing
    raise ImportError(
        "fmha_mlir's compiler needs MLIR's Python bindings from flydsl==0.5.0: pip install flydsl==0.5.0"
    ) from exc

from .errors import CompileError


def make_context() -> "ir.Context":
    """A context that accepts our `fmha` ops, which are generic operations verified by our own code."""
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    return ctx


@contextmanager
def collect_diagnostics(ctx: "ir.Context"):
    """Collect every diagnostic MLIR emits in `ctx` (errors, warnings, notes) as located strings.

    Yields the list being filled. Handlers that return True stop MLIR from printing to stderr.
    """
    messages: list[str] = []

    def handler(diag) -> bool:
        messages.append(format_diagnostic(diag))
        return True

    handle = ctx.attach_diagnostic_handler(handler)
    try:
        yield messages
    finally:
        handle.detach()


def format_diagnostic(diag) -> str:
    severity = str(diag.severity).rsplit(".", 1)[-1].lower()
    text = f"{diag.location}: {severity}: {diag.message}"
    for note in diag.notes:
        text += "\n  " + format_diagnostic(note)
    return text


def parse_module(text: str, ctx: "ir.Context", source_name: str = "<input>") -> "ir.Module":
    """Parse MLIR text, turning MLIR's parse errors into a CompileError with located diagnostics."""
    with collect_diagnostics(ctx) as diags:
        try:
            with ctx:
                return ir.Module.parse(text)
        except Exception as exc:  # MLIRError carries the same diagnostics
            raise CompileError(f"cannot parse {source_name}", tuple(diags) or (str(exc),), stage="parse") from None
