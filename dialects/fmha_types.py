"""The memref types of fmha operands (docs/ir.md, "Tensors and layouts"): building and checking them.

A rank-4 tensor is `memref<?x?x?xDxT, strided<[?, ?, ?, 1]>>`; a per-row tensor (lse, d) is
`memref<?x?x?xf32, strided<[?, ?, 1]>>`. The checks accept any memref that satisfies the contract
(static sizes, any outer strides, the identity layout; always the default memory space), not only
these exact spellings.
"""
from __future__ import annotations

from dataclasses import dataclass

from fmha_mlir.mlir import ir

TENSOR_RANK = 4
ROWS_RANK = 3
SLOPES_RANK = 2


def element_type(name: str) -> "ir.Type":
    """'f16' | 'bf16' | 'f32' -> the MLIR float type (in the current context)."""
    return {"f16": ir.F16Type.get, "bf16": ir.BF16Type.get, "f32": ir.F32Type.get}[name]()


def tensor_type(element: str, hdim: int | None) -> "ir.MemRefType":
    """The contract type of a [batch, heads, seqlen, hdim] tensor of `element`; hdim None: a dynamic
    innermost size (the bias's seqlen_k)."""
    inner = "?" if hdim is None else hdim
    return ir.MemRefType(ir.Type.parse(f"memref<?x?x?x{inner}x{element}, strided<[?, ?, ?, 1]>>"))


def rows_type() -> "ir.MemRefType":
    """The contract type of a [batch, heads, seqlen] f32 tensor (lse, d)."""
    return ir.MemRefType(ir.Type.parse("memref<?x?x?xf32, strided<[?, ?, 1]>>"))


@dataclass(frozen=True)
class TensorKind:
    """What one operand must be: its rank, allowed element types and static innermost size."""

    rank: int
    elements: tuple[str, ...]
    hdim: int | None = None  # None: the innermost size is free (per-row tensors)

    def contract_type(self) -> "ir.MemRefType":
        """The type the frontend gives an operand of this kind (its first element type): dynamic sizes
        and outer strides, the innermost dim contiguous (and static where the kind fixes it)."""
        inner = "?" if self.hdim is None else self.hdim
        sizes = "?x" * (self.rank - 1) + f"{inner}x{self.elements[0]}"
        strides = ", ".join(["?"] * (self.rank - 1) + ["1"])
        return ir.MemRefType(ir.Type.parse(f"memref<{sizes}, strided<[{strides}]>>"))

    def describe(self) -> str:
        elements = " or ".join(self.elements)
        inner = f", innermost dim {self.hdim}" if self.hdim is not None else ""
        return f"rank-{self.rank} memref of {elements}{inner}"


def operand_problem(value_type: "ir.Type", kinds: "TensorKind | tuple[TensorKind, ...]") -> str | None:
    """Why `value_type` is none of `kinds` (one kind, or alternatives: the first one's problem), or None."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    problems = [tensor_problem(value_type, kind) for kind in kinds]
    return None if None in problems else problems[0]


def tensor_problem(value_type: "ir.Type", kind: TensorKind) -> str | None:
    """Why `value_type` is not a `kind` tensor, or None when it is."""
    if not isinstance(value_type, ir.MemRefType):
        try:
            value_type = ir.MemRefType(value_type)
        except ValueError:
            return f"expected a {kind.describe()}, got {value_type}"
    if value_type.rank != kind.rank:
        return f"expected rank {kind.rank}, got {value_type} (rank {value_type.rank})"
    element = str(value_type.element_type)
    if element not in kind.elements:
        return f"expected element type {' or '.join(kind.elements)}, got {element} in {value_type}"
    if kind.hdim is not None and value_type.shape[-1] != kind.hdim:
        inner = "?" if value_type.is_dynamic_dim(kind.rank - 1) else value_type.shape[-1]
        return f"expected a static innermost dim of {kind.hdim}, got {inner} in {value_type}"
    if value_type.memory_space is not None:
        # The kernels take device-global buffers; another space would silently change what the pointers mean.
        return f"expected the default memory space, got {value_type.memory_space} in {value_type}"
    return _layout_problem(value_type)


def _layout_problem(value_type: "ir.MemRefType") -> str | None:
    if not (isinstance(value_type.layout, ir.StridedLayoutAttr) or _is_identity(value_type.layout)):
        return f"expected a strided or identity layout, got {value_type.layout} in {value_type}"
    strides, offset = value_type.get_strides_and_offset()
    if strides[-1] != 1:
        return f"expected the innermost dim contiguous (stride 1), got {value_type}"
    if offset != 0:
        return f"expected offset 0, got {value_type}"
    return None


def _is_identity(layout: "ir.Attribute") -> bool:
    if not isinstance(layout, ir.AffineMapAttr):
        return False
    affine_map = layout.value
    return affine_map == ir.AffineMap.get_identity(affine_map.n_dims)
