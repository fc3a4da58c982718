"""The inputs that gave silent NaN gradients, on a GPU: build the bundles where MLIR is, run them where
the GPU is (numpy, cuda-bindings and the GPU executor only), and write a report.

    python tools/nan_classes.py build DIR [--arch sm_90]
    python tools/nan_classes.py run DIR --report FILE [--arch sm_90] [--executor cuda] [--smoke]

Classes, each on the tiled and the warp body where the body takes the spec:
- lse -inf: rows that see no key (bottom-right, seqlen_q > seqlen_k) given lse = -inf, torch.logsumexp's
  convention, and +inf; B1 Hq4 Sq700 Sk300 d128, bf16 and f16.
- few keys: q, k of standard deviation 3 (v, dO 1.5), 1-3 keys, Sq 76, f16, d32 / d64 / d128, no mask:
  rows of lse far below 0, where the padded keys of a tail tile overflowed dS.
- negative slopes: ALiBi slopes [-0.5, -0.25] (and d(slopes)), f16 and bf16, no mask and bottom-right,
  Sq/Sk 77/1000, 1000/77 and 700/300.
Every run must pass the gate (fmha_mlir.tolerance against the float64 oracle), which fails any gradient
that is not finite; the report counts the runs with a gradient that is not finite apart. Known: with one
key, dK is one cancelling sum of rounding noise and may exceed the gate's bound (no NaN; the gate has no
conditioning term for it). --smoke: the same cases at sizes the CPU interpreter runs (--executor cpu).
"""
from __future__ import annotations

import dataclasses
import math
import platform
import sys
import time
from pathlib import Path

from fmha_mlir.api import bundle_path
from fmha_mlir.bodies import choose_config
from fmha_mlir.errors import SpecError
from fmha_mlir.extreme_inputs import lse_minus_inf, scaled_problem
from fmha_mlir.problem import ProblemSize
from fmha_mlir.runtime.bundle import Bundle
from fmha_mlir.runtime.executor import get_executor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import get_target
from build_run import build_bundles, build_run_parser, write_report_files  # run as a script: tools/ is on sys.path

BODIES = ("tiled", "warp")
NEGATIVE_SLOPES = (-0.5, -0.25)


@dataclasses.dataclass(frozen=True)
class Case:
    """One run: a spec, its problem (sizes, seed, magnitude of q and k, slopes) and the lse convention."""

    name: str
    spec: AttentionBwdSpec
    size: ProblemSize
    seed: int
    magnitude: float = 1.0
    slopes: tuple | None = None
    minus_inf: bool = False

    def problem(self):
        return scaled_problem(self.spec, self.size, self.seed, self.magnitude, self.slopes)

    def tensors(self, problem) -> dict:
        lse = problem.tensors["lse"]
        return dict(problem.tensors, lse=lse_minus_inf(lse) if self.minus_inf else lse)


