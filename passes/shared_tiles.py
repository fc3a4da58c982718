"""Tiles in dynamic shared memory: flat views and the swizzled address of each 16-byte chunk.

A tile is row-major [rows x cols] of 2-byte elements (or [1 x n] f32 rows of per-query values). With the
"xor" swizzle a row's 16-byte chunk is stored where matrix_layouts.swizzled_chunk puts it, so that the 8
rows one ldmatrix (or one wave of cp.async) touches at the same logical chunk sit in 8 different 16-byte
bank groups. ncu still counts some conflicted shared wavefronts at d128 (reports/bench_notes.md):
not every access is an 8-row chunk read.

Addresses are built so that the loop pays one add per access: every access reads rows r0 + lane_row
with r0 a multiple of 8 (a warp's, a stage's or an instruction tile's first row) and lane_row < 8 *
(something the lane alone decides), so the XOR phase depends on the lane only; the lane's part of each
address is computed once, before the main loop (`LaneValues`), and each access adds constants and the
loop-invariant warp / stage offsets to it.
"""
from __future__ import annotations

from dataclasses import dataclass

from fmha_mlir.bodies import COPY_ELEMENTS, SharedTile
from fmha_mlir.matrix_layouts import swizzle_period, swizzled_chunk
from fmha_mlir.mlir import arith, gpu, ir, memref, vector

from .ir_builders import index
from .ix import Ix, LaneValues, as_value


@dataclass(frozen=True)
class Tile:
    """One SharedTile: a flat view memref<copies * rows * cols x T, workgroup> and its swizzle."""

    flat: "ir.Value"
    rows: int          # rows of one copy
    cols: int
    swizzled: bool

    @property
    def chunks_per_row(self) -> int:
        return self.cols // COPY_ELEMENTS

    def element(self, lanes: LaneValues, row_lane: Ix, chunk_lane: "Ix | int", row: int = 0, col: int = 0,
                row_offset: "ir.Value | None" = None, chunk_offset: "ir.Value | None" = None) -> "ir.Value":
        """The flat index of logical (row_offset + row + row_lane, 8 (chunk_offset + chunk_lane) + col).

        row_lane < 8 and chunk_lane depend on the lane alone, chunk_offset on the warp (both go through
        the XOR, in the part built once per lane); `row` and `col` are constants (col a multiple of 8),
        row_offset a loop-variant multiple of 8 rows (a stage, a warp's rows): added as is."""
        period = self._period() * COPY_ELEMENTS
        hoisted = self._lane_part(lanes, row_lane, chunk_lane, chunk_offset, col % period)
        total = hoisted
        constant = row * self.cols + col - col % period
        if constant:
            total = arith.addi(total, index(constant))
        if row_offset is not None:
            total = arith.addi(total, arith.muli(row_offset, index(self.cols)))
        return total

    def values(self, stage: "ir.Value", col: "ir.Value", width: int) -> "ir.Value":
        """`width` adjacent f32 of a per-query-row tile ([copies x cols]) from copy `stage`, column `col`."""
        at = arith.addi(arith.muli(stage, index(self.cols)), col)
        return vector.load(ir.VectorType.get([width], ir.F32Type.get()), self.flat, [at], alignment=4 * width)

    def _period(self) -> int:
        return swizzle_period(self.chunks_per_row)[0] if self.swizzled else self.chunks_per_row

    def _lane_part(self, lanes: LaneValues, row_lane: Ix, chunk_lane, chunk_offset, col: int) -> "ir.Value":
        """row_lane * cols + 8 * swizzled(chunk_offset + chunk_lane + col / 8, row_lane), built once."""
        def build():
            chunk = chunk_lane
            if chunk_offset is not None:
                chunk = chunk + Ix.lane(chunk_offset, lanes)
            chunk = chunk + col // COPY_ELEMENTS
            if self.swizzled:
                chunk = swizzled_chunk(chunk, row_lane, self.chunks_per_row)
            return as_value(row_lane * self.cols + chunk * COPY_ELEMENTS)

        key = (self.flat, self.cols, as_value(row_lane), value_key(chunk_lane), chunk_offset, col)
        return lanes.get(key, build)


def value_key(x):
    """A LaneValues key part for an Ix or a constant (Ix wraps a fresh object each time; its value does not)."""
    return as_value(x) if isinstance(x, Ix) else x


def shared_views(layout: list[SharedTile], element: "ir.Type", swizzle: bool) -> dict[str, Tile]:
    """Flat views of every tile of `layout` over the kernel's dynamic shared memory."""
    return {tile.name: Tile(view, tile.rows, tile.cols, swizzle and tile.element_bytes == 2)
            for tile, view in tile_views(layout, element, flat_shape)}


@dataclass(frozen=True)
class Grid:
    """One SharedTile as a row-major 2-D view [copies * rows x pitch] (padded or plain; the pad columns
    are never read)."""

    view: "ir.Value"
    rows: int          # rows of one copy
    cols: int          # columns that hold data

    def values(self, stage: "ir.Value", col: "ir.Value", width: int) -> "ir.Value":
        """`width` adjacent f32 of a per-query-row grid from row `stage`, column `col` (width 1: a scalar)."""
        if width == 1:
            return memref.load(self.view, [stage, col])
        return vector.load(ir.VectorType.get([width], ir.F32Type.get()), self.view, [stage, col])


def shared_grids(layout: list[SharedTile], element: "ir.Type") -> dict[str, Grid]:
    """Grids over every tile of `layout`."""
    shape = lambda tile: [tile.rows * tile.copies, tile.pitch]
    return {tile.name: Grid(view, tile.rows, tile.cols) for tile, view in tile_views(layout, element, shape)}


def dynamic_shared_memory() -> "ir.Value":
    """The kernel's dynamic shared memory as memref<?xi8, workgroup> (1024-byte aligned: extern_dynamic_shared)."""
    workgroup = ir.Attribute.parse("#gpu.address_space<workgroup>")
    return gpu.dynamic_shared_memory(ir.MemRefType.get([ir.ShapedType.get_dynamic_size()],
                                                       ir.IntegerType.get_signless(8), memory_space=workgroup))


def flat_shape(tile: SharedTile) -> list[int]:
    """A tile's every copy as one flat memref."""
    return [tile.rows * tile.cols * tile.copies]


def tile_views(layout: list[SharedTile], element: "ir.Type", shape, base: "ir.Value | None" = None
               ) -> list[tuple[SharedTile, "ir.Value"]]:
    """(tile, a view of shape(tile) over `base`, the kernel's dynamic shared memory unless given) for every
    tile of `layout`: f32 for 4-byte tiles, `element` for the others."""
    workgroup = ir.Attribute.parse("#gpu.address_space<workgroup>")
    base = dynamic_shared_memory() if base is None else base
    out = []
    for tile in layout:
        typ = ir.F32Type.get() if tile.element_bytes == 4 else element
        view_type = ir.MemRefType.get(shape(tile), typ, memory_space=workgroup)
        out.append((tile, memref.view(view_type, base, index(tile.offset), [])))
    return out
