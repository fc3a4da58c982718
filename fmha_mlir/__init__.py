"""fmha-mlir: an MLIR compiler pipeline for the fused multi-head attention backward pass.

Importing the package needs NumPy only; the compiler (fmha_mlir.compiler, .dialects, .passes) imports
MLIR's bindings when used.
"""
from .api import AttentionBackward, attention_bwd, compile_bundle
from .errors import CompileError, FmhaError, PipelineError, RuntimeLaunchError, SpecError
from .spec import AttentionBwdSpec, Mask
from .target import TARGETS, Target, get_target

__all__ = [
    "AttentionBackward", "attention_bwd", "compile_bundle",
    "CompileError", "FmhaError", "PipelineError", "RuntimeLaunchError", "SpecError",
    "AttentionBwdSpec", "Mask", "TARGETS", "Target", "get_target",
]
