"""The one table of fmha passes, and textual pipelines that mix them with upstream MLIR passes.

`fmha-opt --pass-pipeline`, the compiler driver and users' own code all resolve pass names here.
Passes are imported lazily so that listing them costs nothing.
"""
from __future__ import annotations

import dataclasses
import importlib
import typing

from fmha_mlir.errors import PipelineError
from fmha_mlir.target import TARGETS

# name -> "module:Class" under fmha_mlir.passes; one pass per module.
_TABLE: dict[str, str] = {
    "fmha-select-kernel-config": "select_kernel_config:SelectKernelConfig",
    "fmha-decompose-bwd": "decompose_bwd:DecomposeBwd",
    "fmha-stages-to-gpu": "stages_to_gpu:StagesToGpu",
    "fmha-expand-warp-body": "expand_warp_body:ExpandWarpBody",
    "fmha-expand-tiled-body": "expand_tiled_body:ExpandTiledBody",
    "fmha-extern-dynamic-shared": "extern_dynamic_shared:ExternDynamicShared",
    "fmha-check-chip-features": "chip_features:CheckChipFeatures",
    "fmha-grid-constant-params": "grid_constant_params:GridConstantParams",
    "convert-fmha-to-rocdl": "fmha_to_rocdl:ConvertFmhaToRocdl",
    "convert-fmha-to-nvvm": "fmha_to_nvvm:ConvertFmhaToNvvm",
    "fmha-hardware-atomics": "hardware_atomics:HardwareAtomics",
    "fmha-vector-atomics-to-nvvm": "vector_atomics_to_nvvm:VectorAtomicsToNvvm",
    "fmha-packed-atomics-to-rocdl": "packed_atomics_to_rocdl:PackedAtomicsToRocdl",
    "fmha-semaphores-to-llvm": "semaphores_to_llvm:SemaphoresToLlvm",
}

# Upstream passes that take a chip name: (option, the Target.backend whose arches it accepts).
_CHIP_OPTIONS: dict[str, tuple[str, str]] = {
    "rocdl-attach-target": ("chip", "rocdl"),
    "convert-gpu-to-rocdl": ("chipset", "rocdl"),
    "convert-amdgpu-to-rocdl": ("chipset", "rocdl"),
    "nvvm-attach-target": ("chip", "nvvm"),
}


# Upstream options whose invalid values MLIR asserts on instead of reporting: option -> the valid values.
_OPT_LEVELS = ("0", "1", "2", "3")
_CHECKED_OPTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "rocdl-attach-target": {"O": _OPT_LEVELS, "abi": ("400", "500", "600")},
    "nvvm-attach-target": {"O": _OPT_LEVELS},
}


def pass_names() -> list[str]:
    return sorted(_TABLE)


def get_pass_class(name: str):
    if name not in _TABLE:
        raise PipelineError(f"unknown fmha pass {name!r}; known: {', '.join(pass_names())}")
    module, cls = _TABLE[name].split(":")
    return getattr(importlib.import_module(f"fmha_mlir.passes.{module}"), cls)


def make_pass(name: str, options: dict[str, str] | None = None):
    """Instantiate pass `name` from textual options (keys in dash or underscore form)."""
    cls = get_pass_class(name)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, text in (options or {}).items():
        field = key.replace("-", "_")
        if field not in fields:
            valid = ", ".join(f.replace("_", "-") for f in fields) or "none"
            raise PipelineError(f"pass {name!r} has no option {key!r}; its options: {valid}")
        kwargs[field] = _convert(name, key, text, hints[field])
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise PipelineError(f"pass {name!r}: {exc}") from None


def _convert(name: str, key: str, text: str, typ):
    try:
        if typ is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return text.lower() in ("true", "1")
        return typ(text)
    except ValueError:
        raise PipelineError(f"pass {name!r}: option {key}={text!r} is not a valid {typ.__name__}") from None


