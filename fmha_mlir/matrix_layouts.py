"""Lane layouts of the matrix instructions and shared tiles the tiled body uses (numpy only: importable
without MLIR): the one place that says which matrix element each lane holds or addresses.

Every function here is written over number-like values and evaluated three ways: on Python ints (the
CPU interpreter tabulates them to gather a warp's registers into matrices and scatter the product
back), on NumPy arrays (tests and bank-conflict checks, all lanes at once) and on passes.ix.Ix (the
lowering: the tiled body's atoms build each lane's positions as index arithmetic, once per lane). A
wrong entry here therefore fools the interpreter and the lowering alike, so the tables are also checked
against the vendors' documents by the tests (test_interp_nvgpu.py, against the PTX ISA's figures;
test_interp_mfma.py, against composable_kernel's parameters) and against the hardware
(tools/differential.py runs the same bundle on the H200 and in the interpreter). A lane argument is
non-negative; the other arguments (register, element, item, matrix counts) are Python ints.

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
from typing import Callable

import numpy as np

WARP = 32


@dataclass(frozen=True)
class Fragment:
    """One operand of one matrix instruction as a warp holds it: `coord(lane, register, element)` is the
    (row, col) of the rows x cols matrix that element `element` of register `register` of `lane` holds
    (CuTe's thread-value layout). `lane` may be an int, a NumPy array or an Ix."""

    rows: int
    cols: int
    lanes: int
    registers: int
    elements: int
    coord: Callable

    def __call__(self, lane, register: int, element: int = 0):
        return self.coord(lane, register, element)

    def positions(self, lane) -> list[tuple[int, int, object, object]]:
        """(register, element, row, col) of every element `lane` holds, registers outermost."""
        return [(r, e, *self.coord(lane, r, e)) for r in range(self.registers) for e in range(self.elements)]

    def offset(self, register: int, element: int = 0) -> tuple[int, int]:
        """(rows, cols) from where a lane's register 0, element 0 lies to where (register, element) lies:
        the same for every lane (each layout here is a lane part plus a register part), so the lowering
        builds a lane's first position once and adds constants. ValueError if it depends on the lane."""
        lanes = np.arange(self.lanes)
        (row0, col0), (row, col) = self.coord(lanes, 0, 0), self.coord(lanes, register, element)
        rows, cols = np.unique(row - row0), np.unique(col - col0)
        if len(rows) != 1 or len(cols) != 1:
            raise ValueError(f"register {register}, element {element} is not a lane-independent offset")
        return int(rows[0]), int(cols[0])


def warp_coordinates(lane):
    """(matrix, group, thread, row8): the coordinates the PTX ISA writes the mma.sync and ldmatrix figures
    in: ldmatrix's address matrix lane / 8 and row lane % 8, mma's groupID lane / 4 and threadID_in_group
    lane % 4. Every NVIDIA layout below starts from them (the lowering builds each once per lane)."""
    matrix = lane // 8
    group, thread = divmod(lane, 4)
    return matrix, group, thread, lane % 8


def mma_a(lane: int, register: int, element: int) -> tuple[int, int]:
    """(row, col) of A[16][16] held by (lane, register, element) of mma.m16n8k16."""
    _, group, thread, _ = warp_coordinates(lane)
    return group + 8 * (register % 2), thread * 2 + element + 8 * (register // 2)


def mma_b(lane: int, register: int, element: int) -> tuple[int, int]:
    """(k, n) of B[16][8] held by (lane, register, element) of mma.m16n8k16."""
    _, group, thread, _ = warp_coordinates(lane)
    return thread * 2 + element + 8 * register, group


def mma_c(lane: int, register: int, element: int) -> tuple[int, int]:
    """(row, col) of C/D[16][8] held by (lane, register, element) of mma.m16n8k16."""
    _, group, thread, _ = warp_coordinates(lane)
    return group + 8 * register, thread * 2 + element


def ldmatrix(lane: int, element: int, transpose: bool) -> tuple[int, int]:
    """(row, col) inside each 8x8 matrix of what `lane` receives as `element` of every register."""
    _, group, thread, _ = warp_coordinates(lane)
    if transpose:
        return thread * 2 + element, group
    return group, thread * 2 + element


def ldmatrix_address_lane(matrix: int, row: int) -> int:
    """The lane whose address names `row` of matrix `matrix` (lanes 8i..8i+7: matrix i)."""
    return 8 * matrix + row


def ldmatrix_address(lane, matrices: int, rows_first: bool):
    """(row, chunk): the row of a 16-row block and the 16-byte chunk (8 columns) of a 16-column block whose
    address `lane` gives to an ldmatrix of `matrices` (2 or 4) 8x8 matrices covering the block.
    `rows_first`: matrix i lies at rows +8 (i % 2), chunk i // 2 (A, or B stored k-major); else at rows
    +8 (i // 2), chunk i % 2 (A^T via .trans, or B stored n-major). An x2 covers one chunk (rows_first)
    or 8 rows, and its lanes 16-31 repeat lanes 0-15's addresses."""
    matrix, _, _, row8 = warp_coordinates(lane)
    low, high = matrix % 2, matrix // 2
    if matrices == 2:
        return (row8 + low * 8, 0) if rows_first else (row8, low)
    return (row8 + low * 8, high) if rows_first else (row8 + high * 8, low)


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


    @property
    def a(self) -> Fragment:
        return Fragment(self.m, self.k, WARP, self.a_registers, self.elements, mma_a)

    @property
    def b(self) -> Fragment:
        return Fragment(self.k, self.n, WARP, self.b_registers, self.elements, mma_b)

    @property
    def c(self) -> Fragment:
        return Fragment(self.m, self.n, WARP, self.c_registers, self.elements, mma_c)


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

    @property
    def a(self) -> Fragment:
        """vector<KL x T>: one register of KL elements."""
        return Fragment(self.m, self.k, WAVE64, 1, self.k_per_lane, lambda lane, _, item: mfma_a(self, lane, item))

    @property
    def b(self) -> Fragment:
        return Fragment(self.k, self.n, WAVE64, 1, self.k_per_lane, lambda lane, _, item: mfma_b(self, lane, item))

    @property
    def c(self) -> Fragment:
        """vector<M*N/64 x f32>: registers of one element."""
        return Fragment(self.m, self.n, WAVE64, self.c_registers, 1,
                        lambda lane, register, _: mfma_c(self, lane, register))


WAVE64 = 64
MFMA_SHAPES = {s.name: s for s in (MfmaShape(32, 32, 8, ("gfx942", "gfx950")),
                                   MfmaShape(16, 16, 16, ("gfx942", "gfx950")),
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
    return 4 * (lane // shape.n) + (4 * groups * (register // 4) + register % 4), lane % shape.n


# --- shared-memory tiles --------------------------------------------------------------------------------
#
# A 2-byte tile is row-major [rows x cols] in 16-byte chunks of 8 elements. With the "xor" swizzle a row's
# chunk c is stored at c ^ ((row / g) mod p), p the largest power of two dividing the chunks per row (at
# most 8) and g = 8 / p: the 8 rows one ldmatrix (or one wave of cp.async) touches at the same logical
# chunk then sit in 8 different 16-byte bank groups (test_shared_tiles.py checks it for every row width).

SWIZZLE_ROWS = 8   # rows one ldmatrix reads at one chunk


def swizzle_period(chunks_per_row: int) -> tuple[int, int]:
    """(p, g): the XOR spans p chunks and changes every g rows."""
    p = min(chunks_per_row & -chunks_per_row, SWIZZLE_ROWS)
    return p, SWIZZLE_ROWS // p


def swizzled_chunk(chunk, row, chunks_per_row: int):
    """Where logical chunk `chunk` of row `row` is stored under the "xor" swizzle."""
    p, g = swizzle_period(chunks_per_row)
    if p == 1:
        return chunk
    return chunk ^ (row // g) % p


def copy_chunk(index, chunks_per_row: int):
    """(row, chunk) of the `index`-th 16-byte chunk of a row-major tile: thread t of a copy takes chunks
    t, t + threads, ..."""
    return divmod(index, chunks_per_row)


def warp_block(warp, layout: tuple[int, int], rows: int, cols: int):
    """(first row, first col) of warp `warp`'s block of a rows x cols product split over a
    (along rows, along cols) grid of warps, row-major: block (warp / along_cols, warp % along_cols)."""
    return warp // layout[1] * (rows // layout[0]), warp % layout[1] * (cols // layout[1])
