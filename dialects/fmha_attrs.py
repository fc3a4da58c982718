"""Builtin attributes of fmha ops: the spec attributes (docs/ir.md) and typed readers for them.

Readers never raise: they append a readable problem to a list and return None, so a verifier can
report every problem of an op at once.
"""
from __future__ import annotations

import dataclasses
import math

from fmha_mlir.errors import SpecError
from fmha_mlir.kernel_config import KernelConfig
from fmha_mlir.mlir import ir
from fmha_mlir.spec import AttentionBwdSpec, Mask

# Attribute name -> the kind of builtin attribute it holds, in the order docs/ir.md lists them.
SPEC_ATTRIBUTES = {
    "dtype": "string", "hdim_q": "i64", "hdim_v": "i64", "gqa_ratio": "i64",
    "mask": "string", "window_left": "i64", "window_right": "i64",
    "scale": "f32", "bias": "string", "dbias": "bool", "deterministic": "bool",
}
MASK_ATTRIBUTES = ("mask", "window_left", "window_right")
# Written only when the feature is on; absent reads as its default (no softcap, the standard slopes,
# dQ accumulated in f32, padded tensors, no sinks, no lse gradient).
OPTIONAL_SPEC_ATTRIBUTES = {"softcap": ("f32", 0.0), "alibi_slopes": ("bool", False), "grad_accum": ("string", "f32"),
                            "varlen": ("bool", False), "sinks": ("bool", False), "lse_grad": ("bool", False)}


def i64(value: int) -> "ir.IntegerAttr":
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


def i32(value: int) -> "ir.IntegerAttr":
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(32), value)


def f32(value: float) -> "ir.FloatAttr":
    return ir.FloatAttr.get_f32(value)


def mask_attributes(mask: Mask) -> dict[str, "ir.Attribute"]:
    return {"mask": ir.StringAttr.get(mask.kind), "window_left": i64(mask.window_left),
            "window_right": i64(mask.window_right)}


def spec_attributes(spec: AttentionBwdSpec) -> dict[str, "ir.Attribute"]:
    """The spec attributes of `spec` (in the current context)."""
    return {
        "dtype": ir.StringAttr.get(spec.dtype),
        "hdim_q": i64(spec.hdim_q), "hdim_v": i64(spec.hdim_v), "gqa_ratio": i64(spec.gqa_ratio),
        **mask_attributes(spec.mask),
        "scale": f32(spec.scale),
        "bias": ir.StringAttr.get(spec.bias),
        "dbias": ir.BoolAttr.get(spec.dbias), "deterministic": ir.BoolAttr.get(spec.deterministic),
        **({"softcap": f32(spec.softcap)} if spec.softcap else {}),
        **({"alibi_slopes": ir.BoolAttr.get(True)} if spec.alibi_slopes else {}),
        **({"grad_accum": ir.StringAttr.get(spec.grad_accum)} if spec.grad_accum != "f32" else {}),
        **({"varlen": ir.BoolAttr.get(True)} if spec.varlen else {}),
        **({"sinks": ir.BoolAttr.get(True)} if spec.sinks else {}),
        **({"lse_grad": ir.BoolAttr.get(True)} if spec.lse_grad else {}),
    }


def read_attribute(op: "ir.Operation", name: str, kind: str, problems: list[str]):
    """The Python value of attribute `name` of `kind` ('string', 'i64', 'i32', 'f32', 'bool'), or None."""
    attributes = op.attributes
    if name not in attributes:
        problems.append(f"missing attribute '{name}' ({_KIND_TEXT[kind]})")
        return None
    attr = attributes[name]
    if kind == "string" and isinstance(attr, ir.StringAttr):
        return attr.value
    if kind == "bool" and isinstance(attr, ir.BoolAttr):
        return attr.value
    if kind in ("i64", "i32") and isinstance(attr, ir.IntegerAttr) and str(attr.type) == kind:
        return attr.value
    if kind == "f32" and isinstance(attr, ir.FloatAttr) and str(attr.type) == "f32":
        return attr.value
    problems.append(f"attribute '{name}' must be {_KIND_TEXT[kind]}, got {attr}")
    return None


