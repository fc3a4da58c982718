"""Shared helpers of the interpreter tests: readable MLIR -> generic form (through the bindings) -> run."""
from __future__ import annotations

import numpy as np

from fmha_mlir.dtypes import bf16_bits, bf16_value
from fmha_mlir.mlir import ir, make_context
from fmha_mlir.runtime.interp import Interpreter

# %i = the thread's global index along x (block_id * block_dim + thread_id), the usual first lines of a
# test kernel body.
GLOBAL_INDEX = """
    %t = gpu.thread_id x
    %g = gpu.block_id x
    %bd = gpu.block_dim x
    %base = arith.muli %g, %bd : index
    %i = arith.addi %base, %t : index"""


def generic(source: str, debug_info: bool = False) -> str:
    """The generic op form of readable MLIR, as the bundle carries it."""
    ctx = make_context()
    with ctx:
        module = ir.Module.parse(source)
        return module.operation.get_asm(print_generic_op_form=True, enable_debug_info=debug_info)


def kernel_module(body: str, args: str, name: str = "k", workgroup: str = "") -> str:
    """Readable MLIR of one gpu.func kernel `name` with arguments `args` and the given body."""
    attribution = f" workgroup({workgroup})" if workgroup else ""
    return f"""
gpu.module @m {{
  gpu.func @{name}({args}){attribution} kernel {{
{body}
    gpu.return
  }}
}}
"""


def run(body: str, args: str, values: list, grid=(1, 1, 1), block=(64, 1, 1), wave_size: int = 64,
        workgroup: str = "", shared_bytes: int = 0, **options) -> Interpreter:
    """Build, convert and run one kernel; returns the interpreter (arrays in `values` are updated)."""
    interp = Interpreter(generic(kernel_module(body, args, workgroup=workgroup)), wave_size, **options)
    interp.run_kernel("k", values, grid, block, shared_bytes)
    return interp


def index_constants(*values: int) -> str:
    """MLIR lines `%cN = arith.constant N : index` for each value: the usual constants of a test body."""
    return "\n".join(f"    %c{v} = arith.constant {v} : index" for v in values)


def random_values(rng, shape, dtype):
    """Values exactly representable in `dtype` (f16 or bf16), as float64, and their storage array."""
    x = rng.standard_normal(shape)
    if dtype == "bf16":
        bits = bf16_bits(x)
        return bf16_value(bits).astype(np.float64), bits
    half = x.astype(np.float16)
    return half.astype(np.float64), half
