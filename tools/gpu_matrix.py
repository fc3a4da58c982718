"""The variant matrix on a GPU: build bundles where MLIR is (here), run them where the GPU is.

    python tools/gpu_matrix.py build DIR [--arch sm_90] [--body auto] [--ptxas PTXAS] [score features] [--hdim N]
                                         [--table-row D]
    python tools/gpu_matrix.py run DIR --report FILE [--jobs N] [--resume] [--only REGEX] [the same options]

Score features (the same on build and run): --softcap C, --bias elementwise|alibi, --alibi-slopes,
--dbias. A bias tensor's shape cycles over the problems: [1, H, Sq, Sk], [B, 1, ...],
[1, 1, ...], [B, H, ...]; a slopes tensor's over [1, H] and [B, H].

(build needs MLIR and compiles every variant, to cubins with --ptxas of a CUDA toolkit: PTX is
JIT-compiled by the driver at every load on the GPU, seconds per variant; run needs numpy and the GPU
executor only.)

Variants: dtype {f16, bf16, f32} x mask {none, top-left, bottom-right, window 64,0} x hdim {64, 128,
256} x GQA ratio {1, 4}, each on the body `--body` picks (auto: the tiled body for f16 / bf16 on sm_90,
the warp body otherwise; `--body warp` and `--body tiled` force one, where it applies). Sizes per variant:
B2 H8 S1024 for hdim 128 (realistic), and the odd lengths Sq=77/Sk=1000 and Sq=1000/Sk=77 at B1 H4 for
every variant; layouts alternate BHSD / BSHD. --hdim N puts every variant at head dim N; --table-row D
runs every variant the tiled table's row D takes on --arch instead of the table's choice (a row the
table does not yet take for a head dim, gated on the GPU before it does: --hdim 192 --table-row 256).
run --only REGEX runs the variants whose kernel name matches (a change to one row: --only _d128x128_).
Every problem's seed is derived from its description by a fixed hash (CRC-32), printed in the report: a
row can be regenerated exactly. The gate is fmha_mlir.tolerance (FACTOR x the same-dtype reference of the
bundle's body); CK's table is the second column. The oracle (float64 NumPy) runs in worker processes while
the GPU runs the kernels.
"""
from __future__ import annotations

import dataclasses
import platform
import re
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from fmha_mlir.api import load_bundle
from fmha_mlir.bodies import BODIES, check_config, choose_config, tiled_table
from fmha_mlir.errors import SpecError
from fmha_mlir.problem import BIAS_BROADCASTS, SLOPES_BROADCASTS, ProblemSize, make_problem
from fmha_mlir.runtime.executor import get_executor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import get_target
from fmha_mlir.tolerance import GRADIENT_NAMES
from fmha_mlir.variants import variant_matrix
# run as a script: tools/ is on sys.path
from build_run import build_bundles, build_run_parser, earlier_rows, write_report_files

REALISTIC = ProblemSize(batch=2, heads_q=8, seqlen_q=1024, seqlen_k=1024)
ODD = (ProblemSize(1, 4, 77, 1000), ProblemSize(1, 4, 1000, 77))
SMOKE = (ProblemSize(1, 4, 9, 13),)  # --smoke: the same matrix at sizes the CPU interpreter runs in seconds


def variants(score_mods: dict | None = None) -> list[AttentionBwdSpec]:
    """The variant matrix, every spec with the score features `score_mods` (spec fields, e.g.
    {"softcap": 30.0, "bias": "alibi"}, or a head dim), each once."""
    return list(dict.fromkeys(dataclasses.replace(spec, **(score_mods or {}))
                              for spec in variant_matrix(window=Mask("sliding_window", 64, 0))))


def problem_seed(spec: AttentionBwdSpec, size: ProblemSize, layout: str, broadcast: str = "batch") -> int:
    """A seed that is the same in every process and on every machine (unlike hash())."""
    text = f"{spec.kernel_prefix}/{spec.mask}/B{size.batch}H{size.heads_q}Sq{size.seqlen_q}Sk{size.seqlen_k}/{layout}"
    if spec.bias_operands()[0]:
        text += f"/{broadcast}"
    return zlib.crc32(text.encode())


def configs(arch: str, body: str, score_mods: dict | None = None, table_row: int | None = None) -> list[tuple]:
    """(spec, config) for every variant the body (auto: the best per spec) can compute on `arch`; with
    table_row, every variant that the tiled table's row of that bucket takes."""
    out, target = [], get_target(arch)
    for spec in variants(score_mods):
        try:
            if table_row is None:
                out.append((spec, choose_config(spec, target, body)))
            else:
                config = dataclasses.replace(tiled_table(arch)[table_row], wave_size=target.wave_size)
                check_config(spec, target, config)
                out.append((spec, config))
        except SpecError:  # a forced body or row that does not take this spec (e.g. tiled and f32)
            continue
    return out


