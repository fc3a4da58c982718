"""The AMD matrix atom (passes/mfma_atom.py) in a whole kernel: A and B^T copied into LDS, a barrier, the
k loop of amdgpu.mfma with fragments read from LDS by the atom, D stored by the atom's accumulator
positions. The interpreter must compute A @ B as the instructions do (each MFMA's exact products and
sum rounded once to f32) for every MFMA shape, and the same kernel must compile for its chips to MFMA
instructions fed by LDS reads (ds_read_b64 or its paired form for KL = 4, ds_read_b128 for KL = 8), with
no scratch."""
import re

import numpy as np
import pytest

from fmha_mlir import matrix_layouts as layouts
from fmha_mlir.compiler import Compiler
from fmha_mlir.dialects.fmha_types import element_type
from fmha_mlir.mlir import gpu, ir, make_context, memref, vector
from fmha_mlir.passes.ir_builders import collect_ops
from fmha_mlir.passes.ix import LaneValues, as_value
from fmha_mlir.passes.mfma_atom import MfmaAtom
from fmha_mlir.passes.shared_tiles import Grid
from fmha_mlir.runtime.interp import Interpreter

from interp_support import random_values

K_BLOCKS = 2   # the k loop runs over two instruction tiles


def matmul_module(shape: layouts.MfmaShape, dtype: str) -> str:
    m, n, k = shape.m, shape.n, shape.k * K_BLOCKS
    lds = "#gpu.address_space<workgroup>"
    text = f"""
module attributes {{gpu.container_module}} {{
  gpu.module @fmha_kernels {{
    gpu.func @matmul(%a: memref<{m}x{k}x{dtype}>, %bt: memref<{n}x{k}x{dtype}>, %d: memref<{m}x{n}xf32>)
        workgroup(%la: memref<{m}x{k}x{dtype}, {lds}>, %lb: memref<{n}x{k}x{dtype}, {lds}>)
        kernel attributes {{known_block_size = array<i32: 64, 1, 1>}} {{
      %lane = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c64 = arith.constant 64 : index
      %cm = arith.constant {m} : index
      %cn = arith.constant {n} : index
      %ck = arith.constant {k} : index
      scf.for %r = %lane to %cm step %c64 {{
        scf.for %j = %c0 to %ck step %c1 {{
          %x = memref.load %a[%r, %j] : memref<{m}x{k}x{dtype}>
          memref.store %x, %la[%r, %j] : memref<{m}x{k}x{dtype}, {lds}>
        }}
      }}
      scf.for %r = %lane to %cn step %c64 {{
        scf.for %j = %c0 to %ck step %c1 {{
          %x = memref.load %bt[%r, %j] : memref<{n}x{k}x{dtype}>
          memref.store %x, %lb[%r, %j] : memref<{n}x{k}x{dtype}, {lds}>
        }}
      }}
      gpu.barrier
      gpu.return
    }}
  }}
}}"""
    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        func = collect_ops(module.operation, ["gpu.func"])[0]
        block = func.regions[0].blocks[0]
        returned = [op for op in block.operations if op.operation.name == "gpu.return"][0]
        la, lb = Grid(block.arguments[3], m, k), Grid(block.arguments[4], n, k)
        with ir.InsertionPoint(returned):
            lane = gpu.thread_id(gpu.Dimension.x)
            lanes = LaneValues(ir.InsertionPoint(returned))
            atom = MfmaAtom(shape, element_type(dtype), lane, lanes)
            acc = atom.zero
            for k0 in range(0, k, shape.k):
                acc = atom.mma(atom.load_a(la, 0, k0), atom.load_b(lb, 0, k0), acc)
            for r in range(shape.c_registers):
                row, col = atom.position(r)
                memref.store(vector.extract(acc, [], [r]), block.arguments[2], [as_value(row), as_value(col)])
        return str(module)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", sorted(layouts.MFMA_SHAPES))
def test_mfma_atom_kernel_computes_a_matmul(name, dtype):
    shape = layouts.MFMA_SHAPES[name]
    rng = np.random.default_rng(len(name) * 3 + len(dtype))
    a, a_stored = random_values(rng, (shape.m, shape.k * K_BLOCKS), dtype)
    b, b_stored = random_values(rng, (shape.k * K_BLOCKS, shape.n), dtype)
    d = np.full((shape.m, shape.n), np.nan, np.float32)
    text = matmul_module(shape, dtype)
    ctx = make_context()
    with ctx:
        generic = ir.Module.parse(text).operation.get_asm(print_generic_op_form=True)
    Interpreter(generic, wave_size=64).run_kernel("matmul", [a_stored, np.ascontiguousarray(b_stored.T), d],
                                                  (1, 1, 1), (64, 1, 1))
    want = np.zeros((shape.m, shape.n), np.float32)  # each MFMA: exact products, rounded once to f32
    for k0 in range(0, shape.k * K_BLOCKS, shape.k):
        want = (a[:, k0:k0 + shape.k] @ b[k0:k0 + shape.k] + want.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(d, want)


@pytest.mark.parametrize("name", sorted(layouts.MFMA_SHAPES))
def test_mfma_atom_kernel_compiles_to_mfma_fed_by_lds(name):
    shape = layouts.MFMA_SHAPES[name]
    text = matmul_module(shape, "bf16")
    read = r"ds_read2?_b64" if shape.k_per_lane == 4 else r"ds_read2?_b128"   # LLVM may pair two reads
    for chip in shape.chips:
        isa = Compiler().compile_module(text, "gpu", chip).isa
        assert f"v_mfma_f32_{name}_bf16" in isa, chip
        assert re.search(read, isa), chip
        assert ".private_segment_fixed_size: 0" in isa and not re.search(r"\bscratch_(load|store)", isa), chip
