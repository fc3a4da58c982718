"""A one-kernel probe bundle for the runtime tests (a helper module, not a test file).

The probe reads a strided rank-4 f16 memref and writes y = x * scale + seqlen + bias into an f32 one,
with scale (f32) and bias (i32) as scalar kernel arguments: a right answer needs every field of the
memref descriptors (pointers, sizes, strides) and the scalars at the offsets the runtime packs them.
Building it needs MLIR; running it (run_probe) needs only the runtime.
"""
from __future__ import annotations

import numpy as np

from fmha_mlir.kernel_config import WarpConfig
from fmha_mlir.numerics import SCALAR_ROWS
from fmha_mlir.runtime.args import DeviceBuffer, ScalarArg, bind_args
from fmha_mlir.runtime.bundle import FORMAT, Bundle, spec_to_json
from fmha_mlir.runtime.runner import Layout
from fmha_mlir.spec import AttentionBwdSpec
from fmha_mlir.target import TARGETS

KERNEL = "probe"
SCALE, BIAS = 0.5, -3
HDIM = 4
_MEMREF = "memref<?x?x?x4x{t}, strided<[?, ?, ?, 1]>>"
SOURCE = f"""
module attributes {{gpu.container_module}} {{
  gpu.module @kernels {{
    gpu.func @{KERNEL}(%x: {_MEMREF.format(t="f16")}, %y: {_MEMREF.format(t="f32")}, %scale: f32, %bias: i32) kernel {{
      %d = gpu.thread_id x
      %s = gpu.block_id x
      %h = gpu.block_id y
      %b = gpu.block_id z
      %c2 = arith.constant 2 : index
      %n = memref.dim %x, %c2 : {_MEMREF.format(t="f16")}
      %n32 = arith.index_cast %n : index to i32
      %shift = arith.addi %n32, %bias : i32
      %shiftf = arith.sitofp %shift : i32 to f32
      %xv = memref.load %x[%b, %h, %s, %d] : {_MEMREF.format(t="f16")}
      %xf = arith.extf %xv : f16 to f32
      %scaled = arith.mulf %xf, %scale : f32
      %r = arith.addf %scaled, %shiftf : f32
      memref.store %r, %y[%b, %h, %s, %d] : {_MEMREF.format(t="f32")}
      gpu.return
    }}
  }}
}}
"""


def _pipeline(arch: str, cubin: bool) -> str:
    from fmha_mlir.backends.toolkit import lld_toolkit

    target = TARGETS[arch]
    if target.backend == "rocdl":
        return (f"builtin.module(rocdl-attach-target{{chip={arch}}},gpu.module(convert-scf-to-cf,"
                f"convert-gpu-to-rocdl{{chipset={arch}}}),reconcile-unrealized-casts,"
                f"gpu-module-to-binary{{format=bin toolkit={lld_toolkit()}}})")
    return ("builtin.module(nvvm-attach-target{chip=" + arch + "},gpu.module(convert-scf-to-cf,"
            "convert-gpu-to-nvvm),reconcile-unrealized-casts,gpu-module-to-binary{format="
            + ("bin" if cubin else "isa") + "})")


def build_probe_bundle(arch: str, cubin: bool = False) -> Bundle:
    """Compile the probe for `arch` (hsaco on AMD; PTX on NVIDIA, or a cubin through ptxas) into a bundle."""
    from fmha_mlir.mlir import gpu, ir, make_context, passmanager

    target = TARGETS[arch]
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(SOURCE)
        interp_ir = module.operation.get_asm(print_generic_op_form=True)
        passmanager.PassManager.parse(_pipeline(arch, cubin)).run(module.operation)
        binary_op = next(op for op in module.body.operations if op.operation.name == "gpu.binary")
        binary = gpu.ObjectAttr(binary_op.attributes["objects"][0]).object
    binary_format = "hsaco" if target.backend == "rocdl" else "cubin" if cubin else "ptx"
    memref = lambda dtype, access: {"rank": 4, "dtype": dtype, "type": _MEMREF.format(t=dtype),  # noqa: E731
                                    "access": access}
    dims = ["batch", "heads", "seqlen", HDIM]
    manifest = {
        "format": FORMAT,
        "compiler": {"fmha-mlir": "test"},
        "spec": spec_to_json(AttentionBwdSpec()),
        "config": WarpConfig(wave_size=target.wave_size).to_json(),
        "numerics": {"round_p_ds": SCALAR_ROWS.round_p_ds, "sum_chunk": SCALAR_ROWS.sum_chunk},
        "target": {"arch": arch, "backend": target.backend, "wave_size": target.wave_size},
        "binary": {"file": f"probe.{binary_format}", "format": binary_format},
        "interp_ir": "probe.interp.mlir",
        "buffers": {"x": {"role": "input", "dtype": "f16", "rank": 4, "dims": dims, "align": 1},
                    "y": {"role": "output", "dtype": "f32", "rank": 4, "dims": dims, "align": 1}},
        "steps": [{"op": "launch", "kernel": KERNEL,
                   "args": [{"buffer": "x"}, {"buffer": "y"}, {"scalar": "f32", "value": SCALE},
                            {"scalar": "i32", "value": BIAS}],
                   "grid": [{"dim": ["x", 2]}, {"dim": ["x", 1]}, {"dim": ["x", 0]}],
                   "block": [HDIM, 1, 1], "shared_bytes": 0}],
        "kernels": {KERNEL: {"args": [{**memref("f16", "read"), "buffer": "x"},
                                      {**memref("f32", "write"), "buffer": "y"},
                                      {"scalar": "f32", "type": "f32"}, {"scalar": "i32", "type": "i32"}]}},
    }
    return Bundle(manifest, {f"probe.{binary_format}": binary, "probe.interp.mlir": interp_ir.encode()})


def probe_input(batch=2, heads=3, seqlen=5, seed=0) -> np.ndarray:
    """A BSHD-strided f16 view in BHSD logical order, so the strides are not the contiguous ones."""
    values = np.random.default_rng(seed).standard_normal((batch, seqlen, heads, HDIM)).astype(np.float16)
    return values.transpose(0, 2, 1, 3)


def expected_output(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) * np.float32(SCALE) + np.float32(x.shape[2] + BIAS)


def run_probe(executor, bundle: Bundle, x: np.ndarray) -> np.ndarray:
    """Drive the executor directly (not through run_bundle): upload x with its strides, launch, read y."""
    layouts = {"x": Layout.of("f16", x), "y": Layout.contiguous("f32", x.shape)}
    kernels = executor.load(bundle)
    allocations = {name: executor.alloc(layout.span * layout.storage.itemsize) for name, layout in layouts.items()}
    try:
        buffers = {name: DeviceBuffer(name, layout.dtype, layout.shape, layout.strides, allocations[name].address,
                                      allocations[name]) for name, layout in layouts.items()}
        executor.upload(allocations["x"], layouts["x"].stage(x))
        executor.zero(allocations["y"])
        step = bundle.steps[0]
        args = bind_args(KERNEL, bundle.kernels[KERNEL]["args"],
                         [buffers["x"], buffers["y"], ScalarArg("scale", "f32", SCALE), ScalarArg("bias", "i32", BIAS)])
        kernels.launch(KERNEL, (x.shape[2], x.shape[1], x.shape[0]), step["block"], args)
        executor.synchronize()
        flat = np.empty(layouts["y"].span, np.float32)
        executor.download(allocations["y"], flat)
        return layouts["y"].view(flat).copy()
    finally:
        for allocation in allocations.values():
            executor.free(allocation)
