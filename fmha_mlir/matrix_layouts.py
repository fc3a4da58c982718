"""Lane layouts of the matrix instructions the tiled body uses (numpy only: importable without MLIR).

One description per instruction, read by both sides: the tiled body asks it which matrix element each
register of each lane holds (to address shared memory, mask scores, store accumulators), and the CPU
interpreter asks it how to gather a warp's registers into matrices and scatter the product back.
A wrong entry here would fool both sides alike, so the tables are also checked against the vendors'
documents by the tests (test_interp_nvgpu.py, against the PTX ISA's figures) and against the
hardware (tools/differential.py runs the same bundle on the H200 and in the interpreter).

Conventions: `lane` in [0, 32) for NVIDIA; registers are numbered as the MLIR vector type orders them
(`vector<R x 2 x T>`: register r, element e); every function returns (row, col) of the matrix element.

mma.sync.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), with
group = lane / 4 and thread = lane % 4:
  A (16x16, row major) vector<4x2xT>: register r holds row group + 8 * (r % 2), columns
      thread * 2 + e + 8 * (r // 2)
  B (16x8, "col": K x N)  vector<2x2xT>: register r holds rows (k) thread * 2 + e + 8 * r, column (n) group
  C, D (16x8, f32)       vector<2x2xf32>: register r holds row group + 8 * r, columns thread * 2 + e

ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 (PTX ISA, "ldmatrix"): lanes 8i .. 8i+7 give the
row addresses (16 bytes each) of matrix i; register i of every lane receives from matrix i the elements
(row lane / 4, columns 2 * (lane % 4) + e), or with .trans (rows 2 * (lane % 4) + e, column lane / 4).
"""
from __future__ import annotations

from dataclasses import dataclass

WARP = 32


def mma_a(lane: int, register: int, element: int) -> tuple[int, int]:
    """(row, col) of A[16][16] held by (lane, register, element) of mma.m16n8k16."""
    group, thread = divmod(lane, 4)
    return group + 8 * (register % 2), thread * 2 + element + 8 * (register // 2)


def mma_b(lane: int, register: int, element: int) -> tuple[int, int]:
    """(k, n) of B[16][8] held by (lane, register, element) of mma.m16n8k16."""
    group, thread = divmod(lane, 4)
    return thread * 2 + element + 8 * register, group


def mma_c(lane: int, register: int, element: int) -> tuple[int, int]:
    """(row, col) of C/D[16][8] held by (lane, register, element) of mma.m16n8k16."""
    group, thread = divmod(lane, 4)
    return group + 8 * register, thread * 2 + element


def ldmatrix(lane: int, element: int, transpose: bool) -> tuple[int, int]:
    """(row, col) inside each 8x8 matrix of what `lane` receives as `element` of every register."""
    group, thread = divmod(lane, 4)
    if transpose:
        return thread * 2 + element, group
    return group, thread * 2 + element


def ldmatrix_address_lane(matrix: int, row: int) -> int:
    """The lane whose address names `row` of matrix `matrix` (lanes 8i..8i+7: matrix i)."""
    return 8 * matrix + row


@dataclass(frozen=True)
class MmaShape:
    """An mma instruction's shape and the vector types of its fragments (registers x elements)."""

    m: int
    n: int
    k: int
    a_registers: int
    b_registers: int
    c_registers: int
    elements: int = 2


MMA_M16N8K16 = MmaShape(16, 8, 16, a_registers=4, b_registers=2, c_registers=2)


# --- AMD MFMA (wave64) ------------------------------------------------------------------------------
#
# From AMD's CDNA3 ISA guide (MI300, "Matrix Fused-Multiply-Add (MFMA)", the dependent-operand layout
# tables) and the CDNA4 guide (MI350) for the double-K variants, as AMD's matrix instruction calculator
# prints them (`--detail-instruction`), for one block (blocks = 1, cbsz = abid = 0, blgp = none):
#   A (M x K) vector<KL x T>: lane l holds row l % M, columns KL * (l // M) + i   (i < KL)
#   B (K x N) vector<KL x T>: lane l holds rows KL * (l // N) + i, column l % N
#   C, D (M x N) vector<M*N/64 x f32>: register r of lane l holds column l % N and row
#       8 * (r // 4) + 4 * (l // 32) + r % 4 for 32x32 tiles, 4 * (l // 16) + r for 16x16 tiles,
#       i.e. 4-row groups, the 64 / N lane groups of a wave taking consecutive groups.
# KL = K * M / 64 elements per lane: 4 for 32x32x8 and 16x16x16 (gfx942 and gfx950), 8 for 32x32x16 and
# 16x16x32 (gfx950 only). The tests derive the same tables a second way, from composable_kernel's
# xdlops parameters (group size, input blocks, threads per block, k per block).


@dataclass(frozen=True)
class MfmaShape:
    """One MFMA instruction (f16 / bf16 operands, f32 accumulators) and the chips that have it."""

    m: int
    n: int
    k: int
    chips: tuple[str, ...]

    @property
    def k_per_lane(self) -> int:
        return self.k * self.m // WAVE64

    @property
    def c_registers(self) -> int:
        return self.m * self.n // WAVE64

    @property
    def name(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


WAVE64 = 64
MFMA_SHAPES = {s.name: s for s in (MfmaShape(32, 32, 8, ("gfx942", "gfx950")), MfmaShape(16, 16, 16, ("gfx942", "gfx950")),
                                   MfmaShape(32, 32, 16, ("gfx950",)), MfmaShape(16, 16, 32, ("gfx950",)))}


def mfma_a(shape: MfmaShape, lane: int, item: int) -> tuple[int, int]:
    """(row, k) of A[M][K] held by element `item` of `lane`'s A operand."""
    return lane % shape.m, shape.k_per_lane * (lane // shape.m) + item


def mfma_b(shape: MfmaShape, lane: int, item: int) -> tuple[int, int]:
    """(k, col) of B[K][N] held by element `item` of `lane`'s B operand."""
    return shape.k_per_lane * (lane // shape.n) + item, lane % shape.n


def mfma_c(shape: MfmaShape, lane: int, register: int) -> tuple[int, int]:
    """(row, col) of C/D[M][N] held by accumulator register `register` of `lane`."""
    groups = WAVE64 // shape.n            # lane groups of a wave: 2 for 32x32, 4 for 16x16
    return 4 * groups * (register // 4) + 4 * (lane // shape.n) + register % 4, lane % shape.n
