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
