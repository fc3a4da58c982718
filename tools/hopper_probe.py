"""The Hopper pieces on the H200: build the standalone wgmma probe (passes/hopper_probe.py: TMA with a
128-byte swizzle and zero fill through a 2-stage mbarrier pipeline, wgmma SS, then wgmma RS with an
MN-major B) here as an sm_90a cubin with its ptxas report; run it there through the CUDA executor (tensor
maps encoded per launch as __grid_constant__ parameters) and judge both products under the gate.

    python -m tools.hopper_probe build DIR       # here: needs MLIR and ptxas
    python -m tools.hopper_probe run DIR        # on the H200: NumPy and cuda-bindings
    python -m tools.hopper_probe interp DIR     # here: the same kernel in the CPU interpreter (MLIR)
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from .build_run import build_run_parser, write_report_files

PTXAS = "/usr/local/cuda-13.0/bin/ptxas"
SEED = 7


def build(directory: Path) -> None:
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.passes.hopper_probe import KERNEL, THREADS, ProbeShape, probe_module_text

    shape = ProbeShape()
    compiled = Compiler(ptxas=shutil.which("ptxas") or PTXAS).compile_module(probe_module_text(shape), "gpu", "sm_90a")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "probe.ptx").write_text(compiled.isa)
    # the cubin the run loads is the one this ptxas -v describes
    report = subprocess.run([shutil.which("ptxas") or PTXAS, "-v", "-arch=sm_90a", str(directory / "probe.ptx"),
                             "-o", str(directory / "probe.cubin")], capture_output=True, text=True, check=True)
    (directory / "ptxas.txt").write_text(report.stdout + report.stderr)
    (directory / "probe.json").write_text(json.dumps({
        "kernel": KERNEL, "threads": THREADS, "binary": "probe.cubin",
        "shape": vars(shape), "grid": shape.grid, "shared_bytes": shape.shared_bytes,
        "boxes": {"a": [64, 64], "b": [64, 64], "v": [shape.n, 64]}}, indent=1))
    print(f"built {directory}: {shape.shared_bytes} bytes of shared memory")
    print(report.stderr.strip().splitlines()[-3:])


def run(directory: Path, report: Path) -> bool:
    from fmha_mlir.runtime.args import DeviceBuffer, TensorMapArg
    from fmha_mlir.runtime.cuda_executor import CudaExecutor, CudaKernels
    from fmha_mlir.runtime.executor import check_status

    meta = json.loads((directory / "probe.json").read_text())
    m, n, k, n2 = (meta["shape"][x] for x in ("m", "n", "k", "n2"))
    a, b, v = probe_inputs(m, n, k, n2)
    with CudaExecutor() as device:
        with device.current():
            module = check_status(device._cu.cuModuleLoadData((directory / meta["binary"]).read_bytes()),
                                  "cuModuleLoadData")
        kernels = CudaKernels(device, module)
        buffers = {}
        for name, host, dtype in (("a", a, "bf16"), ("b", b, "bf16"), ("v", v, "bf16"),
                                  ("c", np.zeros((m, n), np.float32), "f32"),
                                  ("c2", np.zeros((m, n2), np.float32), "f32")):
            allocation = device.alloc(host.nbytes)
            device.upload(allocation, np.ascontiguousarray(host))
            strides = tuple(s // host.itemsize for s in host.strides)
            buffers[name] = (DeviceBuffer(name, dtype, host.shape, strides, allocation.address, allocation), host)
        maps = [TensorMapArg(f"{name}_map", buffers[name][0], tuple(meta["boxes"][name]), 128) for name in "abv"]
        args = [*maps, buffers["c"][0], buffers["c2"][0]]
        kernels.launch(meta["kernel"], meta["grid"], (meta["threads"], 1, 1), args, meta["shared_bytes"])
        device.synchronize()
        kernels.launch(meta["kernel"], meta["grid"], (meta["threads"], 1, 1), args, meta["shared_bytes"])
        device.synchronize()
        cached = len(device.tensor_maps)
        outputs = {}
        for name in ("c", "c2"):
            buffer, host = buffers[name]
            device.download(buffer.allocation, host)
            outputs[name] = host.astype(np.float64)
    checks = judge_products(a, b, v, outputs["c"], outputs["c2"])
    sass = _sass(directory / meta["binary"])
    lines = ["# wgmma probe on the H200", "", f"Command: `python -m tools.hopper_probe run {directory}`", "",
             f"M={m} N={n} K={k} (zero fill past K) N2={n2}; tensor maps encoded {cached} (cached per address)", ""]
    lines += [f"- {c}" for c in checks]
    lines += ["", "ptxas:", "```", (directory / "ptxas.txt").read_text().strip(), "```", "", sass]
    write_report_files(report, lines, {"checks": [dict(vars(c)) for c in checks], "tensor_maps": cached,
                                       "sass": sass})
    print("\n".join(lines))
    return all(c.passed for c in checks)


def probe_inputs(m: int, n: int, k: int, n2: int):
    """A [m, k], B [n, k], V [n, n2] as bf16 bit patterns (one seed for every run)."""
    from fmha_mlir.dtypes import to_storage

    rng = np.random.default_rng(SEED)
    return tuple(to_storage(rng.standard_normal(s).astype(np.float32), "bf16") for s in ((m, k), (n, k), (n, n2)))


def judge_products(a, b, v, c, c2) -> list:
    """The gate on C = A B^T and C2 = bf16(C) V (f32 outputs), against float64 and f32 references.

    C2's reference starts from the kernel's own C, judged on its own: an f32 summation difference of
    C within its bound moves some elements across a bf16 rounding boundary, a whole bf16 ulp that the
    f32 reference does not make at the same elements; the RS product is judged on what it was given."""
    from fmha_mlir.dtypes import from_storage, to_storage
    from fmha_mlir.tolerance import judge

    af, bf, vf = (from_storage(x, "bf16").astype(np.float64) for x in (a, b, v))
    c_ref, c_low = af @ bf.T, (af.astype(np.float32) @ bf.T.astype(np.float32)).astype(np.float64)
    p = from_storage(to_storage(np.asarray(c, np.float32), "bf16"), "bf16").astype(np.float64)
    c2_ref, c2_low = p @ vf, (p.astype(np.float32) @ vf.astype(np.float32)).astype(np.float64)
    return [judge("C = A B^T (SS)", np.asarray(c, np.float64), c_ref, c_low, "bf16", a.shape[1],
                  np.abs(af) @ np.abs(bf).T),
            judge("C2 = bf16(C) V (RS)", np.asarray(c2, np.float64), c2_ref, c2_low, "bf16", b.shape[0],
                  np.abs(p) @ np.abs(vf))]


def run_interpreted(text: str, shape, a, b, v, swizzle: int = 128, roles: bool = False):
    """(C, C2) of the probe's kernel-stage IR `text` (its warp-specialised variant with `roles`) run by
    the CPU interpreter on A, B, V (tensor maps with `swizzle`, as tools' run encodes them with 128)."""
    from fmha_mlir.passes.hopper_probe import KERNEL, ROLE_THREADS, THREADS
    from fmha_mlir.runtime.interp import Interpreter
    from fmha_mlir.runtime.interp.hopper import TensorMap

    c, c2 = np.zeros((shape.m, shape.n), np.float32), np.zeros((shape.m, shape.n2), np.float32)
    maps = [TensorMap(x, box, swizzle, "bf16") for x, box in ((a, (64, 64)), (b, (shape.n, 64)), (v, (shape.n, 64)))]
    Interpreter(text, 32).run_kernel(KERNEL, [*maps, c, c2], shape.grid, (ROLE_THREADS if roles else THREADS, 1, 1),
                                     shape.shared_bytes)
    return c, c2


def interp(directory: Path) -> bool:
    """The probe and its warp-specialised variant in the interpreter, under the gate (no GPU), compiled
    here to their kernel-stage IR."""
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.passes.hopper_probe import ProbeShape, probe_module_text

    shape = ProbeShape()
    directory.mkdir(parents=True, exist_ok=True)
    a, b, v = probe_inputs(shape.m, shape.n, shape.k, shape.n2)
    passed = True
    for roles in (False, True):
        text = Compiler().compile_module(probe_module_text(shape, roles), "gpu", "sm_90a").interp_ir
        (directory / f"probe{'.roles' if roles else ''}.interp.mlir").write_text(text)
        checks = judge_products(a, b, v, *run_interpreted(text, shape, a, b, v, roles=roles))
        print(f"{'warp-specialised' if roles else 'one warpgroup'}:\n" + "\n".join(f"- {c}" for c in checks))
        passed &= all(c.passed for c in checks)
    return passed


def _sass(cubin: Path) -> str:
    """HGMMA / local-memory counts in the SASS, where cuobjdump or nvdisasm is installed."""
    for tool, args in (("cuobjdump", ["-sass"]), ("nvdisasm", [])):
        path = shutil.which(tool) or next((str(p) for p in Path("/usr/local").glob(f"cuda*/bin/{tool}")), None)
        if path:
            text = subprocess.run([path, *args, str(cubin)], capture_output=True, text=True).stdout
            return (f"SASS ({tool}): {text.count('HGMMA')} HGMMA, {text.count('LDL') + text.count('STL')} local "
                    f"loads/stores, {text.count('UTMALDG')} UTMALDG")
    return "SASS: neither cuobjdump nor nvdisasm found"


def main(argv=None) -> int:
    args = build_run_parser(__doc__, "tools/reports/hopper_probe.md", ("build", "run", "interp")).parse_args(argv)
    if args.action == "build":
        build(args.directory)
        return 0
    if args.action == "interp":
        return 0 if interp(args.directory) else 1
    return 0 if run(args.directory, args.report) else 1


if __name__ == "__main__":
    sys.exit(main())
