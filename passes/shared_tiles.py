"""Tiles in dynamic shared memory: flat views and the swizzled address of each 16-byte chunk.

A tile is row-major [rows x cols] of 2-byte elements (or [1 x n] f32 rows of per-query values). With the
"xor" swizzle a row's 16-byte chunk index c is stored at c ^ ((row / g) mod p), p the largest power of
two dividing the chunks per row (at most 8) and g = 8 / p: the 8 rows one ldmatrix (or one wave of
cp.async) touches at the same logical chunk then sit in 8 different 16-byte bank groups
(test_shared_tiles.py checks the formula for every row width). ncu still counts some conflicted
shared wavefronts at d128 (tools/reports/bench_notes.md): not every access is an 8-row chunk read.

Addresses are built so that the loop pays one add per access: every access reads rows r0 + lane_row
with r0 a multiple of 8 (a warp's, a stage's or an instruction tile's first row) and lane_row < 8 *
(something the lane alone decides), so the XOR phase depends on the lane only; the lane's part of each
address is computed once, before the main loop (`LaneValues`), and each access adds constants and the
loop-invariant warp / stage offsets to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fmha_mlir.bodies import COPY_ELEMENTS, SharedTile
from fmha_mlir.mlir import arith, gpu, ir, memref

from .ir_builders import index

ROW_GROUP = 8   # rows one ldmatrix reads at one chunk


def swizzle_period(chunks_per_row: int) -> tuple[int, int]:
    """(p, g): the XOR spans p chunks and changes every g rows."""
    p = min(chunks_per_row & -chunks_per_row, ROW_GROUP)
    return p, ROW_GROUP // p


def physical_chunk(chunk: int, row: int, chunks_per_row: int) -> int:
    """Where logical chunk `chunk` of row `row` is stored (the host-side formula, for tests)."""
    p, g = swizzle_period(chunks_per_row)
    return chunk ^ ((row // g) % p)


@dataclass
class LaneValues:
    """Values that depend on the lane (and warp) only, built once at the kernel's start: `hoist` is an
    insertion point before the first op of the body proper, so they dominate every use."""

    hoist: "ir.InsertionPoint"
    cache: dict = field(default_factory=dict)

    def get(self, key, build) -> "ir.Value":
        if key not in self.cache:
            with self.hoist:
                self.cache[key] = build()
        return self.cache[key]


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

    def element(self, lanes: LaneValues, row_lane: "ir.Value", chunk_lane: "ir.Value", row: int = 0,
                col: int = 0, row_offset: "ir.Value | None" = None, chunk_offset: "ir.Value | None" = None
                ) -> "ir.Value":
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

    def _period(self) -> int:
        return swizzle_period(self.chunks_per_row)[0] if self.swizzled else self.chunks_per_row

    def _lane_part(self, lanes: LaneValues, row_lane, chunk_lane, chunk_offset, col: int) -> "ir.Value":
        """row_lane * cols + 8 * ((chunk_offset + chunk_lane + col / 8) ^ phase(row_lane)), built once."""
        p, g = swizzle_period(self.chunks_per_row) if self.swizzled else (self.chunks_per_row, 1)

        def build():
            chunk = chunk_lane
            if chunk_offset is not None:
                chunk = arith.addi(chunk, chunk_offset)
            if col:
                chunk = arith.addi(chunk, index(col // COPY_ELEMENTS))
            if self.swizzled and p > 1:
                phase = arith.remui(arith.divui(row_lane, index(g)) if g > 1 else row_lane, index(p))
                chunk = arith.xori(chunk, phase)
            return arith.addi(arith.muli(row_lane, index(self.cols)), arith.muli(chunk, index(COPY_ELEMENTS)))

        key = (id(self.flat), self.cols, id(row_lane), id(chunk_lane), id(chunk_offset), col)
        return lanes.get(key, build)


def shared_views(layout: list[SharedTile], element: "ir.Type", swizzle: bool) -> dict[str, Tile]:
    """Flat views of every tile of `layout` over the kernel's dynamic shared memory."""
    return {tile.name: Tile(view, tile.rows, tile.cols, swizzle and tile.element_bytes == 2)
            for tile, view in _views(layout, element, lambda tile: [tile.rows * tile.cols * tile.copies])}


def shared_grids(layout: list[SharedTile], element: "ir.Type") -> dict[str, "ir.Value"]:
    """Row-major 2-D views [copies * rows x pitch] of every tile of `layout` (padded or plain; the
    pad columns are never read)."""
    shape = lambda tile: [tile.rows * tile.copies, tile.pitch]
    return {tile.name: view for tile, view in _views(layout, element, shape)}


def _views(layout: list[SharedTile], element: "ir.Type", shape) -> list[tuple[SharedTile, "ir.Value"]]:
    workgroup = ir.Attribute.parse("#gpu.address_space<workgroup>")
    base = gpu.dynamic_shared_memory(ir.MemRefType.get([ir.ShapedType.get_dynamic_size()],
                                                       ir.IntegerType.get_signless(8), memory_space=workgroup))
    out = []
    for tile in layout:
        typ = ir.F32Type.get() if tile.element_bytes == 4 else element
        view_type = ir.MemRefType.get(shape(tile), typ, memory_space=workgroup)
        out.append((tile, memref.view(view_type, base, index(tile.offset), [])))
    return out