def split_elements(text: str) -> list[str]:
    """Split 'a{x=1},b(c,d),e' at top-level commas."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '{ch}' at column {i + 1} of pipeline {text!r}")
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    if depth:
        raise PipelineError(f"unbalanced brackets in pipeline {text!r}")
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return [e for e in out if e]


def parse_element(element: str) -> tuple[str, dict[str, str]]:
    """'name{a=1 b=x}' -> ('name', {'a': '1', 'b': 'x'}); a nested 'op(...)' pipeline is returned whole."""
    if _is_nested(element):
        return element, {}
    name, brace, rest = element.partition("{")
    options: dict[str, str] = {}
    if brace:
        if not rest.endswith("}"):
            raise PipelineError(f"options of {name!r} must end with '}}': {element!r}")
        for item in _option_items(name, rest[:-1]):
            key, eq, value = item.partition("=")
            if not eq:
                raise PipelineError(f"option {item!r} of {name!r} must be key=value")
            options[key] = _unquoted(value)
    return name.strip(), options


def _option_items(name: str, text: str) -> list[str]:
    """Space-separated key=value items; a value in double quotes (MLIR's syntax) may hold spaces."""
    items, current, quoted = [], "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch.isspace() and not quoted:
            if current:
                items.append(current)
            current = ""
        else:
            current += ch
    if quoted:
        raise PipelineError(f"unterminated '\"' in the options of {name!r}: {{{text}}}")
    return items + ([current] if current else [])


def _unquoted(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def _is_nested(element: str) -> bool:
    """'anchor(...)': a '(' that comes before any '{' (options may hold parentheses)."""
    paren, brace = element.find("("), element.find("{")
    return paren != -1 and (brace == -1 or paren < brace)


def _check_upstream(element: str) -> None:
    """Reject what MLIR would abort on, or silently miscompile, in an upstream element (nested ones too).

    An fmha pass is a Python pass on builtin.module: MLIR cannot nest it. A chip MLIR does not know gets
    through the target passes and aborts the process in instruction selection (docs/toolchain-traps.md).
    """
    if _is_nested(element):
        if element.endswith(")"):  # otherwise MLIR reports the malformed pipeline itself
            for inner in split_elements(element[element.index("(") + 1:-1]):
                _check_upstream(inner)
        return
    name, options = parse_element(element)
    if name in _TABLE:
        raise PipelineError(f"fmha pass {name!r} runs on the top-level module only: put it at the top level of the "
                            "pipeline, not inside an op anchor")
    if name in _CHIP_OPTIONS:
        option, backend = _CHIP_OPTIONS[name]
        chips = [arch for arch, target in TARGETS.items() if target.backend == backend]
        if option in options and options[option] not in chips:
            raise PipelineError(f"{name}: {option}={options[option]!r} is not a supported chip; use one of "
                                f"{', '.join(chips)}")
        if name.endswith("-attach-target") and option not in options:
            # upstream's default chip (gfx900, sm_50) is no target of ours: it would build for it silently
            raise PipelineError(f"{name} needs {option}=...: one of {', '.join(chips)}")
    for option, allowed in _CHECKED_OPTIONS.get(name, {}).items():
        if option in options and options[option] not in allowed:
            # MLIR asserts (aborts the process) on a target attribute with such a value
            raise PipelineError(f"{name}: {option}={options[option]!r} is not valid; use one of {', '.join(allowed)}")


def strip_anchor(pipeline: str) -> str:
    """'builtin.module(a,b)' -> 'a,b'; a bare list is returned as is."""
    pipeline = pipeline.strip()
    if pipeline.startswith("builtin.module(") and pipeline.endswith(")"):
        return pipeline[len("builtin.module("):-1]
    return pipeline


def build_pass_manager(pipeline: str, ctx):
    """A PassManager on builtin.module running `pipeline`: our passes by name, the rest upstream."""
    from fmha_mlir.mlir import passmanager

    with ctx:
        pm = passmanager.PassManager("builtin.module")
        for element in split_elements(strip_anchor(pipeline)):
            name, options = parse_element(element)
            if name in _TABLE:
                make_pass(name, options).add_to(pm)
                continue
            _check_upstream(element)
            try:
                pm.add(element)
            except ValueError as exc:
                raise PipelineError(f"bad pipeline element {element!r}: {str(exc).strip()}") from None
    return pm
