"""AMD ops: amdgpu.mfma (wave64), emulated with the lane layouts of fmha_mlir/matrix_layouts.py, and
amdgpu.raw_buffer_load with the buffer's out-of-range rule.

An MFMA is wave-collective: all 64 lanes of a wave take part, and a divergent or partial wave is an
error (the hardware reads the inactive lanes' registers anyway). Only the plain form is modelled:
one block, no broadcast (cbsz = abid = 0), no B-lane permutation (blgp = none), f16 / bf16 operands
into f32 accumulators; anything else is an error naming the attribute.
"""
from __future__ import annotations

import numpy as np

from ... import matrix_layouts as layouts
from .compiler import KernelCompiler
from .errors import InterpreterError
from .lanes import require_whole_groups
from .memory import to_values
from .ops_memory import segments
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
    for role, t, length, elems in (("A", ta, shape.k_per_lane, OPERAND_TYPES),
                                   ("B", tb, shape.k_per_lane, OPERAND_TYPES),
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


def compile_raw_buffer_load(op: Operation, cc: KernelCompiler):
    """The element at memref.load's linear index, in a buffer from the memref's offset on of num_records =
    max over dims of size x stride elements (MLIR's lowering: the memref as one flat range, so an index past
    the end of a row but inside the buffer reads the next row). A load wholly outside returns zeros (boundsCheck, the
    default; a negative i32 index is a huge unsigned offset); one partly outside is chipset-dependent
    (MLIR's documentation) and an error here, as is any out-of-range load without boundsCheck.
    indexOffset and sgprOffset are not modelled."""
    (mem,), indices, sgpr = segments(op, cc)
    if sgpr or "indexOffset" in op.attributes:
        raise cc.error(op, "indexOffset / sgprOffset are not modelled")
    checked = bool(cc.attr(op, "boundsCheck")) if "boundsCheck" in op.attributes else True
    t, mem_t = op.result_types[0], op.operand_types[0]
    extent = t.shape[0] if isinstance(t, VectorType) else 1
    if (t.elem if isinstance(t, VectorType) else t) != mem_t.elem:
        raise cc.error(op, f"loads {t} from a memref of {mem_t.elem}")
    out = cc.result(op)
    what = cc.describe(op)

    def run(st, mask):
        env, g = st.env, st.grid
        m = env[mem]
        # The buffer starts at the memref's offset (MLIR's bufferPtr); sizes may differ per lane (a view
        # of one varlen sequence), and so may the record count.
        linear = np.broadcast_to(sum(np.asarray(env[i], np.int64) * s for i, s in zip(indices, m.strides)),
                                 (g.lanes,))
        records = np.zeros(g.lanes, np.int64)
        for size, stride in zip(m.sizes, m.strides):
            records = np.maximum(records, np.asarray(size, np.int64) * stride)
        inside = (linear >= 0) & (linear + extent <= records)
        outside = (linear < 0) | (linear >= records)
        active = np.ones(g.lanes, bool) if mask is None else mask
        bad = active & ~inside & ~outside if checked else active & ~inside
        if bad.any():
            lane = int(np.argmax(bad))
            rule = ("partly outside the buffer (chipset-dependent)" if checked
                    else "outside the buffer without boundsCheck")
            raise InterpreterError(f"{what}: {g.describe(lane)} loads elements [{int(linear[lane])}, "
                                   f"{int(linear[lane]) + extent}) of a {int(records[lane])}-element buffer: {rule}")
        flat = (np.where(inside, linear, 0) + m.offset)[:, None] + np.arange(extent, dtype=np.int64)
        values = to_values(m.storage.take(flat, mode="clip"), m.elem)
        values = np.where(inside[:, None], values, np.zeros((), values.dtype))
        env[out] = values if isinstance(t, VectorType) else values[:, 0]

    return run


HANDLERS = {"amdgpu.mfma": compile_mfma, "amdgpu.raw_buffer_load": compile_raw_buffer_load}
