"""How much of d(slopes)'s error on the H200 is sm_90's ex2.approx (run where the GPU is: numpy, torch, triton).

    python3 tools/lab/exp2_error.py --matrix reports/h200_alibi_slopes.json --report exp2_error.md

MUFU.EX2 (ex2.approx.ftz.f32) is measured two ways against float64 exp2:
1. over a sweep of P's arguments, [-60, 0]: its error in f32 ulps (largest, mean, and how much of it is
   a function of the argument's fraction alone, which is what lets it add up along an ALiBi row);
2. on the problems of a variant-matrix report whose d(slopes) ran closest to the gate's bound (the
   rows at >= 0.8 of it): P's exponent formed as the kernels form it (natural units, rounded to f32,
   times log2 e), then the first-order d(slopes) error that ex2.approx alone puts in,
   sum over q, k of (P_mufu - P_exact) (dP - D) (-|distance|), beside the error the kernel had and
   the gate's bound (and the same for a correctly rounded f32 exp2). If that share is of the size of
   the bound, the exp2 is what crossed it.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from fmha_mlir import oracle
from fmha_mlir.problem import make_problem
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/: the modules the tools share
from gpu_matrix import job_key, jobs, problem_seed  # noqa: E402
from build_run import write_report_files  # noqa: E402

LOG2_E = np.float32(np.log2(np.e))
SLOPES_MODS = {"bias": "alibi", "alibi_slopes": True, "dbias": True}


def mufu_ex2():
    """x (f32 numpy) -> ex2.approx.ftz.f32(x) computed on the GPU."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        x = tl.load(x_ptr + i, mask=m)
        y = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                      is_pure=True, pack=1)
        tl.store(y_ptr + i, y, mask=m)

    def run(x: np.ndarray) -> np.ndarray:
        flat = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32).ravel()).cuda()
        out = torch.empty_like(flat)
        kernel[(triton.cdiv(flat.numel(), 1024),)](flat, out, flat.numel(), BLOCK=1024)
        return out.cpu().numpy().reshape(x.shape)

    return run


def ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Signed error in f32 ulps of the exact value (normal results only)."""
    return (got.astype(np.float64) - exact) / np.spacing(exact.astype(np.float32)).astype(np.float64)


def sweep(ex2) -> dict:
    rng = np.random.default_rng(0)
    x = (-rng.random(1 << 22) * 60).astype(np.float32)
    e = ulps(ex2(x), np.exp2(x.astype(np.float64)))
    # The same fractions at other integer parts: equal errors mean a function of the fraction alone.
    frac = (x - np.floor(x)).astype(np.float32)[:1 << 16]
    shifted = [ulps(ex2((frac - n).astype(np.float32)), np.exp2((frac - n).astype(np.float64))) for n in (1, 9, 33)]
    same = float(np.mean(np.isclose(shifted[0], shifted[1]) & np.isclose(shifted[0], shifted[2])))
    return {"max_ulps": float(np.abs(e).max()), "mean_ulps": float(e.mean()),
            "rms_ulps": float(np.sqrt(np.mean(e * e))),
            "fraction_only": same}


def replay(problem, ex2) -> np.ndarray:
    """d(slopes)'s first-order error from ex2.approx, shaped like the slopes."""
    v = problem.values
    spec = problem.spec
    q, k, vv, o, do, lse = (v[n].astype(np.float32) for n in ("q", "k", "v", "o", "do", "lse"))
    g = spec.gqa_ratio
    k_exp, v_exp = np.repeat(k, g, axis=1), np.repeat(vv, g, axis=1)
    sq, sk = q.shape[2], k.shape[2]
    core = (q @ np.swapaxes(k_exp, -1, -2)) * np.float32(spec.scale)
    distance = oracle.alibi_distance(sq, sk)
    slopes = np.broadcast_to(v["alibi_slopes"], (q.shape[0], q.shape[1]))
    bias = -slopes[..., None, None] * distance
    shifted = (bias - v["lse"][..., None]).astype(np.float32)
    visible = oracle.visible_matrix(spec.mask, sq, sk)
    x = np.where(visible, ((core + shifted).astype(np.float32) * LOG2_E).astype(np.float32), np.float32(-np.inf))
    p_exact = np.exp2(x.astype(np.float64))
    p_mufu = ex2(x).astype(np.float64)
    dp = (do @ np.swapaxes(v_exp, -1, -2)).astype(np.float64)
    d = np.sum(do.astype(np.float64) * o, axis=-1)
    per_head = np.sum((p_mufu - p_exact) * (dp - d[..., None]) * -distance, axis=(-1, -2))
    shape = np.shape(v["alibi_slopes"])
    return per_head.sum(axis=0, keepdims=True) if shape[0] == 1 else per_head


def write_report(report: Path, stats: dict, out: list[dict], matrix_name: str) -> None:
    lines = ["# ex2.approx.ftz.f32 (MUFU.EX2) on the H200, and its share of d(slopes)'s error", "",
             f"Sweep of 2^22 arguments in [-60, 0] against float64 exp2: largest {stats['max_ulps']:.2f} f32 ulps, "
             f"mean {stats['mean_ulps']:+.3f}, rms {stats['rms_ulps']:.3f}; the error is a function of the "
             f"argument's fraction alone for {100 * stats['fraction_only']:.1f}% of fractions (the same at integer "
             "parts -1, -9, -33).", "",
             f"Rows of {matrix_name} at >= 0.8 of the bound: the kernel's d(slopes) error, the bound, and the "
             "first-order error ex2.approx alone puts in (largest over the slopes), and that of a correctly "
             "rounded f32 exp2 for comparison. The bound is the one that report states.", "",
             "| problem | kernel error | bound | ratio | ex2.approx's share | share / bound | rounded exp2's share |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['key']} | {r['kernel_err']:.3e} | {r['allowed']:.3e} | {r['ratio']:.2f} | {r['ex2_share']:.3e} | "
              f"{r['ex2_share'] / r['allowed']:.2f} | {r['rounded_share']:.3e} |" for r in out]
    write_report_files(report, lines, {"sweep": stats, "rows": out})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--matrix", type=Path, required=True, help="a gpu_matrix report's .json (ALiBi slopes + dbias)")
    p.add_argument("--body", default="tiled")
    p.add_argument("--report", type=Path, default=Path("exp2_error.md"))
    args = p.parse_args(argv)
    ex2 = mufu_ex2()
    stats = sweep(ex2)
    print(json.dumps(stats), flush=True)
    rows = {f"{r['kernel']} {r['size']} {r['layout']}": r for r in json.loads(args.matrix.read_text())}
    out = []
    for job in jobs("sm_90", args.body, score_mods=SLOPES_MODS):
        row = rows.get(job_key(*job))
        if row is None or row["checks"]["dalibi_slopes"]["ratio"] < 0.8:
            continue
        spec, config, size, layout, broadcast = job
        problem = make_problem(spec, size, seed=problem_seed(spec, size, layout, broadcast), layout=layout,
                               broadcast=broadcast)
        share = float(np.max(np.abs(replay(problem, ex2))))
        rounded = float(np.max(np.abs(replay(problem, np.exp2))))   # a correctly rounded f32 exp2's
        c = row["checks"]["dalibi_slopes"]
        out.append({"key": job_key(*job), "kernel_err": c["err"], "allowed": c["allowed"], "ratio": c["ratio"],
                    "ex2_share": share, "rounded_share": rounded})
        print(json.dumps(out[-1]), flush=True)
    write_report(args.report, stats, out, args.matrix.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
