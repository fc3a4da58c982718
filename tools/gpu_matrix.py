"""The variant matrix on a GPU: build bundles where MLIR is (here), run them where the GPU is.

    python tools/gpu_matrix.py build DIR [--arch sm_90]          # needs MLIR: compiles every variant
    python tools/gpu_matrix.py run DIR --report FILE [--jobs N]  # needs numpy + the GPU executor only

Variants: dtype {f16, bf16, f32} x mask {none, top-left, bottom-right, window 64,0} x hdim {64, 128,
256} x GQA ratio {1, 4}. Sizes per variant: B2 H8 S1024 for hdim 128 (realistic), and the odd lengths
Sq=77/Sk=1000 and Sq=1000/Sk=77 at B1 H4 for every variant; layouts alternate BHSD / BSHD. The oracle
(float64 NumPy) runs in worker processes while the GPU runs the kernels.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.runtime.bundle import Bundle
from fmha_mlir.runtime.executor import get_executor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.variants import variant_matrix

REALISTIC = ProblemSize(batch=2, heads_q=8, seqlen_q=1024, seqlen_k=1024)
ODD = (ProblemSize(1, 4, 77, 1000), ProblemSize(1, 4, 1000, 77))


def variants() -> list[AttentionBwdSpec]:
    return variant_matrix(window=Mask("sliding_window", 64, 0))


SMOKE = (ProblemSize(1, 4, 9, 13),)  # --smoke: the same matrix at sizes the CPU interpreter runs in seconds


def jobs(smoke: bool = False) -> list[tuple[AttentionBwdSpec, ProblemSize, str]]:
    out = []
    for index, spec in enumerate(variants()):
        sizes = SMOKE if smoke else ((REALISTIC,) if spec.hdim_q == 128 else ()) + ODD
        for n, size in enumerate(sizes):
            out.append((spec, size, ("bhsd", "bshd")[(index + n) % 2]))
    return out


def build(directory: Path, arch: str) -> None:
    from fmha_mlir.api import compile_bundle
    from fmha_mlir.compiler import Compiler

    compiler = Compiler()
    for spec in variants():
        compile_bundle(spec, arch, compiler).save(directory / arch / spec.kernel_prefix)
    print(f"built {len(variants())} bundles for {arch} under {directory / arch}")


def _reference(job):
    spec, size, layout = job
    problem = make_problem(spec, size, seed=hash((spec.kernel_prefix, size.seqlen_q)) % 2**31, layout=layout)
    problem.oracle_gradients()
    problem.lowp_gradients()
    return problem


def run(directory: Path, arch: str, report: Path, workers: int, smoke: bool) -> int:
    device = get_executor(None, "nvidia" if arch.startswith("sm_") else "amd")
    rows, failures, started = [], 0, time.time()
    todo = jobs(smoke)
    with ProcessPoolExecutor(workers) as pool:
        for n, problem in enumerate(pool.map(_reference, todo), 1):
            spec, size = problem.spec, problem.size
            bundle = Bundle.load(directory / arch / spec.kernel_prefix)
            t = problem.tensors
            grads = run_bundle(bundle, device, {name: t[name] for name in ("q", "k", "v", "o", "do", "lse")})
            checks = problem.check(grads)
            ok = all(c.passed for c in checks)
            failures += not ok
            rows.append({"kernel": spec.kernel_prefix, "dtype": spec.dtype, "mask": str(spec.mask),
                         "hdim": spec.hdim_q, "gqa": spec.gqa_ratio, "layout": problem.layout,
                         "size": f"B{size.batch} Hq{size.heads_q} Sq{size.seqlen_q} Sk{size.seqlen_k}",
                         "checks": {c.name: [c.max_abs_err, c.allowed] for c in checks}, "pass": ok})
            print(f"[{n}/{len(todo)}] {spec.kernel_prefix} {rows[-1]['size']} {problem.layout}: "
                  f"{'PASS' if ok else 'FAIL'}", flush=True)
    write_report(report, arch, device.name, rows, time.time() - started)
    print(f"{len(rows) - failures} passed, {failures} failed")
    return 1 if failures else 0


def write_report(path: Path, arch: str, executor: str, rows: list[dict], seconds: float) -> None:
    lines = [f"# {arch} variant matrix on the {executor} executor", "",
             f"Host: {platform.node()}, Python {platform.python_version()}; {len(rows)} runs in {seconds:.0f} s; "
             f"{sum(r['pass'] for r in rows)} PASS, {sum(not r['pass'] for r in rows)} FAIL.", "",
             "Each cell: max |kernel - float64 oracle| / allowed (fmha_mlir.tolerance).", "",
             "| kernel | size | layout | dQ | dK | dV | result |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        cells = [f"{e:.2e} / {a:.2e}" for e, a in (r["checks"][g] for g in ("dq", "dk", "dv"))]
        lines.append(f"| {r['kernel']} | {r['size']} | {r['layout']} | {' | '.join(cells)} | "
                     f"{'PASS' if r['pass'] else 'FAIL'} |")
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("build", "run"))
    p.add_argument("directory", type=Path)
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--report", type=Path, default=Path("matrix_report.md"))
    p.add_argument("--jobs", type=int, default=8, help="oracle worker processes")
    p.add_argument("--smoke", action="store_true", help="tiny sizes (a dry run of the tool on the CPU)")
    args = p.parse_args(argv)
    if args.action == "build":
        build(args.directory, args.arch)
        return 0
    return run(args.directory, args.arch, args.report, args.jobs, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
