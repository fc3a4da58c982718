"""The `fmha` dialect: builders, readers and verifiers of its ops (docs/ir.md is the contract).

The ops are generic (unregistered) operations, so MLIR checks nothing about them: `verify_op` does,
and `verify_module` / `emit_verification_errors` apply it to a whole module. Builders create at the
current `ir.InsertionPoint` and verify what they built, raising VerifyError instead of leaving a bad
op in the IR.
"""
from __future__ import annotations

import math
from typing import ClassVar, Sequence

from fmha_mlir.errors import FmhaError
from fmha_mlir.kernel_config import KernelConfig
from fmha_mlir.mlir import ir
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.varlen import CU_SEQLENS

from .fmha_attrs import (CONFIG_ATTRIBUTE, config_attribute, f32, i32, mask_attributes, read_attribute, read_mask,
                         spec_attributes, stored_config, stored_spec)
from .fmha_types import ROWS_RANK, SLOPES_RANK, TENSOR_RANK, TensorKind, operand_problem

__all__ = [
    "OPERAND_NAMES", "OPERAND_DIMS", "INPUTS", "GRADS", "BIAS_INPUTS", "ROW_INPUTS", "operand_names",
    "WAVE_REDUCE_KINDS", "VerifyError", "spec_attributes", "spec_from_op",
    "config_of", "tensor_kinds",
    "AttentionBwdOp", "DotDoOOp", "DqDkDvOp", "ConvertGradOp",
    "WaveReduceOp", "Exp2Op", "MaskedScoreOp", "AtomicAddOp",
    "STAGE_OPS", "OPS", "verify_op", "verify_module", "emit_verification_errors",
]

OPERAND_NAMES = ("q", "k", "v", "o", "do", "lse", "dq", "dk", "dv")  # of fmha.attention_bwd without a bias operand
# The logical dimensions of each operand (docs/ir.md, "Tensors and layouts"); hdims are static. A bias's
# bias_batch / bias_heads are 1 (broadcast) or batch / heads_q, and so is the slopes' slopes_batch.
OPERAND_DIMS = {
    "q": ("batch", "heads_q", "seqlen_q", "hdim_q"), "k": ("batch", "heads_kv", "seqlen_k", "hdim_q"),
    "v": ("batch", "heads_kv", "seqlen_k", "hdim_v"), "o": ("batch", "heads_q", "seqlen_q", "hdim_v"),
    "do": ("batch", "heads_q", "seqlen_q", "hdim_v"), "lse": ("batch", "heads_q", "seqlen_q"),
    "dq": ("batch", "heads_q", "seqlen_q", "hdim_q"), "dk": ("batch", "heads_kv", "seqlen_k", "hdim_q"),
    "dv": ("batch", "heads_kv", "seqlen_k", "hdim_v"),
    "bias": ("bias_batch", "bias_heads", "seqlen_q", "seqlen_k"),
    "dbias": ("bias_batch", "bias_heads", "seqlen_q", "seqlen_k"),
    "alibi_slopes": ("slopes_batch", "heads_q"), "dalibi_slopes": ("slopes_batch", "heads_q"),
    "dlse": ("batch", "heads_q", "seqlen_q"), "sinks": ("heads_q",), "dsinks": ("heads_q",),
}
INPUTS = ("q", "k", "v", "o", "do", "lse")
GRADS = ("dq", "dk", "dv")
BIAS_INPUTS = ("bias", "alibi_slopes")
ROW_INPUTS = ("dlse", "sinks")   # what the row stage reads besides o and do (spec.row_operands)
# What fmha.convert_grad converts: d(slopes) is f32 and summed in place, never; dsinks only from
# deterministic mode's per-row terms.
CONVERTED_GRADS = GRADS + ("dbias", "dsinks")
WAVE_REDUCE_KINDS = ("add",)
WAVE_REDUCE_WIDTHS = (2, 4, 8, 16, 32, 64)


def operand_names(spec: AttentionBwdSpec) -> tuple[str, ...]:
    """The operands of fmha.attention_bwd for `spec`: the inputs, the bias's input, dlse and the sinks,
    the gradients, the bias's gradient (AttentionBwdSpec.bias_operands), dsinks
    (AttentionBwdSpec.row_operands), varlen's cu_seqlens."""
    bias_in, bias_grad = spec.bias_operands()
    row_in, row_grad = spec.row_operands()
    return INPUTS + bias_in + row_in + GRADS + bias_grad + row_grad + varlen_operands(spec)


def varlen_operands(spec: AttentionBwdSpec) -> tuple[str, ...]:
    """What varlen adds to every problem and stage op, last: cu_seqlens_q, cu_seqlens_k."""
    return CU_SEQLENS if spec.varlen else ()


class VerifyError(FmhaError):
    """An fmha op (or the spec it would carry) breaks the IR contract."""


def _operation(op) -> "ir.Operation":
    """The ir.Operation behind an Operation or OpView."""
    return op.operation if hasattr(op, "operation") else op


def _raise_problems(name: str, problems: list[str]) -> None:
    if problems:
        raise VerifyError("\n".join(f"'{name}' op {p}" for p in problems))


def _read_checked(reader, op):
    """reader(op, problems) -> value, with any problem raised as one VerifyError."""
    op = _operation(op)
    problems: list[str] = []
    value = reader(op, problems)
    _raise_problems(op.name, problems)
    return value


