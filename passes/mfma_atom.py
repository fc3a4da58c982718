"""The AMD matrix atom: amdgpu.mfma (wave64) with operand fragments read from LDS tiles.

The AMD tiled body (passes/tiled_body_mfma.py; docs/design/tiled-body.md, section 5) is written against
this atom as the sm_90 body is against mma_atoms.MmaSyncAtom. There is no ldmatrix: each lane reads its
own A or B fragment, KL elements contiguous along k (8 bytes, ds_read_b64, for the KL = 4 instructions;
16 bytes, ds_read_b128, for gfx950's KL = 8), from a row-major tile whose rows are the operand's m (A)
or n (B) and whose columns are k; from a tile stored the other way round, KL single-element reads.
Lane layouts come from fmha_mlir/matrix_layouts.py, which the interpreter's amdgpu.mfma reads too.
"""
from __future__ import annotations

from fmha_mlir import matrix_layouts
from fmha_mlir.mlir import arith, ir, memref, vector

from .ir_builders import create_op, index, splat
from .shared_tiles import LaneValues

_I32 = ir.IntegerType.get_signless


class MfmaAtom:
    """One MFMA shape (matrix_layouts.MFMA_SHAPES) for f16 / bf16 operands and f32 accumulators."""

    def __init__(self, shape: matrix_layouts.MfmaShape, element: "ir.Type", lane: "ir.Value", lanes: LaneValues):
        self.shape, self.element, self.lanes = shape, element, lanes
        self.m, self.n, self.k = shape.m, shape.n, shape.k
        kl = shape.k_per_lane
        with lanes.hoist:
            # A: row lane % M, k from KL (lane / M); B: column lane % N, k from KL (lane / N).
            self.a_row = arith.remui(lane, index(shape.m))
            self.a_k = arith.muli(arith.divui(lane, index(shape.m)), index(kl))
            self.b_col = arith.remui(lane, index(shape.n))
            self.b_k = arith.muli(arith.divui(lane, index(shape.n)), index(kl))
            # Accumulator register r: row 4 G (r / 4) + 4 (lane / N) + r % 4, column lane % N.
            self.c_row = arith.muli(arith.divui(lane, index(shape.n)), index(4))
            self.zero = splat(arith.constant(ir.F32Type.get(), 0.0), [shape.c_registers])
        self.operand_type = ir.VectorType.get([kl], element)
        self.c_type = ir.VectorType.get([shape.c_registers], ir.F32Type.get())

    def load_a(self, tile: "ir.Value", row0, k0) -> "ir.Value":
        """A fragment of rows [row0, row0 + M) x k [k0, k0 + K) of `tile` ([rows x k], row-major)."""
        return vector.load(self.operand_type, tile, [_plus(row0, self.a_row), _plus(k0, self.a_k)])

    def load_b(self, tile: "ir.Value", col0, k0) -> "ir.Value":
        """B fragment of columns [col0, col0 + N) x k [k0, k0 + K), read from `tile` holding B^T
        ([n x k], row-major: each lane's KL elements contiguous)."""
        return vector.load(self.operand_type, tile, [_plus(col0, self.b_col), _plus(k0, self.b_k)])

    def load_a_transposed(self, tile: "ir.Value", row0, k0) -> "ir.Value":
        """The same A fragment read from a tile holding A^T ([k x rows], row-major): KL single-element
        reads down a column (ds_read_u16), since the lane's k run is not contiguous there."""
        return self._gather(tile, _plus(k0, self.a_k), _plus(row0, self.a_row))

    def load_b_transposed(self, tile: "ir.Value", col0, k0) -> "ir.Value":
        """The same B fragment read from a tile holding B itself ([k x n], row-major): KL single-element reads."""
        return self._gather(tile, _plus(k0, self.b_k), _plus(col0, self.b_col))

    def _gather(self, tile, k, other) -> "ir.Value":
        items = [memref.load(tile, [k if i == 0 else arith.addi(k, index(i)), other])
                 for i in range(self.shape.k_per_lane)]
        return vector.from_elements(self.operand_type, items)

    def accumulator_rows(self) -> list["ir.Value"]:
        """Row (inside the M x N tile) of each accumulator register of this lane; the column is b_col."""
        return [self.accumulator_position(r)[0] for r in range(self.shape.c_registers)]

    def mma(self, a: "ir.Value", b: "ir.Value", c: "ir.Value") -> "ir.Value":
        """D = A B + C: one block, no broadcast, no B-lane permutation."""
        attributes = {"m": ir.IntegerAttr.get(_I32(32), self.m), "n": ir.IntegerAttr.get(_I32(32), self.n),
                      "k": ir.IntegerAttr.get(_I32(32), self.k), "blocks": ir.IntegerAttr.get(_I32(32), 1),
                      "cbsz": ir.IntegerAttr.get(_I32(32), 0), "abid": ir.IntegerAttr.get(_I32(32), 0),
                      "blgp": ir.Attribute.parse("#rocdl<mfma_perm_b none>")}
        return create_op("amdgpu.mfma", self.c_type, [a, b, c], attributes)

    def accumulator_position(self, register: int) -> tuple["ir.Value", "ir.Value"]:
        """(row, col) inside the M x N tile of accumulator register `register` of this lane."""
        groups = matrix_layouts.WAVE64 // self.n
        row = self.lanes.get(("mfma_c_row", register),
                             lambda: arith.addi(self.c_row, index(4 * groups * (register // 4) + register % 4)))
        return row, self.b_col


def _plus(base, offset: "ir.Value") -> "ir.Value":
    if isinstance(base, int):
        return offset if base == 0 else arith.addi(offset, index(base))
    return arith.addi(base, offset)
