"""Time the attention backward on an NVIDIA GPU: our bundles against torch's flash and cuDNN backends.

    python tools/gpu_matrix.py build DIR                        # where MLIR is: compiles the bundles
    python tools/bench_bwd.py DIR --report FILE                 # on the GPU: numpy, cuda-bindings, torch

Ours: every step of the bundle's launch plan (zero fills, dot_do_o, dq_dk_dv, converts) on buffers
already on the device, timed by wall clock around synchronised repetitions. torch: autograd.grad of
scaled_dot_product_attention restricted to one backend, timed with CUDA events. TFLOP/s counts the
backward as 2.5x the forward's 4*B*H*Sq*Sk*D multiply-adds-times-two (halved for causal masks), the
convention FlashAttention's benchmarks use.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.runtime.bundle import Bundle
from fmha_mlir.runtime.executor import get_executor
from fmha_mlir.runtime.runner import PreparedRun
from fmha_mlir.spec import AttentionBwdSpec, Mask

CONFIGS = [(dtype, mask, seqlen) for dtype in ("f16", "bf16") for mask in ("none", "causal_top_left")
           for seqlen in (1024, 2048)]
BATCH, HEADS, HDIM = 2, 8, 128
REPEATS = 10


def backward_flops(seqlen: int, causal: bool) -> float:
    forward = 4 * BATCH * HEADS * seqlen * seqlen * HDIM
    return 2.5 * forward / (2 if causal else 1)


def time_ours(bundle: Bundle, device, problem) -> float:
    tensors = {name: problem.tensors[name] for name in ("q", "k", "v", "o", "do", "lse")}
    with PreparedRun(bundle, device, tensors) as run:
        run.launch()
        device.synchronize()
        start = time.perf_counter()
        for _ in range(REPEATS):
            run.launch()
        device.synchronize()
        return (time.perf_counter() - start) / REPEATS


def time_torch(backend_name: str, dtype: str, seqlen: int, causal: bool) -> float | None:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)
    torch_dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    q, k, v = (torch.randn(BATCH, HEADS, seqlen, HDIM, device="cuda", dtype=torch_dtype, requires_grad=True)
               for _ in range(3))
    do = torch.randn(BATCH, HEADS, seqlen, HDIM, device="cuda", dtype=torch_dtype)
    try:
        with sdpa_kernel([backend]):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(REPEATS):
                torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
            stop.record()
            torch.cuda.synchronize()
    except RuntimeError as exc:  # the backend refuses this configuration on this GPU
        print(f"torch {backend_name} {dtype} S{seqlen}: unavailable ({str(exc).splitlines()[0]})", file=sys.stderr)
        return None
    return start.elapsed_time(stop) / 1e3 / REPEATS


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundles", type=Path, help="bundle directory (<dir>/sm_90/<kernel>/) from gpu_matrix.py build")
    p.add_argument("--report", type=Path, default=Path("bench_report.md"))
    args = p.parse_args(argv)
    device = get_executor("cuda")
    lines = [f"# Attention backward on {platform.node()}: B{BATCH} H{HEADS} D{HDIM}, ms per backward "
             f"(TFLOP/s)", "", "| dtype | mask | seqlen | ours | torch flash | torch cuDNN | ours / flash |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for dtype, mask, seqlen in CONFIGS:
        causal = mask != "none"
        spec = AttentionBwdSpec(dtype=dtype, hdim_q=HDIM, mask=Mask(mask))
        problem = make_problem(spec, ProblemSize(BATCH, HEADS, seqlen, seqlen), seed=seqlen)
        ours = time_ours(Bundle.load(args.bundles / "sm_90" / spec.kernel_prefix), device, problem)
        flash = time_torch("FLASH_ATTENTION", dtype, seqlen, causal)
        cudnn = time_torch("CUDNN_ATTENTION", dtype, seqlen, causal)
        flops = backward_flops(seqlen, causal)

        def cell(seconds):
            return "n/a" if seconds is None else f"{seconds * 1e3:.3f} ({flops / seconds / 1e12:.1f})"

        ratio = f"{ours / flash:.1f}x slower" if flash else "n/a"
        lines.append(f"| {dtype} | {mask} | {seqlen} | {cell(ours)} | {cell(flash)} | {cell(cudnn)} | {ratio} |")
        print(lines[-1], flush=True)
    args.report.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
