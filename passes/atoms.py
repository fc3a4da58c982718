"""What the FlashAttention backward schedule (passes/flash_bwd.py) asks of the hardware, as protocols: a
matrix atom (one matrix instruction, how its operands reach it from shared memory and where its
accumulator elements lie) and a copy atom (how rows of a global tensor reach a shared tile).

Each instruction family implements them once: MmaSyncAtom (passes/mma_atoms.py), WgmmaMmaAtom
(passes/wgmma_mma_atom.py) and MfmaAtom (passes/mfma_atom.py); CpAsyncCopy and BufferLoadCopy
(passes/copy_atoms.py). Every position an atom
reports comes from its shape's fragments (fmha_mlir/matrix_layouts.py) evaluated on the lane, never from a
formula of its own.

An accumulator's elements come in *groups*: the elements one vector value of the atom holds, which share
one coordinate. mma.sync's two registers are groups of two adjacent columns of one row (`group_axis =
"col"`: the group runs along the columns); an MFMA accumulator is one group of rows of one column
(`group_axis = "row"`). The schedule computes on groups, so each instruction keeps its natural vector
width, and asks the atom where a group's elements lie.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fmha_mlir.mlir import ir

from .ix import Ix


@dataclass(frozen=True)
class Operand:
    """A product's operand read from a shared tile: the tile's rows are the operand's k (`k_major` False)
    or its m / n (`k_major` True: each row holds a k run). `row` and `col` (index values or None for 0)
    are where this warp's part of the operand starts in the tile: a stage's rows, a warp's rows or
    columns."""

    tile: object
    k_major: bool
    row: "ir.Value | None" = None
    col: "ir.Value | None" = None


@dataclass(frozen=True)
class Registers:
    """An A operand taken from accumulators of an earlier product (mma.sync and wgmma: their C layout is
    their A layout): groups[mi][ni] are the groups of the accumulator tile that holds A's rows mi, k
    columns ni, as the atom's `registers` made them."""

    groups: list


class MmaAtom(Protocol):
    """One matrix instruction: D = A B + C on an m x n x k tile, f32 accumulators."""

    m: int
    n: int
    k: int
    shape: object            # matrix_layouts.MmaShape or MfmaShape: the fragments a, b, c
    zero: "ir.Value"         # an accumulator of zeros (built once)
    c_type: "ir.Type"
    group_axis: str          # "col" or "row": the axis along which a group's elements run
    group_count: int         # groups per accumulator
    group_width: int         # elements per group

    asynchronous: bool       # products complete after gemm returns, at `complete` (wgmma); else at once

    def gemm(self, acc: list[list["ir.Value"]], tile, k_extent: int, a: "Operand | Registers",
             b: Operand, wait: bool = True) -> list[list["ir.Value"]]:
        """acc[mi][ni] += A B over k_extent for one unit's tile of the output (flash_bwd.WarpTile: its
        rows // m by cols // n instruction tiles), unrolled. An asynchronous atom with wait=False leaves
        the products in flight as one group: their results are read only after `complete`."""

    def complete(self, pending: int) -> None:
        """Wait until at most `pending` groups of products are in flight (nothing to do for a synchronous atom)."""

    def narrowed(self, cols: int) -> "MmaAtom":
        """The atom for a product whose unit tile is `cols` columns wide: a narrower one where the
        instruction has one and `cols` is not whole n-tiles (wgmma: m64n32 for S^T split over two
        warpgroups, and for d192's 96 head-dim columns a warpgroup), else this atom. Its accumulators are
        its own (zero, groups)."""

    def registers(self, groups: list) -> Registers:
        """Accumulator groups (f32, [mi][ni][g]) as the A operand of a later product, in the form the atom
        keeps it (wgmma: packed 16-bit pairs, made at once so that the f32 values die early)."""

    def groups(self, c: "ir.Value") -> list["ir.Value"]:
        """The accumulator's groups (vector<group_width x f32> each)."""

    def position(self, register: int, element: int = 0) -> tuple[Ix, Ix]:
        """(row, col) inside the m x n tile of this lane's accumulator (register, element) (shape.c on the
        lane); (0, 0) is the lane's first element."""

    def group_offset(self, group: int, element: int) -> tuple[int, int]:
        """(rows, cols) from this lane's first element to element `element` of group `group`: constants
        of the layout (shape.c.offset), so a lane builds one position and adds them."""

    def store_groups(self, tile, values: list[list[list["ir.Value"]]], row: "ir.Value",
                     col: "ir.Value") -> None:
        """Round f32 groups values[mi][ni][g] of a warp's tile (its first element at (row, col) of the
        shared tile) to the element type and store them."""

    def shared_tiles(self, layout: list, config) -> dict:
        """The kernel's shared tiles (bodies.SharedTile layout) as the atom's loads and stores address them."""

    def shared_written(self) -> None:
        """Make this thread's completed copies and stores into the tiles visible to the atom's operand
        reads; the schedule calls it before the barrier that publishes them (wgmma: a proxy fence)."""


class SynchronousAtom:
    """What an MmaAtom whose products complete at issue and whose operand reads see ordinary shared-memory
    writes after a barrier (mma.sync, MFMA) does for the protocol's asynchronous parts: nothing."""

    asynchronous = False

    def complete(self, pending: int) -> None:
        """Nothing in flight."""

    def narrowed(self, cols: int) -> "SynchronousAtom":
        return self   # one n: the unit tiles are whole instruction tiles (TiledBody._tile_reasons)

    def registers(self, groups: list) -> Registers:
        return Registers(groups)

    def shared_written(self) -> None:
        """Nothing to do: the operand loads see what the copies and stores wrote once the barrier orders them."""


class CopyAtom(Protocol):
    """Global rows into a shared tile, zero past a sequence end; issued copies complete by `wait`."""

    def rows(self, source: "ir.Value", prefix: list, first: "ir.Value", limit: "ir.Value", tile,
             row_offset: "ir.Value | None") -> None:
        """Rows [first, first + tile.rows) of source[prefix..., row, :] into the tile (from row_offset),
        zeros for rows at or past `limit` and for the tile's columns past the source's head dim."""

    def row_values(self, source: "ir.Value", prefix: list, first: "ir.Value", tile, stage: "ir.Value",
                   offset: int, fill: float = 0.0) -> None:
        """source[prefix..., first + i] (f32, one per query row of the block) into tile row `stage`, `fill`
        past seqlen_q, by threads [offset, offset + block_m)."""

    def commit(self) -> None:
        """Close the copies issued since the last commit into one group."""

    def wait(self, pending: int) -> None:
        """Wait until at most `pending` groups are in flight."""