def jobs(arch: str, body: str, smoke: bool = False, score_mods: dict | None = None,
         table_row: int | None = None) -> list[tuple]:
    out = []
    for index, (spec, config) in enumerate(configs(arch, body, score_mods, table_row)):
        sizes = SMOKE if smoke else ((REALISTIC,) if spec.hdim_q == 128 else ()) + ODD
        broadcasts = SLOPES_BROADCASTS if spec.alibi_slopes else tuple(BIAS_BROADCASTS)
        for n, size in enumerate(sizes):
            layout = ("bhsd", "bshd")[(index + n) % 2]
            out.append((spec, config, size, layout, broadcasts[(index + n) % len(broadcasts)]))
    return out


def select(planned: list[tuple], only: str | None) -> list[tuple]:
    """The jobs whose kernel name matches the regular expression `only` (every job without it)."""
    chosen = [job for job in planned if not only or re.search(only, f"{job[0].kernel_prefix}_{job[1].tag}")]
    if not chosen:
        raise SystemExit(f"no variant's kernel name matches --only {only!r}; they read like "
                         f"{planned[0][0].kernel_prefix}_{planned[0][1].tag}")
    return chosen


def build(directory: Path, arch: str, body: str, score_mods: dict | None = None, ptxas: str | None = None,
          table_row: int | None = None) -> None:
    from fmha_mlir.backends.nvidia import cuda_toolkit

    built = build_bundles(directory, arch, configs(arch, body, score_mods, table_row), ptxas)
    binary = "hsaco" if not arch.startswith("sm_") else "cubin" if cuda_toolkit(ptxas) else (
        "PTX, which the driver JIT-compiles at every load: pass --ptxas of a CUDA toolkit for cubins")
    print(f"built {built} bundles for {arch} under {directory / arch} ({binary})")


def _reference(job):
    spec, config, size, layout, broadcast = job
    problem = make_problem(spec, size, seed=problem_seed(spec, size, layout, broadcast), layout=layout,
                           broadcast=broadcast)
    problem.oracle_gradients()
    # The same-dtype reference too: for the warp body (terms added one at a time) it costs seconds, and
    # in the parent process it would serialise the whole matrix behind it.
    problem.lowp_gradients(BODIES[config.body].numerics)
    return problem


def job_key(spec, config, size, layout, broadcast) -> str:
    return (f"{spec.kernel_prefix}_{config.tag} B{size.batch} Hq{size.heads_q} Sq{size.seqlen_q} Sk{size.seqlen_k} "
            f"{layout}{_shape_tag(spec, broadcast)}")


def _shape_tag(spec, broadcast: str) -> str:
    """The bias tensor's shape class in a row's layout cell ('' without a bias tensor)."""
    if not spec.bias_operands()[0]:
        return ""
    if spec.alibi_slopes:
        return " slopes[1,H]" if broadcast == "batch" else " slopes[B,H]"
    one_b, one_h = BIAS_BROADCASTS[broadcast]
    return f" bias[{'1' if one_b else 'B'},{'1' if one_h else 'H'},Sq,Sk]"


def run(directory: Path, arch: str, body: str, report: Path, workers: int, smoke: bool, resume: bool = False,
        score_mods: dict | None = None, table_row: int | None = None, only: str | None = None) -> int:
    device = get_executor(None, "nvidia" if arch.startswith("sm_") else "amd")
    planned = select(jobs(arch, body, smoke, score_mods, table_row), only)
    # --resume: keep the rows an earlier, cut-short run of the same plan wrote, run the rest.
    rows = earlier_rows(report, resume)
    done = {f"{r['kernel']} {r['size']} {r['layout']}" for r in rows}   # the layout cell carries the shape tag
    failures, started, earlier = sum(not r["pass"] for r in rows), time.time(), len(rows)
    todo = [job for job in planned if job_key(*job) not in done]
    if rows:
        print(f"resuming: {len(rows)} runs from {report.with_suffix('.json')}, {len(todo)} to go", flush=True)
    with ProcessPoolExecutor(workers) as pool:
        for n, (problem, job) in enumerate(zip(pool.map(_reference, todo), todo), 1):
            spec, config, size, layout, broadcast = job
            bundle = load_bundle(directory, spec, arch, config)
            grads = run_bundle(bundle, device, problem.tensors)
            checks = problem.check(grads, bundle.numerics)
            ok = all(c.passed for c in checks)
            failures += not ok
            rows.append({"kernel": f"{spec.kernel_prefix}_{config.tag}", "body": config.body, "dtype": spec.dtype,
                         "softcap": spec.softcap, "bias": spec.bias, "dbias": spec.dbias,
                         "mask": str(spec.mask), "hdim": spec.hdim_q, "gqa": spec.gqa_ratio,
                         "layout": layout + _shape_tag(spec, broadcast),
                         "size": f"B{size.batch} Hq{size.heads_q} Sq{size.seqlen_q} Sk{size.seqlen_k}",
                         "seed": problem_seed(spec, size, layout, broadcast),
                         "checks": {c.name: {"err": c.max_abs_err, "allowed": c.allowed, "ratio": c.ratio,
                                             "ck_allowed": c.ck_allowed, "sum_err": c.sum_err} for c in checks},
                         "pass": ok})
            print(f"[{n}/{len(todo)}] {rows[-1]['kernel']} {rows[-1]['size']} {rows[-1]['layout']}: "
                  f"{'PASS' if ok else 'FAIL'} (worst {max(c.ratio for c in checks):.2f} of the bound)", flush=True)
            if n % 16 == 0:  # a run cut short (a time limit) still leaves a report of what it did
                write_report(report, arch, device.name, rows, time.time() - started, len(planned), earlier)
    write_report(report, arch, device.name, rows, time.time() - started, len(planned), earlier)
    print(f"{len(rows) - failures} passed, {failures} failed")
    return 1 if failures else 0


