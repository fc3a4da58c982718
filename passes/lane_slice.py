"""Loads and stores of the head-dim slice one lane owns: elements [lane * E, (lane + 1) * E) of a row.

Values are handed out as E scalar f32 values (the body computes in f32 whatever the storage type).
A slice is one `vector.load` / `vector.store` of E elements, or a scalar `memref.load` / `store`
when E = 1; an E that is not a power of two (hdim 320 on a wave of 64: E = 5) is moved as
power-of-two pieces (4 + 1), because AMDGPU's instruction selection cannot widen a vector<5 x f16>
load (LLVM asserts "Unsupported extload!"). The vector accesses claim E-element alignment: the head dim is
contiguous and a multiple of E, so every dense layout (BHSD, BSHD, ...) keeps each slice aligned; strides that are not a
multiple of E are outside the kernels' contract.
"""
from __future__ import annotations

from dataclasses import dataclass

from fmha_mlir.dtypes import BYTES
from fmha_mlir.mlir import arith, ir, memref, scf, vector
from fmha_mlir.wgmma_layouts import dq_fragment_position

from .ir_builders import f32, index, memref_type, scalar_elements, splat, to_f32, vector_shape
from .ix import Ix, as_value


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
    loaded = _load_f32(buffer, row, lane_slice)
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
               factor: float = 1.0, read=None) -> None:
    """dest[row..., slice] = factor * source[row..., slice], converted through f32 as one (vector) value;
    `read` (default: as it lies) reads source's slice (read_fragments: a source in fragment order)."""
    value = (read or _load_f32)(source, row, lane_slice)
    if factor != 1.0:
        value = arith.mulf(value, splat(f32(factor), vector_shape(value.type)))
    _store(value, dest, row, lane_slice)


def read_fragments(source: "ir.Value", row: list["ir.Value"], lane_slice: LaneSlice) -> "ir.Value":
    """The slice of logical row row[-1] of a source in fragment order (wgmma_layouts.dq_fragment_position,
    which keeps each column pair together) as f32: its pairs gathered from where they lie, or its elements
    where the slice's width is odd (so that its start, lane x width, is not always a pair's)."""
    logical_row, hdim = Ix.lane(row[-1]), memref_type(source).shape[-1]
    step = 2 if lane_slice.width % 2 == 0 else 1
    elements = []
    for first in range(0, lane_slice.width, step):
        col = Ix.lane(arith.addi(lane_slice.start, index(first)) if first else lane_slice.start)
        at_row, at_col = (as_value(x) for x in dq_fragment_position(logical_row, col, hdim))
        elements += load_f32(source, row[:-1] + [at_row], LaneSlice(at_col, step))
    if lane_slice.width == 1:
        return elements[0]
    return vector.from_elements(ir.VectorType.get([lane_slice.width], ir.F32Type.get()), elements)


def copy_partial_sum(source: "ir.Value", dest: "ir.Value", row: list["ir.Value"], lane_slice: LaneSlice,
                     factor: float = 1.0, outer_range=None) -> None:
    """dest[b, h, s, slice] = factor * the sum of source[b n0 + i, h n1 + j, s, slice] (n0, n1: source's
    dims 0, 1 over dest's), i outer and j inner, both ascending: deterministic mode's partials.
    outer_range: (lo, hi) of the i that were written (the others are never read); default [0, n0)."""
    counts = [arith.divui(memref.dim(source, index(d)), memref.dim(dest, index(d))) for d in (0, 1)]
    firsts = [arith.muli(row[d], counts[d]) for d in (0, 1)]
    zero = splat(f32(0.0), [lane_slice.width] if lane_slice.width > 1 else [])
    lo, hi = outer_range or (index(0), counts[0])
    outer = scf.ForOp(lo, hi, index(1), [zero])
    with ir.InsertionPoint(outer.body):
        inner = scf.ForOp(index(0), counts[1], index(1), [outer.inner_iter_args[0]])
        with ir.InsertionPoint(inner.body):
            at = [arith.addi(firsts[0], outer.induction_variable), arith.addi(firsts[1], inner.induction_variable)]
            partial = _load_f32(source, at + row[2:], lane_slice)
            scf.yield_([arith.addf(inner.inner_iter_args[0], partial)])
        scf.yield_([inner.results[0]])
    value = outer.results[0]
    if factor != 1.0:
        value = arith.mulf(value, splat(f32(factor), vector_shape(value.type)))
    _store(value, dest, row, lane_slice)


def _pieces(width: int) -> list[tuple[int, int]]:
    """(offset, size) of the power-of-two pieces a slice of `width` elements is moved in, largest first."""
    pieces, offset = [], 0
    while offset < width:
        size = 1 << ((width - offset).bit_length() - 1)
        pieces.append((offset, size))
        offset += size
    return pieces


def _load_f32(buffer: "ir.Value", row: list["ir.Value"], lane_slice: LaneSlice) -> "ir.Value":
    """The slice as f32: a scalar when E = 1, else a vector<E x f32>, loaded piece by piece."""
    element = memref_type(buffer).element_type
    loaded = []
    for offset, size in _pieces(lane_slice.width):
        start = arith.addi(lane_slice.start, index(offset)) if offset else lane_slice.start
        indices = row + [start]
        if size == 1:
            loaded.append(to_f32(memref.load(buffer, indices)))
        else:
            loaded.append(to_f32(vector.load(ir.VectorType.get([size], element), buffer, indices,
                                             alignment=_alignment(element, lane_slice.width, offset))))
    if len(loaded) == 1:
        return loaded[0]
    scalars = [e for piece in loaded for e, in scalar_elements(vector_shape(piece.type), piece)]
    return vector.from_elements(ir.VectorType.get([lane_slice.width], ir.F32Type.get()), scalars)


def _store(value: "ir.Value", buffer: "ir.Value", row: list["ir.Value"], lane_slice: LaneSlice) -> None:
    """Store an f32 scalar / vector<E x f32> into the slice, rounded to the buffer's element type."""
    element = memref_type(buffer).element_type
    pieces = _pieces(lane_slice.width)
    for offset, size in pieces:
        piece = value if len(pieces) == 1 else _sub_vector(value, offset, size)
        start = arith.addi(lane_slice.start, index(offset)) if offset else lane_slice.start
        indices = row + [start]
        if size == 1:
            memref.store(_from_f32(piece, element), buffer, indices)
        else:
            vector.store(_from_f32(piece, element), buffer, indices,
                         alignment=_alignment(element, lane_slice.width, offset))


def _sub_vector(value: "ir.Value", offset: int, size: int) -> "ir.Value":
    """Elements [offset, offset + size) of a vector: a scalar when size is 1."""
    elements = [vector.extract(value, [], [offset + e]) for e in range(size)]
    return elements[0] if size == 1 else vector.from_elements(ir.VectorType.get([size], ir.F32Type.get()), elements)


def _from_f32(value: "ir.Value", element: "ir.Type") -> "ir.Value":
    if element == ir.F32Type.get():
        return value
    shape = vector_shape(value.type)
    return arith.truncf(ir.VectorType.get(shape, element) if shape else element, value)


def _alignment(element: "ir.Type", width: int, offset: int = 0) -> int:
    """Bytes of the largest power-of-two run of elements every start of the slice's piece at `offset`
    is a multiple of (slices start at multiples of width)."""
    runs = width & -width
    return BYTES[str(element)] * (min(runs, offset & -offset) if offset else runs)
