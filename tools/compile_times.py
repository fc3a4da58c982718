"""Compile time per variant (spec to PTX, and to a cubin through ptxas), on this machine.

    python tools/compile_times.py [--ptxas PATH] [--report FILE]

Each variant is compiled in a fresh Compiler (no cache), after one warm-up compile that loads the
bindings and the LLVM backends; the figure is the median of three. The benchmark's build step
(tools/bench_bwd.py build) also records a compile time per bundle, but it runs beside whatever else
the machine is doing: this tool is the one to quote.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from fmha_mlir.compiler import Compiler
from fmha_mlir.spec import AttentionBwdSpec, Mask

VARIANTS = [AttentionBwdSpec(dtype, hdim, mask=mask, gqa_ratio=gqa)
            for dtype in ("bf16",) for hdim in (64, 128, 256)
            for mask, gqa in ((Mask("none"), 1), (Mask("causal_top_left"), 1), (Mask("none"), 4))]


def seconds(spec: AttentionBwdSpec, ptxas: str | None) -> float:
    times = []
    for _ in range(3):
        compiler = Compiler(ptxas=ptxas)
        start = time.perf_counter()
        compiler.compile_spec(spec, "sm_90")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ptxas", help="also to a cubin with this ptxas (of a CUDA toolkit)")
    p.add_argument("--report", type=Path, help="write the table (markdown) here")
    args = p.parse_args(argv)
    Compiler().compile_spec(VARIANTS[0], "sm_90")   # warm-up: bindings, backends
    lines = ["| variant | spec to PTX, s | spec to cubin, s |", "| --- | --- | --- |"]
    for spec in VARIANTS:
        ptx = seconds(spec, None)
        cubin = f"{seconds(spec, args.ptxas):.2f}" if args.ptxas else "n/a"
        lines.append(f"| {spec.kernel_prefix} | {ptx:.2f} | {cubin} |")
        print(lines[-1], flush=True)
    if args.report:
        args.report.write_text("# Compile time per tiled variant (sm_90), median of 3, fresh Compiler each\n\n"
                               "Command: `python tools/compile_times.py --ptxas /usr/local/cuda-13.0/bin/ptxas "
                               f"--report {args.report}`\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
