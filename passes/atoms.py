"""What a tiled body asks of the hardware, as protocols: a matrix atom (one matrix instruction and how its
operands reach it) and a copy atom (how rows of a global tensor reach a shared tile).

Each instruction family implements them once: MmaSyncAtom (passes/mma_atoms.py) and MfmaAtom
(passes/mfma_atom.py); CpAsyncCopy and BufferLoadCopy (passes/copy_atoms.py). The kernel frame
(passes/tile_schedule.py, TiledKernel) holds one of each. Every position an atom reports comes from its
shape's fragments (fmha_mlir/matrix_layouts.py) evaluated on the lane, never from a formula of its own.
"""
from __future__ import annotations

from typing import Protocol

from fmha_mlir.mlir import ir

from .ix import Ix


class MmaAtom(Protocol):
    """One matrix instruction: D = A B + C on an m x n x k tile, f32 accumulators."""

    m: int
    n: int
    k: int
    shape: object            # matrix_layouts.MmaShape or MfmaShape: the fragments a, b, c
    zero: "ir.Value"         # an accumulator of zeros (built once)
    c_type: "ir.Type"

    def mma(self, a: "ir.Value", b: "ir.Value", c: "ir.Value") -> "ir.Value":
        """The product's accumulator."""

    def position(self, register: int, element: int = 0) -> tuple[Ix, Ix]:
        """(row, col) inside the m x n tile of this lane's accumulator (register, element): shape.c on the
        lane, built once per kernel."""


class CopyAtom(Protocol):
    """Global rows into a shared tile, zero past a sequence end; issued copies complete by `wait`."""

    def rows(self, source: "ir.Value", prefix: list, first: "ir.Value", limit: "ir.Value", tile,
             row_offset: "ir.Value | None") -> None:
        """Rows [first, first + tile.rows) of source[prefix..., row, :] into the tile (from row_offset),
        zeros for rows at or past `limit`."""

    def row_values(self, source: "ir.Value", prefix: list, first: "ir.Value", tile, stage: "ir.Value",
                   offset: int) -> None:
        """source[prefix..., first + i] (f32, one per query row of the block) into tile row `stage`, zero
        past seqlen_q, by threads [offset, offset + block_m)."""

    def commit(self) -> None:
        """Close the copies issued since the last commit into one group."""

    def wait(self, pending: int) -> None:
        """Wait until at most `pending` groups are in flight."""