def _create_checked(name: str, problems_of, results, operands, attributes, loc) -> "ir.Operation":
    """Create op `name` at the current insertion point; erase it and raise VerifyError if it breaks the contract."""
    op = ir.Operation.create(name, results=list(results), operands=list(operands), attributes=attributes, loc=loc)
    problems = problems_of(op)
    if problems:
        op.erase()
        _raise_problems(name, problems)
    return op


def _read_flag(op, name: str, problems: list[str]) -> bool:
    """An optional bool attribute of a stage op: False when absent."""
    if name not in op.attributes:
        return False
    return bool(read_attribute(op, name, "bool", problems))


def config_of(op) -> "KernelConfig":
    """The KernelConfig of a problem or stage op's `config` attribute; VerifyError if absent or bad."""
    return _read_checked(stored_config, op)


def spec_from_op(op) -> AttentionBwdSpec:
    """The AttentionBwdSpec an op's spec attributes describe; VerifyError if they are malformed or invalid.

    The scale comes back rounded to f32, as the attribute stores it.
    """
    return _read_checked(_valid_spec, op)


def _valid_spec(op: "ir.Operation", problems: list[str]) -> AttentionBwdSpec | None:
    """`op`'s spec if its spec attributes are well formed and describe a valid spec; else None, with problems."""
    spec = stored_spec(op, problems)
    reasons = [str(r) for r in spec.reasons()] if spec is not None else []
    problems += reasons
    return None if reasons else spec


# ---------------------------------------------------------------------------------------------------
# Problem and stage ops: operands are named memrefs, attributes are the spec attributes.


def tensor_kinds(spec: AttentionBwdSpec) -> dict[str, "TensorKind | tuple[TensorKind, ...]"]:
    """What each named operand of the problem and stage ops must be, for `spec` (a tuple: any of them)."""
    kinds = _padded_kinds(spec)
    if not spec.varlen:
        return kinds
    # Packed: [total, heads, D] tensors, lse [heads_q, total_q]; the workspaces stay padded per batch,
    # so an accumulating output is the packed gradient or a padded f32 workspace (fmha_mlir/varlen.py).
    packed = {name: TensorKind(TENSOR_RANK - 1, kinds[name].elements, kinds[name].hdim)
              for name in ("q", "k", "v", "o", "do", "dq", "dk", "dv")}
    packed["lse"] = packed["dlse"] = TensorKind(ROWS_RANK - 1, ("f32",))
    for grad in GRADS:
        out = kinds[f"{grad}_out"]
        packed[f"{grad}_out"] = (TensorKind(TENSOR_RANK - 1, out.elements, out.hdim),
                                 TensorKind(TENSOR_RANK, ("f32",), out.hdim))
    cu = {name: TensorKind(1, ("i32",)) for name in CU_SEQLENS}
    return {**kinds, **packed, **cu}


def _padded_kinds(spec: AttentionBwdSpec) -> dict[str, TensorKind]:
    t, f = (spec.dtype,), ("f32",)
    t_or_f32 = tuple(dict.fromkeys((spec.dtype, "f32")))  # an output a body may accumulate in f32
    q_like, v_like = spec.hdim_q, spec.hdim_v
    return {
        "q": TensorKind(TENSOR_RANK, t, q_like), "k": TensorKind(TENSOR_RANK, t, q_like),
        "v": TensorKind(TENSOR_RANK, t, v_like), "o": TensorKind(TENSOR_RANK, t, v_like),
        "do": TensorKind(TENSOR_RANK, t, v_like),
        "lse": TensorKind(ROWS_RANK, f), "d": TensorKind(ROWS_RANK, f),
        "dq": TensorKind(TENSOR_RANK, t, q_like), "dk": TensorKind(TENSOR_RANK, t, q_like),
        "dv": TensorKind(TENSOR_RANK, t, v_like),
        "dq_out": TensorKind(TENSOR_RANK, t_or_f32, q_like), "dk_out": TensorKind(TENSOR_RANK, t_or_f32, q_like),
        "dv_out": TensorKind(TENSOR_RANK, t_or_f32, v_like),
        "bias": TensorKind(TENSOR_RANK, t), "dbias": TensorKind(TENSOR_RANK, t),
        "dbias_out": TensorKind(TENSOR_RANK, t_or_f32),
        "alibi_slopes": TensorKind(SLOPES_RANK, f), "dalibi_slopes": TensorKind(SLOPES_RANK, f),
        "dalibi_slopes_out": TensorKind(SLOPES_RANK, f),
        "dlse": TensorKind(ROWS_RANK, f), "sinks": TensorKind(1, f), "dsinks": TensorKind(1, f),
        # dsinks itself (summed by atomics), or deterministic mode's per-row terms (a [B, Hq, Sq] workspace)
        "dsinks_out": TensorKind(1, f) if not spec.deterministic else TensorKind(ROWS_RANK, f),
    }


