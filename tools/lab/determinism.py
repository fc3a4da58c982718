"""Bitwise reproducibility on the GPU: each variant's gradients over many runs, deterministic mode and not.

    python tools/lab/determinism.py build DIR [--arch sm_90a]          # where MLIR is
    python3 tools/lab/determinism.py run DIR --runs 1000 --report FILE  # where the GPU is (numpy + cuda-bindings)
    python tools/lab/determinism.py run DIR --smoke --runs 3            # a dry run on the CPU interpreter

One deterministic spec per feature (masks, GQA, a bias with dbias) and the same spec without the
mode, on the tiled body's table for --arch (sm_90: mma.sync, dQ partials; sm_90a: wgmma, whose rows with
a dQ writer take turns on one dq_acc). Each bundle is prepared once on one problem and launched `runs` times;
after every launch the outputs come back and are hashed (sha256 of their bytes). A deterministic
plan must give one distinct result; the default plan, whose dQ atomics land in any order, usually
gives several (FlashAttention-3 tests its deterministic mode the same way). The first run of each is
also put to the gate against the float64 oracle.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

from fmha_mlir.api import load_bundle
from fmha_mlir.bodies import choose_config
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import get_target
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/: the modules the tools share
from build_run import build_bundles, build_run_parser, write_report_files  # noqa: E402

SIZE = ProblemSize(batch=2, heads_q=8, seqlen_q=1000, seqlen_k=1000)
SMOKE = ProblemSize(batch=1, heads_q=4, seqlen_q=40, seqlen_k=300)   # --smoke: seconds on the interpreter
FEATURES = {
    "bf16 d128 causal GQA 2": AttentionBwdSpec("bf16", 128, mask=Mask("causal_bottom_right"), gqa_ratio=2),
    "f16 d64 no mask": AttentionBwdSpec("f16", 64),
    "bf16 d64 sliding window 64,0": AttentionBwdSpec("bf16", 64, mask=Mask("sliding_window", 64, 0)),
    "bf16 d128 bias [1,H] + dbias": AttentionBwdSpec("bf16", 128, bias="elementwise", dbias=True),
}


def variants(arch: str):
    """(feature, deterministic, spec, config) for each feature, in deterministic mode and without it."""
    for feature, spec in FEATURES.items():
        for deterministic in (True, False):
            spec_d = dataclasses.replace(spec, deterministic=deterministic)
            yield feature, deterministic, spec_d, choose_config(spec_d, get_target(arch), "tiled")


def build(directory: Path, arch: str) -> None:
    build_bundles(directory, arch, [(spec, config) for _, _, spec, config in variants(arch)])


def run(directory: Path, arch: str, runs: int, report: Path, smoke: bool = False) -> int:
    from fmha_mlir.runtime.cpu_executor import CpuExecutor
    from fmha_mlir.runtime.executor import get_executor
    from fmha_mlir.runtime.runner import PreparedRun

    device = CpuExecutor(atomic_order="random") if smoke else get_executor("cuda")
    size = SMOKE if smoke else SIZE
    rows, bad = [], 0
    for feature, deterministic, spec, config in variants(arch):
        bundle = load_bundle(directory, spec, arch, config)
        problem = make_problem(spec, size, seed=7)
        hashes, first = set(), None
        with PreparedRun(bundle, device, problem.tensors) as prepared:
            for _ in range(runs):
                prepared.launch()
                outputs = prepared.results()
                hashes.add(hashlib.sha256(b"".join(outputs[n].tobytes() for n in sorted(outputs))).hexdigest())
                first = first or {n: a.copy() for n, a in outputs.items()}
        checks = problem.check(first, bundle.numerics)
        row = {"feature": feature, "deterministic": deterministic, "kernel": f"{spec.kernel_prefix}_{config.tag}",
               "runs": runs, "distinct": len(hashes), "gate": max(c.ratio for c in checks),
               "gate_pass": all(c.passed for c in checks)}
        bad += (deterministic and len(hashes) != 1) or not row["gate_pass"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    lines = [f"# Bitwise reproducibility on the GPU: {runs} runs per variant", "",
             f"{arch} tiled body on the {device.name} executor, problem {size} (seed 7), outputs hashed after every "
             "launch; a deterministic plan must give 1 distinct result. Gate: the first run's worst ratio to its "
             "bound.", "",
             "| feature | mode | kernel | runs | distinct results | gate |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['feature']} | {'deterministic' if r['deterministic'] else 'default'} | {r['kernel']} | "
              f"{r['runs']} | {r['distinct']} | {r['gate']:.2f} {'PASS' if r['gate_pass'] else 'FAIL'} |" for r in rows]
    write_report_files(report, lines, rows)
    return 1 if bad else 0


def main(argv=None) -> int:
    p = build_run_parser(__doc__, "determinism.md")
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--arch", default="sm_90", help="sm_90 (mma.sync) or sm_90a (wgmma); the same at build and run")
    p.add_argument("--smoke", action="store_true", help="the CPU interpreter (random atomic order), a small problem")
    args = p.parse_args(argv)
    if args.action == "build":
        build(args.directory, args.arch)
        return 0
    return run(args.directory, args.arch, args.runs, args.report, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
