"""Textual pass pipelines: the one helper that renders every pass, upstream MLIR's and ours alike."""
from __future__ import annotations

# The cleanup after body expansion (reports/cleanup_passes.md): the builders emit a constant per use
# and rebuild index arithmetic per fragment; folding and deduplicating it before the target lowering cuts
# ptxas's spills on every sm_90 tiled row and leaves the AMD ISA byte-identical. loop-invariant-code-motion
# is left out: it lengthens live ranges across the step loop (more spills on the causal sm_90 rows than
# without it) while the builders already build lane arithmetic once (shared_tiles.LaneValues).
CLEANUP_PASSES = ("canonicalize", "cse")


def render_pass(name: str, **options) -> str:
    """'name{opt-a=1 opt-b=x}': option keywords in Python spelling (underscores become dashes)."""
    if not options:
        return name
    rendered = " ".join(f"{key.replace('_', '-')}={_render_value(value)}" for key, value in options.items())
    return f"{name}{{{rendered}}}"


def nested(anchor: str, passes: list[str]) -> str:
    """Passes that run on each `anchor` op, e.g. gpu.module(convert-scf-to-cf,...)."""
    return f"{anchor}({','.join(passes)})"


def render_pipeline(passes: list[str]) -> str:
    """A complete pipeline anchored on the builtin module, as fmha-opt --pass-pipeline takes it."""
    return f"builtin.module({','.join(passes)})"


def _render_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