class _SpecOp:
    """An op whose operands are named memrefs and whose attributes are the spec attributes plus the
    kernel `config` (required on stage ops; the problem op gets it from fmha-select-kernel-config)."""

    NAME: ClassVar[str]
    OPERANDS: ClassVar[tuple[str, ...]]   # without a bias operand (operand_names says which a spec adds)
    CONFIG_REQUIRED: ClassVar[bool] = True

    @classmethod
    def operand_names(cls, spec: AttentionBwdSpec) -> tuple[str, ...]:
        """The op's operands for `spec`, in order (varlen's cu_seqlens last)."""
        return cls.OPERANDS + varlen_operands(spec)

    @classmethod
    def names_of(cls, op, spec: AttentionBwdSpec) -> tuple[str, ...]:
        """The operands of this op: operand_names(spec), unless an attribute of the op adds one."""
        return cls.operand_names(spec)

    @classmethod
    def named_operands(cls, op, spec: AttentionBwdSpec) -> dict[str, "ir.Value"]:
        """The op's operands by name (names_of); the op is verified, so the count is right."""
        return dict(zip(cls.names_of(op, spec), _operation(op).operands))

    @classmethod
    def build(cls, spec: AttentionBwdSpec, operands: Sequence["ir.Value"], config: KernelConfig | None = None, *,
              loc=None) -> "ir.Operation":
        """Create the op at the current insertion point; VerifyError if spec or operands break the contract."""
        return cls._create(spec, config, operands, {}, loc)

    @classmethod
    def _create(cls, spec, config, operands, extra_attributes, loc) -> "ir.Operation":
        # Check the spec before building attributes from it: MLIR aborts on some invalid values.
        _raise_problems(cls.NAME, [str(r) for r in spec.reasons()])
        attributes = {**spec_attributes(spec), **extra_attributes}
        if config is not None:
            _raise_problems(cls.NAME, [str(r) for r in config.reasons()])
            attributes[CONFIG_ATTRIBUTE] = config_attribute(config)
        return _create_checked(cls.NAME, cls.problems, [], operands, attributes, loc)

    @classmethod
    def operand(cls, op, name: str) -> "ir.Value":
        """The operand called `name` (one of operand_names of the op's spec)."""
        names = cls.names_of(op, spec_from_op(op))
        if name not in names:
            raise VerifyError(f"'{cls.NAME}' has no operand {name!r}; its operands: {', '.join(names)}")
        return _operation(op).operands[names.index(name)]

    @classmethod
    def spec(cls, op) -> AttentionBwdSpec:
        return spec_from_op(op)

    @classmethod
    def operand_kinds(cls, op: "ir.Operation", spec: AttentionBwdSpec) -> dict[str, TensorKind]:
        kinds = tensor_kinds(spec)
        return {name: kinds[name] for name in cls.names_of(op, spec)}

    @classmethod
    def problems(cls, op: "ir.Operation") -> list[str]:
        """Every contract violation of `op`; operand types are checked only once the spec and count are right."""
        problems: list[str] = []
        spec = _valid_spec(op, problems)
        config_problems: list[str] = []
        stored_config(op, config_problems, required=cls.CONFIG_REQUIRED)
        if len(op.results):
            problems.append(f"must have no results, got {len(op.results)}")
        operands = list(op.operands)
        names = cls.names_of(op, spec) if spec is not None else cls.OPERANDS
        if len(operands) != len(names):
            problems.append(f"takes {len(names)} operands ({', '.join(names)}), got {len(operands)}")
        elif spec is not None and not problems:
            kinds = cls.operand_kinds(op, spec)
            for index, (name, value) in enumerate(zip(names, operands)):
                problem = operand_problem(value.type, kinds[name])
                if problem:
                    problems.append(f"operand #{index} ('{name}'): {problem}")
        return problems + config_problems


class AttentionBwdOp(_SpecOp):
    """The whole backward: dq, dk, dv from q, k, v, o, do, lse."""

    NAME = "fmha.attention_bwd"
    OPERANDS = OPERAND_NAMES
    CONFIG_REQUIRED = False

    @classmethod
    def operand_names(cls, spec):
        return operand_names(spec)

    @classmethod
    def problems(cls, op) -> list[str]:
        problems = super().problems(op)
        spec = _valid_spec(op, [])
        if problems or spec is None or spec.varlen:   # packed operands have other dims (varlen.py checks them)
            return problems
        return _static_size_problems(dict(zip(cls.names_of(op, spec), op.operands)), spec)


def _static_size_problems(operands: dict, spec) -> list[str]:
    """Sizes that static dims fix in two places must agree (docs/ir.md's dims), and heads_q must be
    gqa_ratio x heads_kv: a contradiction would lower without an error and index out of bounds."""
    seen: dict[str, tuple[int, str]] = {}
    clashes: dict[tuple[str, int], list[str]] = {}
    for name, value in operands.items():
        shape = ir.MemRefType(value.type).shape
        for dim, size in zip(OPERAND_DIMS[name], shape):
            if size == ir.ShapedType.get_dynamic_size() or dim.startswith("hdim"):
                continue
            if dim in seen and seen[dim][0] != size:
                clashes.setdefault((dim, size), []).append(f"'{name}'")
            seen.setdefault(dim, (size, name))
    problems = [f"{dim} is {seen[dim][0]} in '{seen[dim][1]}' but {size} in {', '.join(names)}"
                for (dim, size), names in clashes.items()]
    sizes = {dim: size for dim, (size, _) in seen.items()}
    if "heads_q" in sizes and "heads_kv" in sizes and sizes["heads_q"] != spec.gqa_ratio * sizes["heads_kv"]:
        problems.append(f"heads_q {sizes['heads_q']} (in '{seen['heads_q'][1]}') must be gqa_ratio {spec.gqa_ratio} x "
                        f"heads_kv {sizes['heads_kv']} (in '{seen['heads_kv'][1]}')")
    for dim, full in (("bias_batch", "batch"), ("bias_heads", "heads_q"), ("slopes_batch", "batch")):
        if dim in sizes and sizes[dim] != 1 and full in sizes and sizes[dim] != sizes[full]:
            problems.append(f"{dim} {sizes[dim]} (in '{seen[dim][1]}') must be 1 or {full} {sizes[full]}")
    return problems


