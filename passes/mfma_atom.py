"""The AMD matrix atom: amdgpu.mfma (wave64) with operand fragments read from LDS tiles.

The FlashAttention backward schedule (passes/flash_bwd.py; docs/design/tiled-body.md) runs on this atom
on gfx942 / gfx950 as it runs on mma_atoms.MmaSyncAtom on sm_90. There is no ldmatrix: each lane reads its
own A or B fragment, KL elements contiguous along k (8 bytes, ds_read_b64, for the KL = 4 instructions;
16 bytes, ds_read_b128, for gfx950's KL = 8), from a row-major tile whose rows are the operand's m (A)
or n (B) and whose columns are k; from a tile stored the other way round, KL single-element reads.
Lane layouts come from fmha_mlir/matrix_layouts.py, which the interpreter's amdgpu.mfma reads too.
"""
from __future__ import annotations

from fmha_mlir import matrix_layouts
from fmha_mlir.mlir import arith, ir, memref, vector

from .atoms import Operand, Registers, SynchronousAtom
from .ir_builders import create_op, index, splat
from .ix import Ix, LaneValues, as_value
from .shared_tiles import Grid, shared_grids

_I32 = ir.IntegerType.get_signless


class MfmaAtom(SynchronousAtom):
    """One MFMA shape (matrix_layouts.MFMA_SHAPES) for f16 / bf16 operands and f32 accumulators; each
    lane's positions come from the shape's fragments (shape.a, shape.b, shape.c), built once per lane."""

    def __init__(self, shape: matrix_layouts.MfmaShape, element: "ir.Type", lane: "ir.Value", lanes: LaneValues):
        self.shape, self.element, self.lanes = shape, element, lanes
        self.m, self.n, self.k = shape.m, shape.n, shape.k
        self.lane = Ix.lane(lane, lanes)
        for operand in ("a", "b", "c"):   # each lane's first positions, built when the atom is made
            self._first(operand)
        with lanes.hoist:
            self.zero = splat(arith.constant(ir.F32Type.get(), 0.0), [shape.c_registers])
        self.operand_type = ir.VectorType.get([shape.k_per_lane], element)
        self.c_type = ir.VectorType.get([shape.c_registers], ir.F32Type.get())
        # A lane's accumulator is one column, rows in groups of 4: one group of every register.
        self.group_axis, self.group_count, self.group_width = "row", 1, shape.c_registers

    def _first(self, operand: str) -> tuple[Ix, Ix]:
        """(row, col) of the first element this lane holds of operand A, B or C."""
        return getattr(self.shape, operand)(self.lane, 0, 0)

    def load_a(self, tile: Grid, row0, k0) -> "ir.Value":
        """A fragment of rows [row0, row0 + M) x k [k0, k0 + K) of `tile` ([rows x k], row-major)."""
        row, k = self._first("a")
        return vector.load(self.operand_type, tile.view, [_plus(row0, row), _plus(k0, k)])

    def load_b(self, tile: Grid, col0, k0) -> "ir.Value":
        """B fragment of columns [col0, col0 + N) x k [k0, k0 + K), read from `tile` holding B^T
        ([n x k], row-major: each lane's KL elements contiguous)."""
        k, col = self._first("b")
        return vector.load(self.operand_type, tile.view, [_plus(col0, col), _plus(k0, k)])

    def load_a_transposed(self, tile: Grid, row0, k0) -> "ir.Value":
        """The same A fragment read from a tile holding A^T ([k x rows], row-major): KL single-element
        reads down a column (ds_read_u16), since the lane's k run is not contiguous there."""
        row, k = self._first("a")
        return self._gather(tile, "a", _plus(k0, k), _plus(row0, row))

    def load_b_transposed(self, tile: Grid, col0, k0) -> "ir.Value":
        """The same B fragment read from a tile holding B itself ([k x n], row-major): KL single-element reads."""
        k, col = self._first("b")
        return self._gather(tile, "b", _plus(k0, k), _plus(col0, col))

    def _gather(self, tile: Grid, operand: str, k, other) -> "ir.Value":
        """The operand's items from tile[k + item's k offset, other] (its row or column stays: the offsets
        along m / n are 0)."""
        fragment = getattr(self.shape, operand)
        steps = [fragment.offset(0, i)[1 if operand == "a" else 0] for i in range(self.shape.k_per_lane)]
        items = [memref.load(tile.view, [k if step == 0 else arith.addi(k, index(step)), other]) for step in steps]
        return vector.from_elements(self.operand_type, items)

    def mma(self, a: "ir.Value", b: "ir.Value", c: "ir.Value") -> "ir.Value":
        """D = A B + C: one block, no broadcast, no B-lane permutation."""
        attributes = {"m": ir.IntegerAttr.get(_I32(32), self.m), "n": ir.IntegerAttr.get(_I32(32), self.n),
                      "k": ir.IntegerAttr.get(_I32(32), self.k), "blocks": ir.IntegerAttr.get(_I32(32), 1),
                      "cbsz": ir.IntegerAttr.get(_I32(32), 0), "abid": ir.IntegerAttr.get(_I32(32), 0),
                      "blgp": ir.Attribute.parse("#rocdl<mfma_perm_b none>")}
        return create_op("amdgpu.mfma", self.c_type, [a, b, c], attributes)

    def position(self, register: int, element: int = 0) -> tuple[Ix, Ix]:
        """(row, col) inside the M x N tile of accumulator register `register` of this lane (shape.c; one
        element per register)."""
        return self.shape.c(self.lane, register, element)

    def group_offset(self, group: int, element: int) -> tuple[int, int]:
        return self.shape.c.offset(element)

    def groups(self, c: "ir.Value") -> list["ir.Value"]:
        return [c]

    def shared_tiles(self, layout: list, config) -> dict:
        """Row-major 2-D grids (padded pitches, no swizzle: each lane reads its own fragment)."""
        return shared_grids(layout, self.element)

    # -- a warp's tile of a product ---------------------------------------------------------------------

    def gemm(self, acc: list[list["ir.Value"]], tile, k_extent: int, a: "Operand | Registers",
             b: Operand, wait: bool = True) -> list[list["ir.Value"]]:
        """acc[mi][ni] += A[mi-th M rows] B[ni-th N cols] over k_extent, K at a time; each fragment is
        read once per k step and used by every tile of its row or column."""
        if isinstance(a, Registers):
            raise ValueError("an MFMA accumulator is not an A fragment: P^T and dS^T go through LDS")
        m_tiles, n_tiles = tile.rows // self.m, tile.cols // self.n
        for k0 in range(0, k_extent, self.k):
            fragments_a = [self._fragment(a, "a", mi * self.m, k0) for mi in range(m_tiles)]
            fragments_b = [self._fragment(b, "b", ni * self.n, k0) for ni in range(n_tiles)]
            for mi in range(m_tiles):
                for ni in range(n_tiles):
                    acc[mi][ni] = self.mma(fragments_a[mi], fragments_b[ni], acc[mi][ni])
        return acc

    def _fragment(self, operand: Operand, which: str, first: int, k0: int) -> "ir.Value":
        """Operand A's rows (B's columns) [first, first + M (N)) at k0, from wherever the warp's part of
        the tile starts: along the tile's rows when k-major, along its columns when not."""
        if operand.k_major:
            load = self.load_a if which == "a" else self.load_b
            return load(operand.tile, arith.addi(operand.row, index(first)), k0)
        load = self.load_a_transposed if which == "a" else self.load_b_transposed
        k = k0 if operand.row is None else arith.addi(operand.row, index(k0))
        return load(operand.tile, arith.addi(operand.col, index(first)), k)

    def store_groups(self, tile: Grid, values, row: "ir.Value", col: "ir.Value") -> None:
        """One element per register: a lane's registers are rows of one column."""
        lane_row, lane_col = (as_value(x) for x in self.position(0))
        for mi, tiles in enumerate(values):
            for ni, (acc,) in enumerate(tiles):
                at_col = arith.addi(arith.addi(col, index(ni * self.n)), lane_col)
                rounded = arith.truncf(ir.VectorType.get([self.shape.c_registers], self.element), acc)
                for r in range(self.shape.c_registers):
                    at_row = arith.addi(arith.addi(row, index(mi * self.m + self.shape.c.offset(r)[0])), lane_row)
                    memref.store(vector.extract(rounded, [], [r]), tile.view, [at_row, at_col])


def _plus(base, offset: Ix) -> "ir.Value":
    offset = as_value(offset)
    if isinstance(base, int):
        return offset if base == 0 else arith.addi(offset, index(base))
    return arith.addi(base, offset)
