"""Loads and stores of the head-dim slice one lane owns: elements [lane * E, (lane + 1) * E) of a row.

Values are handed out as E scalar f32 values (the body computes in f32 whatever the storage type).
A slice is one `vector.load` / `vector.store` of E elements, or a scalar `memref.load` / `store`
when E = 1. The vector accesses claim E-element alignment: the head dim is contiguous and a multiple
of E, so every dense layout (BHSD, BSHD, ...) keeps each slice aligned; strides that are not a
multiple of E are outside the kernels' contract.
"""
from __future__ import annotations

from dataclasses import dataclass

from fmha_mlir.dtypes import BYTES
from fmha_mlir.mlir import arith, ir, memref, scf, vector

from .ir_builders import f32, index, memref_type, splat, to_f32, vector_shape


@dataclass(frozen=True)
class LaneSlice:
    """The `width` consecutive head-dim elements starting at `start` (= lane * width)."""

    start: "ir.Value"
    width: int

    @staticmethod
    def of_lane(lane: "ir.Value", width: int) -> "LaneSlice":
        return LaneSlice(arith.muli(lane, index(width)) if width > 1 else lane, width)

    def elements(self) -> list["ir.Value"]:
        """The head-dim index of each element of this slice."""
        return [arith.addi(self.start, index(e)) if e else self.start for e in range(self.width)]


def load_f32(buffer: "ir.Value", row: list["ir.Value"], lane_slice: LaneSlice) -> list["ir.Value"]:
    """The slice of `buffer[row..., :]` as `lane_slice.width` f32 values."""
    loaded = to_f32(_load(buffer, row, lane_slice))
    if lane_slice.width == 1:
        return [loaded]
    return [vector.extract(loaded, [], [e]) for e in range(lane_slice.width)]


def store_from_f32(values: list["ir.Value"], buffer: "ir.Value", row: list["ir.Value"],
                   lane_slice: LaneSlice) -> None:
    """Store f32 `values` into the slice of `buffer[row..., :]`, rounded to its element type."""
    packed = values[0]
    if lane_slice.width > 1:
        packed = vector.from_elements(ir.VectorType.get([lane_slice.width], ir.F32Type.get()), values)
    _store(packed, buffer, row, lane_slice)


def copy_slice(source: "ir.Value", dest: "ir.Value", row: list["ir.Value"], lane_slice: LaneSlice,
               factor: float = 1.0) -> None:
    """dest[row..., slice] = factor * source[row..., slice], converted through f32 as one (vector) value."""
    value = to_f32(_load(source, row, lane_slice))
    if factor != 1.0:
        value = arith.mulf(value, splat(f32(factor), vector_shape(value.type)))
    _store(value, dest, row, lane_slice)


def copy_partial_sum(source: "ir.Value", dest: "ir.Value", row: list["ir.Value"], lane_slice: LaneSlice,
                     factor: float = 1.0) -> None:
    """dest[b, h, s, slice] = factor * the sum of source[b n0 + i, h n1 + j, s, slice] (n0, n1: source's
    dims 0, 1 over dest's), i outer and j inner, both ascending: deterministic mode's partials."""
    counts = [arith.divui(memref.dim(source, index(d)), memref.dim(dest, index(d))) for d in (0, 1)]
    firsts = [arith.muli(row[d], counts[d]) for d in (0, 1)]
    zero = splat(f32(0.0), [lane_slice.width] if lane_slice.width > 1 else [])
    outer = scf.ForOp(index(0), counts[0], index(1), [zero])
    with ir.InsertionPoint(outer.body):
        inner = scf.ForOp(index(0), counts[1], index(1), [outer.inner_iter_args[0]])
        with ir.InsertionPoint(inner.body):
            at = [arith.addi(firsts[0], outer.induction_variable), arith.addi(firsts[1], inner.induction_variable)]
            partial = to_f32(_load(source, at + row[2:], lane_slice))
            scf.yield_([arith.addf(inner.inner_iter_args[0], partial)])
        scf.yield_([inner.results[0]])
    value = outer.results[0]
    if factor != 1.0:
        value = arith.mulf(value, splat(f32(factor), vector_shape(value.type)))
    _store(value, dest, row, lane_slice)


def _load(buffer: "ir.Value", row: list["ir.Value"], lane_slice: LaneSlice) -> "ir.Value":
    """The slice in the buffer's element type: a scalar when E = 1, else a vector<E x T>."""
    element = memref_type(buffer).element_type
    indices = row + [lane_slice.start]
    if lane_slice.width == 1:
        return memref.load(buffer, indices)
    return vector.load(ir.VectorType.get([lane_slice.width], element), buffer, indices,
                       alignment=_alignment(element, lane_slice.width))


def _store(value: "ir.Value", buffer: "ir.Value", row: list["ir.Value"], lane_slice: LaneSlice) -> None:
    """Store an f32 scalar / vector<E x f32> into the slice, rounded to the buffer's element type."""
    element = memref_type(buffer).element_type
    value = _from_f32(value, element)
    indices = row + [lane_slice.start]
    if lane_slice.width == 1:
        memref.store(value, buffer, indices)
    else:
        vector.store(value, buffer, indices, alignment=_alignment(element, lane_slice.width))


def _from_f32(value: "ir.Value", element: "ir.Type") -> "ir.Value":
    if element == ir.F32Type.get():
        return value
    shape = vector_shape(value.type)
    return arith.truncf(ir.VectorType.get(shape, element) if shape else element, value)


def _alignment(element: "ir.Type", width: int) -> int:
    """Bytes of the largest power-of-two run of elements every slice start is a multiple of."""
    return BYTES[str(element)] * (width & -width)