class DotDoOOp(_SpecOp):
    """D = rowsum(dO * O) (minus dlse with lse_grad), one f32 per query row; with sinks also each row's
    term of dsinks, -exp(sink - lse) D, added into dsinks_out (deterministic: stored per row)."""

    NAME = "fmha.dot_do_o"
    OPERANDS = ("o", "do", "d")

    @classmethod
    def operand_names(cls, spec):
        """o, do, [dlse], [lse, sinks], d, [dsinks_out], varlen's cu_seqlens."""
        row_in, row_grad = spec.row_operands()
        lse = ("lse",) if spec.sinks else ()
        dlse = tuple(n for n in row_in if n == "dlse")
        sinks = tuple(n for n in row_in if n == "sinks")
        return (("o", "do") + dlse + lse + sinks + ("d",) + tuple(f"{g}_out" for g in row_grad)
                + varlen_operands(spec))


class DqDkDvOp(_SpecOp):
    """The main stage; each output is T or an f32 accumulator, as the body chooses. With the attribute
    `dq_semaphores = true` (deterministic mode), an i32 [B, Hq, query blocks] operand after the gradients,
    zero-filled: the key blocks that visit a query block add their dQ into dq_out one at a time, in a
    fixed order, each waiting until that block's counter holds its turn (docs/ir.md). With
    `dq_converted = true`, two more: dq (T), which the stage writes from its f32 dq_out itself, and an i32
    [B, Hkv] counter, zero-filled, of each kv head's key blocks whose adds into dq_out are complete."""

    NAME = "fmha.dq_dk_dv"
    OPERANDS = ("q", "k", "v", "do", "lse", "d", "dq_out", "dk_out", "dv_out")
    SEMAPHORES = "dq_semaphores"
    CONVERTED = "dq_converted"
    CONVERTED_OPERANDS = ("dq", "dq_done")

    @classmethod
    def operand_names(cls, spec):
        """With a bias: its input after d, its gradient (an accumulator, or the f32 output) last."""
        bias_in, bias_grad = spec.bias_operands()
        return (cls.OPERANDS[:6] + bias_in + cls.OPERANDS[6:] + tuple(f"{g}_out" for g in bias_grad)
                + varlen_operands(spec))

    @classmethod
    def names_of(cls, op, spec):
        names = cls.operand_names(spec)
        extra = ((cls.SEMAPHORES,) if cls._read_semaphores(op, []) else ()) + (
            cls.CONVERTED_OPERANDS if _read_flag(op, cls.CONVERTED, []) else ())
        cu = len(varlen_operands(spec))
        return names[:len(names) - cu] + extra + names[len(names) - cu:]

    @classmethod
    def build(cls, spec, operands, config=None, *, dq_semaphores: bool = False, dq_converted: bool = False,
              loc=None) -> "ir.Operation":
        extra = {name: ir.BoolAttr.get(True) for name, on in ((cls.SEMAPHORES, dq_semaphores),
                                                                (cls.CONVERTED, dq_converted)) if on}
        return cls._create(spec, config, operands, extra, loc)

    @classmethod
    def _read_semaphores(cls, op, problems: list[str]) -> bool:
        return _read_flag(op, cls.SEMAPHORES, problems)

    @classmethod
    def operand_kinds(cls, op, spec):
        kinds = tensor_kinds(spec)
        kinds[cls.SEMAPHORES] = TensorKind(ROWS_RANK, ("i32",))
        kinds[cls.CONVERTED_OPERANDS[1]] = TensorKind(ROWS_RANK - 1, ("i32",))
        return {name: kinds[name] for name in cls.names_of(op, spec)}

    @classmethod
    def problems(cls, op) -> list[str]:
        problems: list[str] = []
        semaphores = cls._read_semaphores(op, problems)
        converted = _read_flag(op, cls.CONVERTED, problems)
        if problems:
            return problems
        spec = _valid_spec(op, [])
        if semaphores and spec is not None and not spec.deterministic:
            return [f"{cls.SEMAPHORES} = true orders deterministic mode's dQ adds: it needs deterministic = true"]
        if converted and spec is not None and (spec.deterministic or spec.varlen):
            return [f"{cls.CONVERTED} = true converts dQ of whole heads added in any order: not in deterministic "
                    "mode or with varlen"]
        return super().problems(op)


