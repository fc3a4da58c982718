"""Textual pass pipelines: the one helper that renders every pass, upstream MLIR's and ours alike."""
from __future__ import annotations


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
