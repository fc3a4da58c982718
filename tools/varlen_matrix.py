"""Varlen on a GPU: packed sequences of uneven lengths (empty and length-1 ones among them) under the gate.

    python tools/varlen_matrix.py build DIR [--arch sm_90]
    python tools/varlen_matrix.py run DIR --report FILE [--jobs N] [--smoke]

(build needs MLIR; run needs numpy and the GPU executor only.)

Variants: dtype {f16, bf16, f32} x mask {none, top-left, bottom-right, window 64,0} x hdim {64, 128} x GQA
{1, 4}, plus ALiBi (bottom-right) per dtype, each on the body auto picks (tiled for f16 / bf16 on
sm_90, warp for f32). Each variant runs on every length set below, Hq 8. The oracle and the same-dtype
reference run per sequence in float64 / the dtype (fmha_mlir/varlen_problem.py), in worker processes
while the GPU runs the kernels; seeds are a CRC-32 of the row's description.
"""
from __future__ import annotations

import platform
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from fmha_mlir.api import load_bundle
from fmha_mlir.bodies import BODIES, choose_config
from fmha_mlir.runtime.executor import get_executor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import get_target
from fmha_mlir.varlen_problem import make_varlen_problem
from build_run import build_bundles, build_run_parser, write_report_files  # run as a script: tools/ is on sys.path

HEADS_Q = 8
# (query lengths, key lengths): empty queries, empty keys, length 1, blocks cut at odd places, long ones.
LENGTH_SETS = (
    ((0, 1, 37, 130, 1000, 513), (5, 0, 200, 64, 1000, 1)),
    ((1, 777, 2048, 0, 64, 300), (1, 2048, 777, 64, 0, 301)),
)
SMOKE_SETS = (((0, 1, 9), (5, 0, 13)),)
MASKS = ("none", "top_left", "bottom_right", "window:64,0")


def variants() -> list[AttentionBwdSpec]:
    out = [AttentionBwdSpec(dtype, hdim, gqa_ratio=gqa, mask=Mask.parse(mask), varlen=True)
           for dtype in ("f16", "bf16", "f32") for mask in MASKS for hdim in (64, 128) for gqa in (1, 4)]
    out += [AttentionBwdSpec(dtype, 128, gqa_ratio=4, mask=Mask("causal_bottom_right"), bias="alibi", varlen=True)
            for dtype in ("f16", "bf16", "f32")]
    return out


def jobs(arch: str, smoke: bool) -> list[tuple]:
    target = get_target(arch)
    return [(spec, choose_config(spec, target), lengths) for spec in variants()
            for lengths in (SMOKE_SETS if smoke else LENGTH_SETS)]


def seed_of(spec, lengths) -> int:
    return zlib.crc32(f"{spec.kernel_prefix}/{spec.mask}/{lengths}".encode())


def build(directory: Path, arch: str) -> None:
    target = get_target(arch)
    built = build_bundles(directory, arch, [(spec, choose_config(spec, target)) for spec in variants()])
    print(f"built {built} varlen bundles for {arch} under {directory / arch}")


def _reference(job):
    spec, _, (lengths_q, lengths_k) = job
    problem = make_varlen_problem(spec, lengths_q, lengths_k, heads_q=HEADS_Q, seed=seed_of(spec, job[2]))
    problem.oracle_gradients()
    problem.lowp_gradients(BODIES[job[1].body].numerics)   # here, not serialised in the parent
    return problem


def run(directory: Path, arch: str, report: Path, workers: int, smoke: bool) -> int:
    device = get_executor("cpu" if smoke else None, "nvidia" if arch.startswith("sm_") else "amd")
    planned, rows, started = jobs(arch, smoke), [], time.time()
    with ProcessPoolExecutor(workers) as pool:
        for n, (problem, job) in enumerate(zip(pool.map(_reference, planned), planned), 1):
            spec, config, lengths = job
            bundle = load_bundle(directory, spec, arch, config)
            checks = problem.check(run_bundle(bundle, device, problem.tensors, problem.scalars), bundle.numerics)
            rows.append({"kernel": f"{spec.kernel_prefix}_{config.tag}", "body": config.body,
                         "lengths_q": list(lengths[0]), "lengths_k": list(lengths[1]), "heads_q": HEADS_Q,
                         "seed": seed_of(spec, lengths), "pass": all(c.passed for c in checks),
                         "checks": {c.name: {"err": c.max_abs_err, "allowed": c.allowed, "ratio": c.ratio}
                                    for c in checks}})
            print(f"[{n}/{len(planned)}] {rows[-1]['kernel']} Sq {lengths[0]} Sk {lengths[1]}: "
                  f"{'PASS' if rows[-1]['pass'] else 'FAIL'} (worst {max(c.ratio for c in checks):.2f})", flush=True)
            if n % 16 == 0:   # a run cut short by a time limit still leaves a report of what it did
                write_report(report, arch, device.name, rows, time.time() - started)
    write_report(report, arch, device.name, rows, time.time() - started)
    failures = sum(not r["pass"] for r in rows)
    print(f"{len(rows) - failures} passed, {failures} failed")
    return 1 if failures else 0


def write_report(path: Path, arch: str, executor: str, rows: list[dict], seconds: float) -> None:
    worst = max((c["ratio"] for r in rows for c in r["checks"].values()), default=0.0)
    lines = [f"# {arch} varlen matrix on the {executor} executor", "",
             f"Host: {platform.node()}, Python {platform.python_version()}; {len(rows)} runs in {seconds:.0f} s; "
             f"{sum(r['pass'] for r in rows)} PASS, {sum(not r['pass'] for r in rows)} FAIL; the largest error is "
             f"{worst:.2f} of its bound.", "",
             "Packed [total, H, D] tensors with cu_seqlens, Hq 8; the gate per gradient over the packed tensor "
             "(fmha_mlir.tolerance), the oracle and the same-dtype reference run per sequence. Each cell: "
             "error / allowed = ratio.", "",
             "| kernel | body | Sq | Sk | seed | dQ | dK | dV | result |", "| --- " * 9 + "|"]
    for r in rows:
        cells = [f"{c['err']:.2e} / {c['allowed']:.2e} = {c['ratio']:.2f}" for c in r["checks"].values()]
        lines.append(f"| {r['kernel']} | {r['body']} | {r['lengths_q']} | {r['lengths_k']} | {r['seed']} | "
                     f"{' | '.join(cells)} | {'PASS' if r['pass'] else 'FAIL'} |")
    write_report_files(path, lines, rows)


def main(argv=None) -> int:
    p = build_run_parser(__doc__, "varlen_report.md")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--jobs", type=int, default=8, help="oracle worker processes")
    p.add_argument("--smoke", action="store_true", help="tiny lengths in the CPU interpreter (a dry run)")
    args = p.parse_args(argv)
    if args.action == "build":
        build(args.directory, args.arch)
        return 0
    return run(args.directory, args.arch, args.report, args.jobs, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