class ConvertGradOp(_SpecOp):
    """out (T) = factor * acc (f32) for the gradient named by the `grad` attribute; `factor` (f32,
    default 1) lets a body leave a constant scale (the tiled body's softmax scale of dQ) to the convert.
    `partials = true` (deterministic mode): acc's dims 0 and 1 are n0 and n1 times out's (dQ: n0 key
    blocks per batch; dbias: B and Hq where the bias broadcasts), and out[b, h] = factor * the sum of
    acc[b n0 + i, h n1 + j], i outer and j inner, both ascending. dQ's partials take k as a third
    operand: a row sums only the key blocks that visit its query block (config's block_m, block_n and
    the mask; the mask's offset needs seqlen_k), the only partials the tiled body writes."""

    NAME = "fmha.convert_grad"
    OPERANDS = ("acc", "out")

    @classmethod
    def names_of(cls, op, spec):
        partial_dq = cls._read_partials(op, []) and cls._read_grad(op, []) == "dq"
        names = cls.operand_names(spec)
        return names[:2] + ("k",) + names[2:] if partial_dq else names

    @classmethod
    def build(cls, spec, operands, config=None, *, grad: str | None = None, factor: float = 1.0,
              partials: bool = False, loc=None) -> "ir.Operation":
        if grad not in CONVERTED_GRADS:
            raise VerifyError(f"'{cls.NAME}' needs grad= one of {', '.join(CONVERTED_GRADS)} (got {grad!r})")
        if not (math.isfinite(factor) and factor > 0):
            raise VerifyError(f"'{cls.NAME}' needs a finite factor > 0 (got {factor!r})")
        extra = {"grad": ir.StringAttr.get(grad)}
        if factor != 1.0:
            extra["factor"] = f32(factor)
        if partials:
            extra["partials"] = ir.BoolAttr.get(True)
        return cls._create(spec, config, operands, extra, loc)

    @classmethod
    def partials_of(cls, op) -> bool:
        return _read_checked(cls._read_partials, op)

    @classmethod
    def _read_partials(cls, op, problems: list[str]) -> bool:
        return _read_flag(op, "partials", problems)

    @classmethod
    def grad_of(cls, op) -> str:
        return _read_checked(cls._read_grad, op)

    @classmethod
    def factor_of(cls, op) -> float:
        return _read_checked(cls._read_factor, op)

    @classmethod
    def _read_factor(cls, op, problems: list[str]) -> float | None:
        if "factor" not in op.attributes:
            return 1.0
        factor = read_attribute(op, "factor", "f32", problems)
        if factor is not None and not (math.isfinite(factor) and factor > 0):
            problems.append(f"attribute 'factor' must be finite and > 0, got {factor}")
            return None
        return factor

    @classmethod
    def _read_grad(cls, op, problems: list[str]) -> str | None:
        grad = read_attribute(op, "grad", "string", problems)
        if grad is not None and grad not in CONVERTED_GRADS:
            problems.append(f"attribute 'grad' must be one of {', '.join(CONVERTED_GRADS)}, got {grad!r}")
            return None
        return grad

    @classmethod
    def operand_kinds(cls, op, spec):
        grad = cls._read_grad(op, [])
        kinds = tensor_kinds(spec)
        cu = {name: kinds[name] for name in varlen_operands(spec)}
        if grad == "dsinks":   # the per-row terms [B, Hq, Sq] summed into [Hq]
            return {"acc": TensorKind(ROWS_RANK, ("f32",)), "out": kinds["dsinks"], **cu}
        like = _padded_kinds(spec)[grad]   # acc is a workspace: padded per batch, also under varlen
        return {"acc": TensorKind(like.rank, ("f32",), like.hdim), "out": kinds[grad], "k": kinds["k"], **cu}

    @classmethod
    def problems(cls, op) -> list[str]:
        grad_problems: list[str] = []
        cls._read_grad(op, grad_problems)
        if grad_problems:  # the operand kinds depend on grad: check nothing else
            return grad_problems
        spec = _valid_spec(op, [])
        grad = cls._read_grad(op, [])
        if spec is not None and grad == "dbias" and "dbias" not in spec.bias_operands()[1]:
            return ["grad 'dbias' needs a spec with bias = \"elementwise\" and dbias = true"]
        if spec is not None and grad == "dsinks" and not (spec.sinks and spec.deterministic
                                                          and cls._read_partials(op, [])):
            return ["grad 'dsinks' sums deterministic mode's per-row terms: it needs sinks = true, "
                    "deterministic = true and partials = true (otherwise dot_do_o adds dsinks by atomics)"]
        problems = super().problems(op)
        cls._read_factor(op, problems)
        if cls._read_partials(op, problems) and not (grad in ("dq", "dbias", "dsinks") and spec is not None
                                                      and spec.deterministic):
            problems.append("partials = true is deterministic mode's: it needs grad \"dq\", \"dbias\" or "
                            "\"dsinks\" and deterministic = true")
        if not problems and not spec.varlen and grad != "dsinks":   # varlen: acc padded, out packed
            acc, out = (ir.MemRefType(v.type) for v in list(op.operands)[:2])
            if not _compatible_shapes(acc, out):
                problems.append(f"operands 'acc' and 'out' must have the same shape, got {acc} and {out}")
        return problems


def _compatible_shapes(a: "ir.MemRefType", b: "ir.MemRefType") -> bool:
    """Same rank, and each dim equal where both are static (a dynamic dim may hold any size: the tiled
    body's dq accumulator has more rows than dq, padded to whole query blocks)."""
    return a.rank == b.rank and all(
        a.is_dynamic_dim(i) or b.is_dynamic_dim(i) or a.shape[i] == b.shape[i] for i in range(a.rank))


STAGE_OPS = (DotDoOOp, DqDkDvOp, ConvertGradOp)


# ---------------------------------------------------------------------------------------------------
# Kernel-level ops (inside the bodies): scalars or elementwise on 1-D vectors, and f32 buffers.