def write_report(path: Path, arch: str, executor: str, rows: list[dict], seconds: float, planned: int,
                 earlier: int = 0) -> None:
    worst = max((c["ratio"] for r in rows for c in r["checks"].values()), default=0.0)
    grads = [g for g in GRADIENT_NAMES if any(g in r["checks"] for r in rows)]
    names = [{"dq": "dQ", "dk": "dK", "dv": "dV", "dbias": "dbias", "dalibi_slopes": "d(slopes)"}[g] for g in grads]
    partial = "" if len(rows) == planned else f" (**incomplete: {len(rows)} of {planned} planned runs**)"
    lines = [f"# {arch} variant matrix on the {executor} executor", "",
             f"Host: {platform.node()}, Python {platform.python_version()}; {len(rows)} runs{partial}: "
             f"{len(rows) - earlier} in {seconds:.0f} s"
             + (f", {earlier} from an earlier invocation (--resume)" if earlier else "") + "; "
             f"{sum(r['pass'] for r in rows)} PASS, {sum(not r['pass'] for r in rows)} FAIL; the largest error is "
             f"{worst:.2f} of its bound.", "",
             "The gate (fmha_mlir.tolerance): max|kernel - float64 oracle| <= 2 x max|same-dtype reference - oracle| "
             "+ 2^-20 max|oracle|, the reference modelling the bundle's body; for d(slopes), one sum of cancelling "
             "terms, 2 x the larger of that and 2^-24 max sum|term| (the sum's conditioning). Each cell: "
             "error / allowed = ratio; "
             "CK's table would allow the last number. Seeds regenerate each problem "
             "(tools/gpu_matrix.py problem_seed).", "",
             f"| kernel | body | size | layout | seed | {' | '.join(names)} | result |",
             "| --- " * (6 + len(names)) + "|"]
    for r in rows:
        cells = [f"{c['err']:.2e} / {c['allowed']:.2e} = {c['ratio']:.2f} (CK {c['ck_allowed']:.1e})"
                 if c else "-" for c in (r["checks"].get(g) for g in grads)]
        lines.append(f"| {r['kernel']} | {r['body']} | {r['size']} | {r['layout']} | {r['seed']} | "
                     f"{' | '.join(cells)} | {'PASS' if r['pass'] else 'FAIL'} |")
    write_report_files(path, lines, rows)


def main(argv=None) -> int:
    p = build_run_parser(__doc__, "matrix_report.md")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--body", default="auto", choices=("auto", "warp", "tiled"))
    p.add_argument("--jobs", type=int, default=8, help="oracle worker processes")
    p.add_argument("--smoke", action="store_true", help="tiny sizes (a dry run of the tool on the CPU)")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs already in the report's .json (a run cut short) and do the rest")
    p.add_argument("--softcap", type=float, default=0.0, help="every variant with this softcap (0: none)")
    p.add_argument("--bias", default="none", choices=("none", "elementwise", "alibi"),
                   help="every variant with this bias")
    p.add_argument("--alibi-slopes", action="store_true", help="ALiBi's slopes from a tensor")
    p.add_argument("--dbias", action="store_true", help="also the bias's gradient (dbias or d(slopes))")
    p.add_argument("--ptxas", help="build: ptxas of a CUDA toolkit (e.g. /usr/local/cuda-13.0/bin/ptxas) for cubins")
    p.add_argument("--hdim", type=int, help="every variant at this head dim (default: the matrix's)")
    p.add_argument("--table-row", type=int, help="every variant on the tiled table's row of this head-dim bucket")
    p.add_argument("--only", help="run: only the variants whose kernel name matches this regular expression")
    args = p.parse_args(argv)
    score_mods = {"softcap": args.softcap, "bias": args.bias, "alibi_slopes": args.alibi_slopes, "dbias": args.dbias}
    if args.hdim:
        score_mods.update(hdim_q=args.hdim, hdim_v=args.hdim, scale=0.0)   # 0: the head dim's 1/sqrt
    if args.action == "build":
        build(args.directory, args.arch, args.body, score_mods, args.ptxas, args.table_row)
        return 0
    return run(args.directory, args.arch, args.body, args.report, args.jobs, args.smoke, args.resume, score_mods,
               args.table_row, args.only)


if __name__ == "__main__":
    sys.exit(main())
