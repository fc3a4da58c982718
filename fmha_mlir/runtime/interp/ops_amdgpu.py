"""AMD matrix cores: amdgpu.mfma (wave64), emulated with the lane layouts of fmha_mlir/matrix_layouts.py.

An MFMA is wave-collective: all 64 lanes of a wave take part, and a divergent or partial wave is an
error (the hardware reads the inactive lanes' registers anyway). Only the plain form is modelled:
one block, no broadcast (cbsz = abid = 0), no B-lane permutation (blgp = none), f16 / bf16 operands
into f32 accumulators; anything else is an error naming the attribute.
"""
from __future__ import annotations

import numpy as np

from ... import matrix_layouts as layouts
from .compiler import KernelCompiler
from .lanes import require_whole_groups
from .parser import Operation
from .types import VectorType
from .values import to_lanes

WAVE = layouts.WAVE64
OPERAND_TYPES = ("f16", "bf16")
PLAIN = {"blocks": 1, "cbsz": 0, "abid": 0}
NOT_MODELLED = ("reducePrecision", "negateA", "negateB", "negateC")


def _positions(layout, shape, items: int, cols: int) -> np.ndarray:
    """[WAVE, items]: row * cols + col of the matrix element each lane's item holds."""
    return np.array([[layout(shape, lane, i)[0] * cols + layout(shape, lane, i)[1] for i in range(items)]
                     for lane in range(WAVE)])


def _holders(positions: np.ndarray) -> np.ndarray:
    """The inverse: for each matrix element (row-major), its index lane * items + item in the wave."""
    holders = np.zeros(positions.size, dtype=np.int64)
    holders[positions.reshape(-1)] = np.arange(positions.size)
    return holders


def _tables(shape: layouts.MfmaShape):
    a = _positions(layouts.mfma_a, shape, shape.k_per_lane, shape.k)
    b = _positions(layouts.mfma_b, shape, shape.k_per_lane, shape.n)
    c = _positions(layouts.mfma_c, shape, shape.c_registers, shape.n)
    return _holders(a), _holders(b), _holders(c), c


TABLES = {name: _tables(shape) for name, shape in layouts.MFMA_SHAPES.items()}


def compile_mfma(op: Operation, cc: KernelCompiler):
    """D = A * B + C per wave, computed in float64 from the exact f16 / bf16 products and rounded once to
    f32 (as mma.sync is modelled: the hardware's contract, exact products and at least f32 sums, without
    inventing an order of additions)."""
    a, b, c = cc.operands(op)
    out = cc.result(op)
    name = "x".join(str(cc.int_attr(op, d)) for d in ("m", "n", "k"))
    shape = layouts.MFMA_SHAPES.get(name)
    if shape is None:
        raise cc.error(op, f"MFMA {name} is not modelled (only {', '.join(layouts.MFMA_SHAPES)})")
    for attr, want in PLAIN.items():
        if attr in op.attributes and cc.int_attr(op, attr) != want:
            raise cc.error(op, f"{attr} = {cc.int_attr(op, attr)} is not modelled (only {want})")
    if "blgp" in op.attributes and "none" not in str(cc.attr(op, "blgp")):
        raise cc.error(op, f"blgp {cc.attr(op, 'blgp')} is not modelled (only none)")
    for attr in NOT_MODELLED:
        if attr in op.attributes:
            raise cc.error(op, f"{attr} is not modelled")
    ta, tb, tc = op.operand_types
    for role, t, length, elems in (("A", ta, shape.k_per_lane, OPERAND_TYPES), ("B", tb, shape.k_per_lane, OPERAND_TYPES),
                                   ("C", tc, shape.c_registers, ("f32",)),
                                   ("the result", op.result_types[0], shape.c_registers, ("f32",))):
        if not isinstance(t, VectorType) or t.shape != (length,) or t.elem.name not in elems:
            raise cc.error(op, f"{role} has type {t}, expected vector<{length}x{' or '.join(elems)}> for {name}")
    if ta.elem != tb.elem:
        raise cc.error(op, f"A and B must have one element type (got {ta}, {tb})")
    a_holders, b_holders, c_holders, d_positions = TABLES[name]
    what = cc.describe(op)

    def run(st, mask):
        env, g = st.env, st.grid
        require_whole_groups(st, mask, WAVE, what, "wave")

        def matrix(slot, holders, rows, cols):
            per_wave = to_lanes(env[slot], g.lanes, 1).reshape(-1, holders.size)
            return per_wave[:, holders].astype(np.float64).reshape(-1, rows, cols)

        d = (np.matmul(matrix(a, a_holders, shape.m, shape.k), matrix(b, b_holders, shape.k, shape.n))
             + matrix(c, c_holders, shape.m, shape.n)).astype(np.float32).reshape(-1, shape.m * shape.n)
        env[out] = d[:, d_positions].reshape(g.lanes, shape.c_registers)

    return run


HANDLERS = {"amdgpu.mfma": compile_mfma}
