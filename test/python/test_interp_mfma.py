"""AMD MFMA (wave64): the lane layouts of fmha_mlir/matrix_layouts.py against a second source, and the
interpreter's amdgpu.mfma against NumPy for every modelled instruction; and amdgpu.raw_buffer_load's
out-of-range rule (the AMD tiled body's copies read rows past the sequence end as zeros).

The layouts in matrix_layouts.py are written from AMD's CDNA3 / CDNA4 ISA guides ("Matrix Fused-Multiply-
Add", the operand layout tables, as AMD's matrix instruction calculator prints them). The second source
here is composable_kernel's description of the same instructions (include/ck/tensor_operation/gpu/warp/
xdlops_gemm.hpp, `mfma_type<...>`): group_size, num_input_blks, num_threads_per_blk and k_per_blk, from
which CK derives every lane's rows and columns (a lane is (blk_id, blk_td) = divmod(lane, threads per
block); A and B rows / columns are blk_td, their k starts at blk_id * k_per_blk; accumulator register r is
row (r // group_size) * num_input_blks * group_size + blk_id * group_size + r % group_size, column blk_td).
"""
from dataclasses import dataclass

import numpy as np
import pytest

from fmha_mlir import matrix_layouts as layouts
from fmha_mlir.runtime.interp import InterpreterError

from interp_support import random_values, run


@dataclass(frozen=True)
class CkMfma:
    """composable_kernel's parameters of one MFMA (mfma_type<...> in xdlops_gemm.hpp)."""

    group_size: int
    num_input_blks: int
    num_threads_per_blk: int
    k_per_blk: int


CK = {"32x32x8": CkMfma(4, 2, 32, 4),     # mfma_f32_32x32x8bf16_1k / mfma_f32_32x32x8f16
      "16x16x16": CkMfma(4, 4, 16, 4),    # mfma_f32_16x16x16bf16_1k / mfma_f32_16x16x16f16
      "32x32x16": CkMfma(4, 2, 32, 8),    # mfma_f32_32x32x16bf16 / f16 (gfx950)
      "16x16x32": CkMfma(4, 4, 16, 8)}    # mfma_f32_16x16x32bf16 / f16 (gfx950)


def ck_a(p: CkMfma, lane: int, item: int):
    blk_id, blk_td = divmod(lane, p.num_threads_per_blk)
    return blk_td, blk_id * p.k_per_blk + item


def ck_b(p: CkMfma, lane: int, item: int):
    blk_id, blk_td = divmod(lane, p.num_threads_per_blk)
    return blk_id * p.k_per_blk + item, blk_td


def ck_c(p: CkMfma, lane: int, register: int):
    blk_id, blk_td = divmod(lane, p.num_threads_per_blk)
    group, i = divmod(register, p.group_size)
    return group * p.num_input_blks * p.group_size + blk_id * p.group_size + i, blk_td


@pytest.mark.parametrize("name", sorted(layouts.MFMA_SHAPES))
def test_mfma_layouts_agree_with_composable_kernel(name):
    shape, ck = layouts.MFMA_SHAPES[name], CK[name]
    assert shape.k_per_lane == ck.k_per_blk
    lanes = range(layouts.WAVE64)
    for mine, theirs, items, extent in ((layouts.mfma_a, ck_a, shape.k_per_lane, (shape.m, shape.k)),
                                        (layouts.mfma_b, ck_b, shape.k_per_lane, (shape.k, shape.n)),
                                        (layouts.mfma_c, ck_c, shape.c_registers, (shape.m, shape.n))):
        table = [[mine(shape, lane, i) for i in range(items)] for lane in lanes]
        assert table == [[theirs(ck, lane, i) for i in range(items)] for lane in lanes], mine.__name__
        # every element of the operand is held exactly once in the wave
        assert sorted(e for row in table for e in row) == [(r, c) for r in range(extent[0]) for c in range(extent[1])]


def fragments(matrices, layout, shape, items):
    """[..., 64 lanes, items] fragment elements of [..., rows, cols] matrices."""
    where = np.array([[layout(shape, lane, i) for i in range(items)] for lane in range(layouts.WAVE64)])
    return matrices[..., where[..., 0], where[..., 1]]


