"""Shared tiles in wgmma's layout (sm_90a): how the copies and stores of the tiled body address them, and
the matrix descriptors its products read them through.

A copy of a tile is rows x cols 2-byte elements stored as cols / 64 blocks of rows x 128 bytes, each in
the hardware's 128-byte swizzle (fmha_mlir.wgmma_layouts.OperandTile(rows, cols), K-major). The same
bytes read MN-major are OperandTile(cols, rows, "MN") (blocks LBO = rows x 128 bytes apart), so one tile
is K, V, Q or dO as the A or B of either major: S^T = K Q^T reads K and Q K-major, dV = P^T dO reads dO
MN-major, dQ = dS K reads dS^T and K MN-major. A tile's copies (stages) follow each other, each aligned
to the swizzle's 1024-byte period, as the hardware swizzles absolute shared addresses.
"""
from __future__ import annotations

from dataclasses import dataclass

from fmha_mlir import wgmma_layouts
from fmha_mlir.bodies import SharedTile
from fmha_mlir.mlir import arith, ir, memref

from .ir_builders import index
from .ix import Ix, LaneValues, as_value
from .shared_tiles import Tile, dynamic_shared_memory, flat_shape, tile_views, value_key

SWIZZLE = 128
BLOCK = SWIZZLE // 2             # columns of one swizzled block (2-byte elements)


@dataclass(frozen=True)
class WgmmaTile:
    """One SharedTile of 2-byte elements in wgmma's layout: `flat` is memref<copies * rows * cols x T,
    workgroup>, `offset` its byte offset in dynamic shared memory."""

    flat: "ir.Value"
    offset: int
    rows: int          # rows of one copy
    cols: int

    @property
    def chunks_per_row(self) -> int:
        return self.cols // 8

    @property
    def layout(self) -> wgmma_layouts.OperandTile:
        return wgmma_layouts.OperandTile(self.rows, self.cols, "K", SWIZZLE)

    def element(self, lanes: LaneValues, row_lane: Ix, chunk_lane: "Ix | int", row: int = 0, col: int = 0,
                row_offset: "ir.Value | None" = None, chunk_offset: "ir.Value | None" = None) -> "ir.Value":
        """The flat index of logical (row_offset + row + row_lane, 8 (chunk_offset + chunk_lane) + col), as
        shared_tiles.Tile.element: row_lane < rows and chunk_lane depend on the lane alone (their swizzled
        part is built once per lane); `row` (a multiple of 8, inside one copy) and `col` are constants;
        row_offset is a multiple of 8 rows (a stage's first row, a multiple of `rows`, plus rows inside
        the copy) and chunk_offset a multiple of 8 chunks (whole blocks): neither moves the swizzle."""
        layout = self.layout
        lane_col = col % BLOCK

        def build():
            return as_value(layout.physical(row_lane, chunk_lane * 8 + lane_col) // 2)

        key = ("wgmma_tile", self.flat, as_value(row_lane), value_key(chunk_lane), lane_col)
        total = lanes.get(key, build)
        constant = layout.offset(row, col - lane_col) // 2
        if constant:
            total = arith.addi(total, index(constant))
        if chunk_offset is not None:   # (chunk_offset / 8) blocks of rows x BLOCK elements
            total = arith.addi(total, arith.muli(chunk_offset, index(self.rows * 8)))
        if row_offset is not None:
            total = arith.addi(total, arith.divui(self.row_bytes(row_offset), index(2)))
        return total

    def row_bytes(self, row: "ir.Value") -> "ir.Value":
        """Bytes from the tile's start to logical row `row` (any copy's), column 0."""
        copy, inside = arith.divui(row, index(self.rows)), arith.remui(row, index(self.rows))
        return arith.addi(arith.muli(copy, index(self.rows * self.cols * 2)), arith.muli(inside, index(SWIZZLE)))

    def bytes_at(self, row: "ir.Value | None", col: "ir.Value | None",
                 inside_block: bool = False) -> "ir.Value | None":
        """Unswizzled bytes from the tile's start to logical (row, col): row any copy's, col a multiple of
        BLOCK (a unit's first column) or, inside_block, of 8 (a narrow product's first column, whose
        descriptor starts inside a block: the hardware swizzles the absolute address). None for (0, 0)."""
        parts = []
        if row is not None:
            parts.append(self.row_bytes(row))
        if col is not None:
            parts.append(arith.muli(arith.divui(col, index(BLOCK)), index(self.rows * SWIZZLE)))
            if inside_block:
                parts.append(arith.muli(arith.remui(col, index(BLOCK)), index(2)))
        if not parts:
            return None
        total = parts[0]
        for part in parts[1:]:
            total = arith.addi(total, part)
        return total

    def operand(self, major: str) -> wgmma_layouts.OperandTile:
        """The tile as a wgmma operand: rows along MN, cols along K ("K"), or rows along K ("MN")."""
        if major == "K":
            return self.layout
        return wgmma_layouts.OperandTile(self.cols, self.rows, "MN", SWIZZLE)


def wgmma_views(layout: list[SharedTile], element: "ir.Type") -> tuple[dict, "ir.Value"]:
    """Every tile of `layout` over the kernel's dynamic shared memory: 2-byte tiles as WgmmaTile, per-query
    f32 rows as shared_tiles.Tile; and the shared memory's base address (an index) for the descriptors."""
    base = dynamic_shared_memory()
    tiles = {tile.name: (WgmmaTile(view, tile.offset, tile.rows, tile.cols) if tile.element_bytes == 2
                         else Tile(view, tile.rows, tile.cols, False))
             for tile, view in tile_views(layout, element, flat_shape, base)}
    return tiles, memref.extract_aligned_pointer_as_index(base)