_KIND_TEXT = {"string": "a string", "i64": "an i64 integer", "i32": "an i32 integer",
              "f32": "an f32 float", "bool": "a bool"}


def read_mask(op: "ir.Operation", problems: list[str]) -> Mask | None:
    """The Mask of `op`'s mask attributes (not yet checked for consistency), or None if malformed."""
    values = [read_attribute(op, name, SPEC_ATTRIBUTES[name], problems) for name in MASK_ATTRIBUTES]
    return None if None in values else Mask(*values)


def read_spec(op: "ir.Operation", problems: list[str]) -> AttentionBwdSpec | None:
    """The spec of `op`'s spec attributes when each is present and well typed, else None.

    The spec's own validity (spec.reasons()) is left to the caller.
    """
    values = {name: read_attribute(op, name, kind, problems)
              for name, kind in SPEC_ATTRIBUTES.items() if name not in MASK_ATTRIBUTES}
    for name, (kind, default) in OPTIONAL_SPEC_ATTRIBUTES.items():
        values[name] = read_attribute(op, name, kind, problems) if name in op.attributes else default
    mask = read_mask(op, problems)
    if mask is None or None in values.values():
        return None
    if not (math.isfinite(values["scale"]) and values["scale"] > 0):
        # The spec would replace a zero scale by its default: report the attribute as written.
        problems.append(f"attribute 'scale' must be finite and > 0, got {values['scale']}")
        return None
    return AttentionBwdSpec(mask=mask, **values)


# --- decoded once per attribute value -----------------------------------------------------------------
# The problem op, its stage ops and their kernels carry the same spec and config attributes, and every
# pass asks for them. The decode (and with it the spec's and config's validation, which they cache)
# runs once per distinct printed value; the value, not the op, is the key, so any context may ask.
_DECODED: dict[tuple, tuple] = {}
_DECODED_LIMIT = 512


def _decoded(key: tuple, decode, problems: list[str]):
    hit = _DECODED.get(key)
    if hit is None:
        found: list[str] = []
        if len(_DECODED) >= _DECODED_LIMIT:
            _DECODED.clear()
        hit = _DECODED[key] = (decode(found), tuple(found))
    problems += hit[1]
    return hit[0]


def clear_decoded() -> None:
    """Forget every decoded value: the next compile decodes as the first one in a process does."""
    _DECODED.clear()


def stored_spec(op: "ir.Operation", problems: list[str]) -> AttentionBwdSpec | None:
    """read_spec, decoded once per distinct set of spec attribute values."""
    attributes = op.attributes
    key = ("spec",) + tuple((name, str(attributes[name])) for name in (*SPEC_ATTRIBUTES, *OPTIONAL_SPEC_ATTRIBUTES)
                            if name in attributes)
    return _decoded(key, lambda found: read_spec(op, found), problems)


def stored_config(op: "ir.Operation", problems: list[str], required: bool = True,
                  name: str = "config") -> "KernelConfig | None":
    """read_config, decoded once per distinct attribute value."""
    if name not in op.attributes:
        return read_config(op, problems, required, name)
    key = ("config", name, str(op.attributes[name]))
    return _decoded(key, lambda found: read_config(op, found, required, name), problems)


# --- the kernel config: a dictionary attribute `config` -------------------------------------------------

CONFIG_ATTRIBUTE = "config"
# On gpu.func kernels (fmha-stages-to-gpu): what the kernel computes, kept to the end of the pipeline.
SPEC_ATTRIBUTE = "fmha.spec"
KERNEL_CONFIG_ATTRIBUTE = "fmha.config"
# On the host function's arguments (the frontend) and workspace allocs (fmha-decompose-bwd): the names
# the launch plan gives its buffers.
OPERAND_ATTRIBUTE = "fmha.operand"
WORKSPACE_ATTRIBUTE = "fmha.workspace"
# On each gpu.launch_func: how the kernel uses each operand ("read" / "write" / "accumulate", fmha_mlir.bodies),
# so the launch plan says which steps must come before which (docs/ir.md, "The launch plan").
ACCESS_ATTRIBUTE = "fmha.access"