def _scalar_problems(op, operands: dict[str, str], result_type: str = "f32") -> list[str]:
    """Operand / result count and type problems; `operands` maps names to type texts (f32, index)."""
    problems = []
    values = list(op.operands)
    if len(values) != len(operands):
        described = ", ".join(f"{name}: {typ}" for name, typ in operands.items())
        problems.append(f"takes {len(operands)} operands ({described}), got {len(values)}")
    else:
        for index, (value, (name, want)) in enumerate(zip(values, operands.items())):
            if str(value.type) != want:
                problems.append(f"operand #{index} ('{name}') must be {want}, got {value.type}")
    results = list(op.results)
    if len(results) != 1 or str(results[0].type) != result_type:
        got = ", ".join(str(r.type) for r in results) or "none"
        problems.append(f"must have one {result_type} result, got {got}")
    return problems


def _create_value(name: str, problems_of, operands, attributes, loc) -> "ir.Value":
    """Build a one-f32-result kernel-level op; its result."""
    return _create_checked(name, problems_of, [ir.F32Type.get()], operands, attributes, loc).result


def _lanes_of(value_type: "ir.Type", element: str) -> int | None:
    """0 for a scalar `element`, N for vector<N x element>, None for anything else."""
    if str(value_type) == element:
        return 0
    if isinstance(value_type, ir.VectorType):
        vector = ir.VectorType(value_type)
        if vector.rank == 1 and str(vector.element_type) == element and not vector.scalable:
            return vector.shape[0]
    return None


def _elementwise_problems(op, operands: Sequence[tuple[str, str, str]]) -> list[str]:
    """Problems of an elementwise op whose first operand gives the shape (f32 or vector<N x f32>) and
    its result type. `operands`: (name, element type, kind) with kind "elementwise" (the shape, or a
    scalar broadcast to it) or "uniform" (a scalar)."""
    values = list(op.operands)
    if len(values) != len(operands):
        described = ", ".join(f"{name}: {element}" for name, element, _ in operands)
        return [f"takes {len(operands)} operands ({described}), got {len(values)}"]
    lanes = _lanes_of(values[0].type, operands[0][1])
    if lanes is None:
        return [f"operand #0 ('{operands[0][0]}') must be {operands[0][1]} or a 1-D vector of it, got {values[0].type}"]
    shape = values[0].type
    problems = []
    for index, (value, (name, element, kind)) in enumerate(zip(values, operands)):
        got = _lanes_of(value.type, element)
        allowed = (0,) if kind == "uniform" else (0, lanes)
        if got not in allowed:
            want = element if kind == "uniform" or lanes == 0 else f"{element} or vector<{lanes}x{element}>"
            problems.append(f"operand #{index} ('{name}') must be {want}, got {value.type}")
    results = list(op.results)
    if len(results) != 1 or results[0].type != shape:
        got = ", ".join(str(r.type) for r in results) or "none"
        problems.append(f"must have one result of the type of operand #0 ({shape}), got {got}")
    return problems


class WaveReduceOp:
    """An all-reduce of one f32 across `width` lanes (a butterfly)."""

    NAME = "fmha.wave_reduce"

    @classmethod
    def build(cls, x: "ir.Value", width: int, kind: str = "add", loc=None) -> "ir.Value":
        if width not in WAVE_REDUCE_WIDTHS:  # before i32() would silently wrap it
            _raise_problems(cls.NAME, [f"attribute 'width' must be a power of two from 2 to 64, got {width}"])
        attributes = {"kind": ir.StringAttr.get(kind), "width": i32(width)}
        return _create_value(cls.NAME, cls.problems, [x], attributes, loc)

    @classmethod
    def width_of(cls, op) -> int:
        return cls._read(op)[1]

    @classmethod
    def kind_of(cls, op) -> str:
        return cls._read(op)[0]

    @classmethod
    def _read(cls, op) -> tuple[str, int]:
        return _read_checked(cls._attributes, op)

    @classmethod
    def _attributes(cls, op, problems: list[str]):
        kind = read_attribute(op, "kind", "string", problems)
        if kind is not None and kind not in WAVE_REDUCE_KINDS:
            problems.append(f"attribute 'kind' must be one of {', '.join(WAVE_REDUCE_KINDS)}, got {kind!r}")
        width = read_attribute(op, "width", "i32", problems)
        if width is not None and width not in WAVE_REDUCE_WIDTHS:
            problems.append(f"attribute 'width' must be a power of two from 2 to 64, got {width}")
        return kind, width

    @classmethod
    def problems(cls, op) -> list[str]:
        problems = _scalar_problems(op, {"x": "f32"})
        cls._attributes(op, problems)
        return problems


class Exp2Op:
    """2^x of an f32 or of each element of a vector<N x f32>; exp2(-inf) = 0."""

    NAME = "fmha.exp2"

    @classmethod
    def build(cls, x: "ir.Value", loc=None) -> "ir.Value":
        return _create_checked(cls.NAME, cls.problems, [x.type], [x], {}, loc).result

    @classmethod
    def problems(cls, op) -> list[str]:
        return _elementwise_problems(op, [("x", "f32", "elementwise")])


