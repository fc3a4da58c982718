"""The one place this project imports MLIR from.

MLIR's Python bindings come embedded in the `flydsl` wheel as `flydsl._mlir`. Every other module
imports `ir`, `passmanager`, the dialect builders and the helpers below from here, so a change of the
bindings' home touches this file alone. The runtime, the oracles and the launchers never import it:
the GPU machines have no MLIR.
"""
from __future__ import annotations

try:
    from flydsl._mlir import ir, passmanager, rewrite  # noqa: F401
    from flydsl._mlir.dialects import arith, func, gpu, llvm, math, memref, scf, vector  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only where flydsl is missing
    raise ImportError(
        "fmha_mlir's compiler needs MLIR's Python bindings from flydsl==0.5.0: pip install flydsl==0.5.0"
    ) from exc

from .errors import CompileError


def make_context() -> "ir.Context":
    """A context that accepts our `fmha` ops, which are generic operations verified by our own code.

    Multithreading is off: MLIR verifies isolated ops (each gpu.module, each function) on worker
    threads, and a diagnostic emitted there reaches a Python diagnostic handler without the GIL, which
    aborts the process. Our modules hold one gpu.module, so nothing is lost.
    """
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    ctx.enable_multithreading(False)
    return ctx


def parse_module(text: str, ctx: "ir.Context", source_name: str = "<input>") -> "ir.Module":
    """Parse MLIR text, turning MLIR's parse errors into a CompileError with located diagnostics."""
    from .diagnostics import from_mlir

    with ctx:
        try:
            return ir.Module.parse(text)
        except ir.MLIRError as exc:
            records = [r.format() for diag in exc.error_diagnostics for r in from_mlir(diag, source_name)]
    raise CompileError(f"cannot parse {source_name}", tuple(records) or ("unparsable input",), stage="parse")