def config_attribute(config: KernelConfig) -> "ir.DictAttr":
    """`{body = "tiled", block_m = 64 : i64, sdp_warps = array<i64: 8, 1>, p_in_registers = true, ...}`;
    fields at their defaults are left out (the warp body's config is `{body = "warp", wave_size = W}`)."""
    entries = {"body": ir.StringAttr.get(config.body)}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if field.name != "wave_size" and value == field.default:
            continue
        if isinstance(value, bool):
            entries[field.name] = ir.BoolAttr.get(value)
        elif isinstance(value, int):
            entries[field.name] = i64(value)
        elif isinstance(value, tuple):
            entries[field.name] = ir.DenseI64ArrayAttr.get(list(value))
        else:
            entries[field.name] = ir.StringAttr.get(value)
    return ir.DictAttr.get(entries)


def read_config(op: "ir.Operation", problems: list[str], required: bool = True,
                name: str = CONFIG_ATTRIBUTE) -> KernelConfig | None:
    """The KernelConfig of `op`'s config attribute `name` (structurally valid), or None with problems.

    Absent and not `required`: None without a problem."""
    if name not in op.attributes:
        if required:
            problems.append(f"missing attribute '{name}' (the kernel config: run fmha-select-kernel-config first)")
        return None
    attr = op.attributes[name]
    if not isinstance(attr, ir.DictAttr):
        problems.append(f"attribute '{name}' must be a dictionary, got {attr}")
        return None
    values = {}
    for i in range(len(attr)):
        named = attr[i]
        values[named.name] = _config_value(named.attr)
    if None in values.values():
        bad = [key for key, value in values.items() if value is None]
        problems.append(f"attribute '{name}': entries {', '.join(bad)} must be strings, bools, integers or i64 arrays")
        return None
    try:
        return KernelConfig.from_json(values)
    except (SpecError, TypeError) as exc:
        reasons = getattr(exc, "reasons", None)
        problems += [f"attribute '{name}': {r}" for r in reasons] if reasons else [f"attribute '{name}': {exc}"]
        return None


def _config_value(attr: "ir.Attribute"):
    if isinstance(attr, ir.BoolAttr):
        return attr.value
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    if isinstance(attr, ir.StringAttr):
        return attr.value
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return list(attr)
    return None


# --- what a kernel computes: fmha.spec / fmha.config on its gpu.func ------------------------------------


def describe_kernel(kernel: "ir.Operation", spec: AttentionBwdSpec, config: KernelConfig) -> None:
    kernel.attributes[SPEC_ATTRIBUTE] = ir.DictAttr.get(spec_attributes(spec))
    kernel.attributes[KERNEL_CONFIG_ATTRIBUTE] = config_attribute(config)


def describes_kernel(kernel: "ir.Operation") -> bool:
    return SPEC_ATTRIBUTE in kernel.attributes and KERNEL_CONFIG_ATTRIBUTE in kernel.attributes


def read_kernel_description(kernel: "ir.Operation", problems: list[str]
                            ) -> tuple[AttentionBwdSpec | None, KernelConfig | None]:
    """The spec and config describe_kernel wrote (not checked against each other), or Nones with problems."""
    spec = stored_spec(_AttributesOf(ir.DictAttr(kernel.attributes[SPEC_ATTRIBUTE])), problems)
    config = stored_config(kernel, problems, True, KERNEL_CONFIG_ATTRIBUTE) if not problems else None
    return spec, config


class _AttributesOf:
    """A dictionary attribute seen as an op's attributes, for the op-attribute readers."""

    def __init__(self, attr: "ir.DictAttr"):
        self.attributes = {attr[i].name: attr[i].attr for i in range(len(attr))}
