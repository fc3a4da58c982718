"""The Hopper pieces on the H200: build the standalone wgmma probe (passes/hopper_probe.py: TMA with a
128-byte swizzle and zero fill through a 2-stage mbarrier pipeline, wgmma SS, then wgmma RS with an
MN-major B) here as an sm_90a cubin with its ptxas report; run it there through the CUDA executor (tensor
maps encoded per launch as __grid_constant__ parameters) and judge both products under the gate.

    python -m tools.hopper_probe build DIR       # here: needs MLIR and ptxas
    python -m tools.hopper_probe run DIR        # on the H200: NumPy and cuda-bindings
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from tools.build_run import build_run_parser, write_report_files

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
    from fmha_mlir.dtypes import from_storage, to_storage
    from fmha_mlir.runtime.args import DeviceBuffer, TensorMapArg
    from fmha_mlir.runtime.cuda_executor import CudaExecutor, CudaKernels
    from fmha_mlir.runtime.executor import check_status
    from fmha_mlir.tolerance import judge

    meta = json.loads((directory / "probe.json").read_text())
    m, n, k, n2 = (meta["shape"][x] for x in ("m", "n", "k", "n2"))
    rng = np.random.default_rng(SEED)
    a, b, v = (to_storage(rng.standard_normal(s).astype(np.float32), "bf16") for s in ((m, k), (n, k), (n, n2)))
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
    af, bf, vf = (from_storage(x, "bf16").astype(np.float64) for x in (a, b, v))
    c_ref, c_low = af @ bf.T, (af.astype(np.float32) @ bf.T.astype(np.float32)).astype(np.float64)
    round16 = lambda x: from_storage(to_storage(x.astype(np.float32), "bf16"), "bf16").astype(np.float64)  # noqa: E731
    c2_ref = round16(c_ref) @ vf
    c2_low = (round16(c_low).astype(np.float32) @ vf.astype(np.float32)).astype(np.float64)
    checks = [judge("C = A B^T (SS)", outputs["c"], c_ref, c_low, "bf16", k, np.abs(af) @ np.abs(bf).T),
              judge("C2 = bf16(C) V (RS)", outputs["c2"], c2_ref, c2_low, "bf16", n, np.abs(round16(c_ref)) @ np.abs(vf))]
    sass = _sass(directory / meta["binary"])
    lines = ["# wgmma probe on the H200", "", f"Command: `python -m tools.hopper_probe run {directory}`", "",
             f"M={m} N={n} K={k} (zero fill past K) N2={n2}; tensor maps encoded {cached} (cached per address)", ""]
    lines += [f"- {c}" for c in checks]
    lines += ["", "ptxas:", "```", (directory / "ptxas.txt").read_text().strip(), "```", "", sass]
    write_report_files(report, lines, {"checks": [dict(vars(c)) for c in checks], "tensor_maps": cached,
                                       "sass": sass})
    print("\n".join(lines))
    return all(c.passed for c in checks)


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
    args = build_run_parser(__doc__, "tools/reports/hopper_probe.md").parse_args(argv)
    if args.action == "build":
        build(args.directory)
        return 0
    return 0 if run(args.directory, args.report) else 1


if __name__ == "__main__":
    sys.exit(main())
