"""The accuracy cost of bf16 dQ atomics (grad_accum="bf16") on the GPU, against f32 accumulation.

    python tools/lab/grad_accum.py build DIR                            # where MLIR is
    python3 tools/lab/grad_accum.py run DIR --report FILE               # where the GPU is (numpy + cuda-bindings)
    python tools/lab/grad_accum.py run DIR --smoke                      # a dry run on the CPU interpreter

For each shape (sm_90's tiled body, bf16; key lengths from 512 to 32768, where the bf16 running sum
takes the most roundings: one per key block of 128 keys) the same problem runs with dQ accumulated in
f32 (the default plan) and in bf16. Reported per shape: dQ's max|err| against the float64 oracle for
both, relative to max|dQ|, the ratio bf16 / f32, and each run under the gate with its own model (the
bundle's numerics: Numerics.dq_add_block for bf16). dK and dV are the same kernels' plain stores in
both plans, so only their gate ratios are listed.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

from fmha_mlir.api import load_bundle
from fmha_mlir.bodies import choose_config
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import get_target
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/: the modules the tools share
from build_run import build_bundles, build_run_parser, write_report_files  # noqa: E402

ARCH = "sm_90"
PLAIN = AttentionBwdSpec("bf16", 128)
# (label, spec, size): few query rows and heads keep the float64 oracle quick at 32768 keys.
SHAPES = [
    *((f"d128 Sk{sk}", PLAIN, ProblemSize(1, 4, 256, sk)) for sk in (512, 2048, 8192, 32768)),
    ("d128 causal Sq=Sk 4096", dataclasses.replace(PLAIN, mask=Mask("causal_top_left")), ProblemSize(1, 4, 4096, 4096)),
    ("d64 GQA 4 Sk8192", AttentionBwdSpec("bf16", 64, gqa_ratio=4), ProblemSize(1, 8, 256, 8192)),
]
SMOKE = ProblemSize(1, 4, 40, 600)   # --smoke: seconds on the interpreter
ACCUMS = ("f32", "bf16")


def variants(spec: AttentionBwdSpec):
    """(grad_accum, spec, config) of one shape's spec, both accumulations."""
    for accum in ACCUMS:
        spec_a = dataclasses.replace(spec, grad_accum=accum)
        yield accum, spec_a, choose_config(spec_a, get_target(ARCH), "tiled")


def build(directory: Path) -> None:
    build_bundles(directory, ARCH, [(spec, config) for _, shape_spec, _ in SHAPES
                                    for _, spec, config in variants(shape_spec)])


def run(directory: Path, report: Path, smoke: bool = False) -> int:
    from fmha_mlir.runtime.cpu_executor import CpuExecutor
    from fmha_mlir.runtime.executor import get_executor
    from fmha_mlir.runtime.runner import run_bundle

    device = CpuExecutor(atomic_order="random") if smoke else get_executor("cuda")
    rows, bad = [], 0
    for label, shape_spec, size in SHAPES:
        size = SMOKE if smoke else size
        problem = make_problem(shape_spec, size, seed=5)   # both plans on the same inputs
        exact = problem.oracle_gradients().dq
        for accum, spec, config in variants(shape_spec):
            bundle = load_bundle(directory, spec, ARCH, config)
            checks = {c.name: c for c in problem.check(run_bundle(bundle, device, problem.tensors), bundle.numerics)}
            row = {"shape": label, "grad_accum": accum,
                   "size": f"B{size.batch} H{size.heads_q} Sq{size.seqlen_q} Sk{size.seqlen_k}",
                   "kernel": f"{spec.kernel_prefix}_{config.tag}", "dq_err": checks["dq"].max_abs_err,
                   "dq_rel": checks["dq"].max_abs_err / float(np.max(np.abs(exact))),
                   "gate": {n: round(c.ratio, 3) for n, c in checks.items()},
                   "gate_pass": all(c.passed for c in checks.values())}
            bad += not row["gate_pass"]
            rows.append(row)
            print(row, flush=True)
    lines = [f"# bf16 dQ atomics against f32 accumulation: dQ's error ({ARCH} tiled body, {device.name} executor)", "",
             "max|dQ - oracle| (float64 oracle from the same bf16 inputs), relative to max|dQ|; each run under the "
             "gate with its bundle's numerics (bf16: the reference rounds per key block as the atomics do).", "",
             "| shape | problem | f32 dQ err (rel) | bf16 dQ err (rel) | bf16 / f32 | gate f32 (dq dk dv) "
             "| gate bf16 (dq dk dv) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for f32_row, bf16_row in zip(rows[::2], rows[1::2]):
        gates = [" ".join(f"{r['gate'][n]:.2f}" for n in ("dq", "dk", "dv")) + (" PASS" if r["gate_pass"] else " FAIL")
                 for r in (f32_row, bf16_row)]
        lines.append(f"| {f32_row['shape']} | {f32_row['size']} | {f32_row['dq_err']:.3e} ({f32_row['dq_rel']:.2e}) | "
                     f"{bf16_row['dq_err']:.3e} ({bf16_row['dq_rel']:.2e}) | "
                     f"{bf16_row['dq_err'] / f32_row['dq_err']:.2f} | "
                     f"{gates[0]} | {gates[1]} |")
    write_report_files(report, lines, rows)
    print("\n".join(lines))
    return 1 if bad else 0


def main(argv=None) -> int:
    p = build_run_parser(__doc__, "grad_accum.md")
    p.add_argument("--smoke", action="store_true", help="the CPU interpreter (random atomic order), a small problem")
    args = p.parse_args(argv)
    if args.action == "build":
        build(args.directory)
        return 0
    return run(args.directory, args.report, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