def cases(smoke: bool = False) -> list[Case]:
    def size(heads, sq, sk):   # smoke: 1/60 of the lengths (at least 3), their order kept
        return ProblemSize(1, heads, max(3, sq // 60), max(3, sk // 60)) if smoke else ProblemSize(1, heads, sq, sk)

    out = []
    for dtype, minus_inf in ((d, m) for d in ("bf16", "f16") for m in (True, False)):
        spec = AttentionBwdSpec(dtype, 128, mask=Mask("causal_bottom_right"))
        out.append(Case(f"lse {'-inf' if minus_inf else '+inf'}", spec, size(4, 700, 300), seed=23,
                        minus_inf=minus_inf))
    for hdim, keys in ((h, n) for h in (32, 64, 128) for n in (1, 2, 3)):
        spec = AttentionBwdSpec("f16", hdim, mask=Mask("none"))
        out.append(Case("few keys", spec, ProblemSize(1, 4, 13 if smoke else 76, keys), seed=keys, magnitude=3.0))
    for dtype, mask, (sq, sk) in ((d, m, s) for d in ("f16", "bf16") for m in ("none", "causal_bottom_right")
                                  for s in ((77, 1000), (1000, 77), (700, 300))):
        spec = AttentionBwdSpec(dtype, 64, mask=Mask(mask), bias="alibi", alibi_slopes=True, dbias=True)
        out.append(Case("negative slopes", spec, size(2, sq, sk), seed=sq + sk, slopes=NEGATIVE_SLOPES))
    return out


def plan(arch: str, smoke: bool = False) -> list[tuple[Case, object]]:
    """(case, config) for every case and body that takes its spec on `arch`."""
    out = []
    for case in cases(smoke):
        for body in BODIES:
            try:
                out.append((case, choose_config(case.spec, get_target(arch), body)))
            except SpecError:   # e.g. the tiled body and d32
                continue
    return out


def build(directory: Path, arch: str) -> None:
    built = build_bundles(directory, arch, [(case.spec, config) for case, config in plan(arch)])
    print(f"built {built} bundles for {arch} under {directory / arch}")


def run(directory: Path, arch: str, report: Path, executor: str, smoke: bool) -> int:
    device = get_executor(executor)
    rows, started = [], time.time()
    planned = plan(arch, smoke)
    for n, (case, config) in enumerate(planned, 1):
        bundle = Bundle.load(bundle_path(directory, case.spec, arch, config=config))
        problem = case.problem()
        checks = problem.check(run_bundle(bundle, device, case.tensors(problem)), bundle.numerics)
        rows.append({"case": case.name, "kernel": f"{case.spec.kernel_prefix}_{config.tag}", "body": config.body,
                     "size": f"B{case.size.batch} Hq{case.size.heads_q} Sq{case.size.seqlen_q} Sk{case.size.seqlen_k}",
                     "seed": case.seed,
                     "checks": {c.name: {"err": c.max_abs_err, "allowed": c.allowed, "ratio": c.ratio}
                                for c in checks},
                     "finite": all(math.isfinite(c.max_abs_err) for c in checks),
                     "pass": all(c.passed for c in checks)})
        print(f"[{n}/{len(planned)}] {case.name} {rows[-1]['kernel']} {rows[-1]['size']}: "
              f"{'PASS' if rows[-1]['pass'] else 'FAIL'}", flush=True)
    write_report(report, arch, device.name, rows, time.time() - started)
    failures = sum(not r["pass"] for r in rows)
    print(f"{len(rows) - failures} passed, {failures} failed")
    return 1 if failures else 0


def write_report(path: Path, arch: str, executor: str, rows: list[dict], seconds: float) -> None:
    lines = [f"# The NaN classes on {arch} ({executor} executor)", "",
             f"Host: {platform.node()}, Python {platform.python_version()}; {len(rows)} runs in {seconds:.0f} s: "
             f"{sum(r['pass'] for r in rows)} PASS, {sum(not r['pass'] for r in rows)} FAIL, "
             f"{sum(not r['finite'] for r in rows)} with a gradient that is not finite. The gate is "
             "fmha_mlir.tolerance against the float64 oracle; a gradient that is not finite has error inf. "
             "Command: tools/nan_classes.py (its docstring lists the cases).", "",
             "| class | kernel | body | size | seed | error / allowed per gradient | result |",
             "| --- " * 7 + "|"]
    for r in rows:
        cells = ", ".join(f"{name} {c['err']:.2e} / {c['allowed']:.2e}" for name, c in r["checks"].items())
        lines.append(f"| {r['case']} | {r['kernel']} | {r['body']} | {r['size']} | {r['seed']} | {cells} | "
                     f"{'PASS' if r['pass'] else 'FAIL'} |")
    write_report_files(path, lines, rows)


def main(argv=None) -> int:
    p = build_run_parser(__doc__, "nan_classes.md")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--executor", default="cuda", choices=("cuda", "hip", "cpu"),
                   help="run: the executor (cpu with --smoke: a dry run of the tool here)")
    p.add_argument("--smoke", action="store_true", help="run: sizes the CPU interpreter runs in seconds")
    args = p.parse_args(argv)
    if args.action == "build":
        build(args.directory, args.arch)
        return 0
    return run(args.directory, args.arch, args.report, args.executor, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