def mfma_kernel(shape, t: str) -> str:
    kl, regs = shape.k_per_lane, shape.c_registers
    return f"""
    %t = gpu.thread_id x
    %g = gpu.block_id x
    %z = arith.constant 0 : index
    %a = vector.load %ain[%g, %t, %z] : memref<2x128x{kl}x{t}>, vector<{kl}x{t}>
    %b = vector.load %bin[%g, %t, %z] : memref<2x128x{kl}x{t}>, vector<{kl}x{t}>
    %c = vector.load %cin[%g, %t, %z] : memref<2x128x{regs}xf32>, vector<{regs}xf32>
    %d = amdgpu.mfma {shape.name} %a * %b + %c {{blocks = 1 : i32, abid = 0 : i32, cbsz = 0 : i32}} blgp = none
        : vector<{kl}x{t}>, vector<{kl}x{t}>, vector<{regs}xf32>
    vector.store %d, %out[%g, %t, %z] : memref<2x128x{regs}xf32>, vector<{regs}xf32>"""


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", sorted(layouts.MFMA_SHAPES))
def test_mfma_matches_numpy(name, dtype):
    """Two work-groups of two waves, each wave with its own A, B and C in the layouts above: D = A @ B + C
    must equal NumPy's float64 product rounded once to f32, in the accumulator layout."""
    shape = layouts.MFMA_SHAPES[name]
    kl, regs = shape.k_per_lane, shape.c_registers
    rng = np.random.default_rng(len(name) + len(dtype))
    a, a_stored = random_values(rng, (2, 2, shape.m, shape.k), dtype)
    b, b_stored = random_values(rng, (2, 2, shape.k, shape.n), dtype)
    c = rng.standard_normal((2, 2, shape.m, shape.n)).astype(np.float32)
    per_thread = lambda x, layout, items: np.ascontiguousarray(  # noqa: E731 - [g, w, lane, i] -> [g, thread, i]
        fragments(x, layout, shape, items).reshape(2, 128, items))
    out = np.full((2, 128, regs), np.nan, np.float32)
    args = (f"%ain: memref<2x128x{kl}x{dtype}>, %bin: memref<2x128x{kl}x{dtype}>, %cin: memref<2x128x{regs}xf32>, "
            f"%out: memref<2x128x{regs}xf32>")
    fragments_in = [per_thread(a_stored, layouts.mfma_a, kl), per_thread(b_stored, layouts.mfma_b, kl),
                    per_thread(c, layouts.mfma_c, regs), out]
    run(mfma_kernel(shape, dtype), args, fragments_in, grid=(2, 1, 1), block=(128, 1, 1))
    want = (np.matmul(a, b) + c.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(out, per_thread(want, layouts.mfma_c, regs))


def test_mfma_needs_the_whole_wave():
    shape = layouts.MFMA_SHAPES["32x32x8"]
    args = ("%ain: memref<2x128x4xbf16>, %bin: memref<2x128x4xbf16>, %cin: memref<2x128x16xf32>, "
            "%out: memref<2x128x16xf32>")
    values = [np.zeros((2, 128, 4), np.uint16), np.zeros((2, 128, 4), np.uint16), np.zeros((2, 128, 16), np.float32),
              np.zeros((2, 128, 16), np.float32)]
    with pytest.raises(InterpreterError, match=r"amdgpu.mfma .*: lane 64 .* is in a wave that does not execute it "
                                               r"whole: all 64 lanes of a wave"):
        run(mfma_kernel(shape, "bf16"), args, values, block=(100, 1, 1))


def test_mfma_rejects_what_it_does_not_model():
    body = """
    %a = arith.constant dense<1.0> : vector<4xbf16>
    %c = arith.constant dense<0.0> : vector<16xf32>
    %d = amdgpu.mfma 32x32x8 %a * %a + %c {blocks = 1 : i32, abid = 0 : i32, cbsz = 1 : i32} blgp = none
        : vector<4xbf16>, vector<4xbf16>, vector<16xf32>"""
    with pytest.raises(InterpreterError, match=r"amdgpu.mfma .*: cbsz = 1 is not modelled \(only 0\)"):
        run(body, "%unused: index", [0])


# --- amdgpu.raw_buffer_load ----------------------------------------------------------------------

BUFFER_LOAD = """
    %t = gpu.thread_id x
    %t32 = arith.index_cast %t : index to i32
    %ri = memref.load %rows[%t] : memref<64xi32>
    %ci = memref.load %cols[%t] : memref<64xi32>
    %v = amdgpu.raw_buffer_load {{boundsCheck = true}} %buf[%ri, %ci] : memref<4x5xf32>, i32, i32 -> {result}
    vector.store {stored}, %out[%t, %z] : memref<64x2xf32>, vector<{n}xf32>"""


def buffer_load(rows, cols, width: int):
    buf = np.arange(1, 21, dtype=np.float32).reshape(4, 5)
    out = np.full((64, 2), np.nan, np.float32)
    result = "f32" if width == 1 else f"vector<{width}xf32>"
    stored = "%vv" if width == 1 else "%v"
    body = "    %z = arith.constant 0 : index" + BUFFER_LOAD.format(result=result, stored=stored, n=width)
    if width == 1:
        broadcast = "    %vv = vector.broadcast %v : f32 to vector<1xf32>\n"
        body = body.replace("    vector.store", broadcast + "    vector.store")
    run(body, "%buf: memref<4x5xf32>, %rows: memref<64xi32>, %cols: memref<64xi32>, %out: memref<64x2xf32>",
        [buf, np.array(rows, np.int32), np.array(cols, np.int32), out], block=(64, 1, 1))
    return out[:, :width]


def test_raw_buffer_load_reads_the_buffer_as_one_range_and_zero_outside_it():
    """Lanes 0-3: inside; lane 4: past its row but inside the buffer (the next row's element); lane 5:
    past the last element (0); lane 6: a negative index (0)."""
    rows = [0, 1, 3, 2, 0, 4, -1] + [0] * 57
    cols = [0, 2, 4, 1, 7, 0, 0] + [0] * 57
    got = buffer_load(rows, cols, 1)[:7, 0]
    np.testing.assert_array_equal(got, [1, 8, 20, 12, 8, 0, 0])


def test_raw_buffer_load_vector_partly_outside_is_an_error():
    rows, cols = [3] + [0] * 63, [4] + [0] * 63   # elements 19 and 20 of a 20-element buffer
    with pytest.raises(InterpreterError, match=r"amdgpu.raw_buffer_load .*: lane 0 .* loads elements \[19, 21\) of "
                                               r"a 20-element buffer: partly outside the buffer"):
        buffer_load(rows, cols, 2)
    np.testing.assert_array_equal(buffer_load([3, 4] + [0] * 62, [3, 0] + [0] * 62, 2)[:2], [[19, 20], [0, 0]])