class MaskedScoreOp:
    """dot * scale_log2 where key k_pos is visible to query q_pos under the mask and both lie inside the
    problem (q_pos < seqlen_q, k_pos < seqlen_k: fmha_mlir.mask_geometry.shown), -inf elsewhere.

    Elementwise: dot f32 or vector<N x f32>; q_pos and k_pos index or vector<N x index> (a scalar
    position applies to every element); seqlen_q, seqlen_k index."""

    NAME = "fmha.masked_score"
    OPERANDS = ("dot", "q_pos", "k_pos", "seqlen_q", "seqlen_k")
    _KINDS = (("f32", "elementwise"), ("index", "elementwise"), ("index", "elementwise"), ("index", "uniform"),
              ("index", "uniform"))

    @classmethod
    def build(cls, dot, q_pos, k_pos, seqlen_q, seqlen_k, mask: Mask, scale_log2: float, loc=None) -> "ir.Value":
        attributes = {**mask_attributes(mask), "scale_log2": f32(scale_log2)}
        return _create_checked(cls.NAME, cls.problems, [dot.type], [dot, q_pos, k_pos, seqlen_q, seqlen_k],
                               attributes, loc).result

    @classmethod
    def mask_of(cls, op) -> Mask:
        return _read_checked(cls._mask, op)

    @classmethod
    def scale_log2_of(cls, op) -> float:
        return _read_checked(cls._scale_log2, op)

    @classmethod
    def _mask(cls, op, problems: list[str]) -> Mask | None:
        mask = read_mask(op, problems)
        if mask is not None and mask.reasons():
            problems += [str(r) for r in mask.reasons()]
            return None
        return mask

    @classmethod
    def _scale_log2(cls, op, problems: list[str]) -> float | None:
        scale = read_attribute(op, "scale_log2", "f32", problems)
        if scale is not None and not (math.isfinite(scale) and scale > 0):
            problems.append(f"attribute 'scale_log2' must be finite and > 0, got {scale}")
            return None
        return scale

    @classmethod
    def problems(cls, op) -> list[str]:
        problems = _elementwise_problems(op, [(name, element, kind) for name, (element, kind)
                                              in zip(cls.OPERANDS, cls._KINDS)])
        cls._mask(op, problems)
        cls._scale_log2(op, problems)
        return problems


def _index_problems(buffer: "ir.Value", indices, first: int) -> list[str]:
    """One index-typed operand per dim of memref `buffer`, the first of them operand #first."""
    problems = []
    if len(indices) != buffer.type.rank:
        problems.append(f"needs {buffer.type.rank} indices for {buffer.type}, got {len(indices)}")
    for dim, value in enumerate(indices):
        if str(value.type) != "index":
            problems.append(f"operand #{first + dim} (index of dim {dim}) must be index, got {value.type}")
    return problems


class AtomicAddOp:
    """buffer[indices] += value: a relaxed, device-scope float add with no result. A vector<N x f32> value
    (N = 2 or 4) adds element i at the last index + i: one vector atomic where the target has one. A
    vector<2 x bf16> value adds into a bf16 buffer as one packed atomic (each half rounded to nearest
    even, no flush of denormals); its last index must be even."""

    NAME = "fmha.atomic_add"
    VECTOR_WIDTHS = (2, 4)
    PACKED_BF16 = "vector<2xbf16>"

    @classmethod
    def build(cls, value: "ir.Value", buffer: "ir.Value", indices: Sequence["ir.Value"], loc=None) -> "ir.Operation":
        return _create_checked(cls.NAME, cls.problems, [], [value, buffer, *indices], {}, loc)

    @classmethod
    def problems(cls, op) -> list[str]:
        operands = list(op.operands)
        if len(op.results):
            return [f"must have no results, got {len(op.results)}"]
        if len(operands) < 2:
            return [f"takes a value, a buffer and one index per buffer dim, got {len(operands)} operands"]
        value, buffer, indices = operands[0], operands[1], operands[2:]
        problems = []
        element = "bf16" if cls.is_packed_bf16(value) else "f32"
        if element == "f32" and str(value.type) != "f32" and cls.width_of(value) is None:
            widths = ", ".join(f"vector<{n}xf32>" for n in cls.VECTOR_WIDTHS)
            problems.append(f"operand #0 ('value') must be f32, {widths} or {cls.PACKED_BF16}, got {value.type}")
        if not isinstance(buffer.type, ir.MemRefType) or str(buffer.type.element_type) != element:
            packed = f" for a {cls.PACKED_BF16} value" if element == "bf16" else ""
            problems.append(f"operand #1 ('buffer') must be a ranked memref of {element}{packed}, got {buffer.type}")
            return problems
        return problems + _index_problems(buffer, indices, 2)

    @classmethod
    def width_of(cls, value: "ir.Value") -> int | None:
        """N of a vector<N x f32> value the op takes; None for anything else (f32 included)."""
        if not isinstance(value.type, ir.VectorType):
            return None
        t = ir.VectorType(value.type)
        if t.rank != 1 or str(t.element_type) != "f32" or t.shape[0] not in cls.VECTOR_WIDTHS:
            return None
        return t.shape[0]

    @classmethod
    def is_packed_bf16(cls, value: "ir.Value") -> bool:
        """Whether the value is the packed bf16 pair (one 32-bit atomic of two bf16 halves)."""
        return str(value.type) == cls.PACKED_BF16


class _SemaphoreOp:
    """An i32 counter of a global buffer that work-groups take turns on (deterministic dQ): the buffer, one
    index per dim, and (wait) the value to wait for. Each executing thread acts on its own element."""

    NAME: ClassVar[str]
    VALUE: ClassVar[bool]   # whether the op takes the value to wait for first

    @classmethod
    def problems(cls, op) -> list[str]:
        operands = list(op.operands)
        if len(op.results):
            return [f"must have no results, got {len(op.results)}"]
        first = 1 if cls.VALUE else 0
        if len(operands) < first + 1:
            return [f"takes {'a value, ' if cls.VALUE else ''}a buffer and one index per buffer dim, "
                    f"got {len(operands)} operands"]
        problems = []
        if cls.VALUE and str(operands[0].type) != "i32":
            problems.append(f"operand #0 ('value') must be i32, got {operands[0].type}")
        buffer, indices = operands[first], operands[first + 1:]
        if not isinstance(buffer.type, ir.MemRefType) or str(buffer.type.element_type) != "i32":
            problems.append(f"operand #{first} ('buffer') must be a ranked memref of i32, got {buffer.type}")
            return problems
        if ir.MemRefType(buffer.type).memory_space is not None:
            problems.append(f"operand #{first} ('buffer') must be in global memory, got {buffer.type}")
        return problems + _index_problems(buffer, indices, first + 1)


class SemaphoreWaitOp(_SemaphoreOp):
    """Each executing thread waits until buffer[indices] == value, then acquires at device scope: what the
    threads whose signals it observed wrote before signalling is visible to it. With `backoff_ns` (i32) a
    thread sleeps about that long between polls: for waits that may last long, whose tight polls would
    crowd the counter's cache line while the work they wait for still runs."""

    NAME = "fmha.semaphore_wait"
    VALUE = True
    BACKOFF = "backoff_ns"
    MAX_BACKOFF_NS = 1_000_000   # nanosleep's bound (PTX ISA: at most 1 ms)

    @classmethod
    def build(cls, value: "ir.Value", buffer: "ir.Value", indices: Sequence["ir.Value"], backoff_ns: int = 0,
              loc=None) -> "ir.Operation":
        attributes = {cls.BACKOFF: i32(backoff_ns)} if backoff_ns else {}
        return _create_checked(cls.NAME, cls.problems, [], [value, buffer, *indices], attributes, loc)

    @classmethod
    def problems(cls, op) -> list[str]:
        problems = super().problems(op)
        if cls.BACKOFF in op.attributes:
            cls._read_backoff(op, problems)
        return problems

    @classmethod
    def backoff_of(cls, op) -> int:
        """The op's backoff in nanoseconds; 0 (poll without pause) when absent."""
        return _read_checked(cls._read_backoff, op) if cls.BACKOFF in op.attributes else 0

    @classmethod
    def _read_backoff(cls, op, problems: list[str]) -> int | None:
        backoff = read_attribute(op, cls.BACKOFF, "i32", problems)
        if backoff is not None and not 1 <= backoff <= cls.MAX_BACKOFF_NS:
            problems.append(f"attribute '{cls.BACKOFF}' must be 1..{cls.MAX_BACKOFF_NS} ns, got {backoff}")
            return None
        return backoff


class SemaphoreSignalOp(_SemaphoreOp):
    """Each executing thread releases at device scope (its writes before it, bulk writes included once
    waited for, become visible to whoever acquires what it wrote), then adds 1 to buffer[indices]."""

    NAME = "fmha.semaphore_signal"
    VALUE = False

    @classmethod
    def build(cls, buffer: "ir.Value", indices: Sequence["ir.Value"], loc=None) -> "ir.Operation":
        return _create_checked(cls.NAME, cls.problems, [], [buffer, *indices], {}, loc)


SEMAPHORE_OPS = (SemaphoreWaitOp, SemaphoreSignalOp)
SEMAPHORE_NAMES = tuple(op.NAME for op in SEMAPHORE_OPS)
OPS = {cls.NAME: cls for cls in (AttentionBwdOp, *STAGE_OPS, WaveReduceOp, Exp2Op, MaskedScoreOp, AtomicAddOp,
                                 *SEMAPHORE_OPS)}


# ---------------------------------------------------------------------------------------------------
# Verification.


def verify_op(op) -> list[str]:
    """Messages for every contract violation of one fmha op; [] if it is fine or not an fmha op."""
    op = _operation(op)
    name = op.name
    if not name.startswith("fmha."):
        return []
    if name not in OPS:
        return [f"'{name}' is not an fmha op; known: {', '.join(sorted(OPS))}"]
    return [f"'{name}' op {p}" for p in _structure_problems(op) + OPS[name].problems(op)]


def _structure_problems(op: "ir.Operation") -> list[str]:
    """Regions and successors, which no fmha op has: a lowering that erases the op would leave the ops
    inside a region dangling (MLIR aborts on them), and a successor would make the op a terminator."""
    problems = []
    if len(op.regions):
        problems.append(f"must have no regions, got {len(op.regions)}")
    if len(op.successors):
        problems.append(f"must have no successors, got {len(op.successors)}")
    return problems


def verify_module(module_op) -> list[tuple["ir.Operation", str]]:
    """(op, message) for every contract violation of every fmha op in `module_op`, in walk order."""
    found: list[tuple[ir.Operation, str]] = []

    def visit(op):
        op = _operation(op)
        found.extend((op, message) for message in verify_op(op))
        return ir.WalkResult.ADVANCE

    _operation(module_op).walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def emit_verification_errors(module_op) -> bool:
    """Emit each violation as an MLIR error at its op's location; True when there is none."""
    found = verify_module(module_op)
    for op, message in found:
        op.location.emit_error(message)
    return not found
