"""fmha-bwd: the main job. Compile the backward for one problem, run it, check it against the oracle.

With no GPU the kernels run in the CPU SIMT interpreter (the target's own kernel IR: DPP reductions and
wave64 on AMD, shuffles and wave32 on NVIDIA). Prints one row per gradient and exits 1 on any FAIL, 2 on
an error (bad options or problem: the message says which and the fix).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fmha_mlir.api import AttentionBackward
from fmha_mlir.errors import (EXIT_ERROR, EXIT_FAIL, EXIT_OK, FmhaError, Reason, SpecError,
                              exit_status_epilog)
from fmha_mlir.problem import BIAS_BROADCASTS, LAYOUTS, ProblemSize, make_problem
from fmha_mlir.runtime.runner import check_tensors, plan_layouts
from fmha_mlir.spec import DTYPES, GRAD_ACCUMS, AttentionBwdSpec, Mask
from fmha_mlir.target import TARGETS
from fmha_mlir.varlen_problem import make_varlen_problem


def parse_args(argv):
    p = argparse.ArgumentParser(prog="fmha-bwd", description=__doc__.splitlines()[0],
                                epilog=exit_status_epilog("a gradient failed the gate (FAIL rows)"))
    p.add_argument("--target", default="auto",
                   help=f"{', '.join(TARGETS)}, all, or auto (the GPU's arch, else gfx942 on the CPU)")
    p.add_argument("--executor", default="auto", choices=("auto", "cpu", "cuda", "hip"))
    p.add_argument("--body", default="auto", choices=("auto", "warp", "tiled"),
                   help="kernel body: auto takes the fastest one that supports the problem on the target")
    p.add_argument("--dtype", default="f16", choices=DTYPES)
    p.add_argument("--hdim", type=int, default=64, help="head dim of q and k")
    p.add_argument("--hdim-v", type=int, default=0, help="head dim of v (default: --hdim)")
    p.add_argument("--mask", default="causal_bottom_right", help="none, top_left, bottom_right or window:L,R")
    p.add_argument("--gqa", type=int, default=2, help="query heads per key/value head")
    p.add_argument("--softcap", type=float, default=0.0, help="scores through C tanh(s / C) (0: off)")
    p.add_argument("--bias", default="none", choices=("none", "elementwise", "alibi"),
                   help="elementwise: a random bias tensor (shape: --bias-broadcast); alibi: -slope_h |i - j|, the "
                        "standard slopes computed in the kernel (or --alibi-slopes)")
    p.add_argument("--bias-broadcast", default="batch", choices=tuple(BIAS_BROADCASTS),
                   help="the dims the bias tensor has size 1 in (batch: [1, H, Sq, Sk]); for "
                        "--alibi-slopes, batch gives [1, H] and none [B, H]")
    p.add_argument("--alibi-slopes", action="store_true", help="ALiBi's slopes from a random f32 tensor")
    p.add_argument("--dbias", action="store_true",
                   help="also the bias's gradient: dbias, or d(slopes) (with --bias alibi: implies --alibi-slopes)")
    p.add_argument("--sinks", action="store_true",
                   help="learnable attention sinks (a random f32 logit per query head) and their gradient dsinks")
    p.add_argument("--dlse", action="store_true", help="a random gradient of the lse (D becomes D - dlse)")
    p.add_argument("--deterministic", action="store_true",
                   help="no atomics whose order can change a result (the tiled body: dQ partials per key block)")
    p.add_argument("--grad-accum", default="f32", choices=GRAD_ACCUMS,
                   help="dQ's atomics: f32 into a workspace, or bf16 packed atomics into dQ (bf16, tiled body)")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--heads", type=int, default=4, help="query heads")
    p.add_argument("--seqlen-q", type=int, default=37)
    p.add_argument("--seqlen-k", type=int, default=53)
    p.add_argument("--varlen", type=_lengths, metavar="SQ,SQ,...",
                   help="packed sequences of these query lengths (0 allowed): varlen, cu_seqlens; replaces "
                        "--batch / --seqlen-q")
    p.add_argument("--varlen-k", type=_lengths, metavar="SK,SK,...", help="their key lengths (default: --varlen)")
    p.add_argument("--layout", default="bshd", choices=LAYOUTS, help="storage order of q, k, v, o, dO")
    p.add_argument("--atomic-order", default="random", choices=("sequential", "random"),
                   help="order the CPU interpreter applies atomics in")
    p.add_argument("--bundle-dir", type=_directory,
                   help="prebuilt bundles (<dir>/<arch>/<kernel>/) to run instead of compiling")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _lengths(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(n) for n in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write lengths as comma-separated integers, e.g. 0,1,37,130")


def _directory(text: str) -> str:
    # A mistyped folder would otherwise just miss every bundle and compile instead, without a word.
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder: give the -o DIR of fmha-compile runs")
    return text


def _problem(args, spec: AttentionBwdSpec):
    """(the problem, its size line) of the arguments: padded, or packed with --varlen."""
    if args.varlen is None:
        size = ProblemSize(args.batch, args.heads, args.seqlen_q, args.seqlen_k)
        line = (f"B{size.batch} Hq{size.heads_q} Hkv{size.heads_kv(spec.gqa_ratio)} Sq{size.seqlen_q} "
                f"Sk{size.seqlen_k} {args.layout}")
        return make_problem(spec, size, seed=args.seed, layout=args.layout, broadcast=args.bias_broadcast), line
    lengths_k = args.varlen_k or args.varlen
    problem = make_varlen_problem(spec, args.varlen, lengths_k, heads_q=args.heads, seed=args.seed)
    return problem, (f"varlen Sq {list(args.varlen)} Sk {list(lengths_k)} Hq{args.heads} "
                     f"Hkv{args.heads // spec.gqa_ratio} packed [T, H, D]")


def targets_of(args) -> list[str | None]:
    if args.target == "all":
        return list(TARGETS)
    if args.target == "auto":
        return [None]
    if args.target not in TARGETS:
        raise SpecError([Reason("target", f"unknown target {args.target!r}",
                                f"use {', '.join(TARGETS)}, all or auto")])
    return [args.target]


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        slopes = args.bias == "alibi" and (args.alibi_slopes or args.dbias)
        spec = AttentionBwdSpec(dtype=args.dtype, hdim_q=args.hdim, hdim_v=args.hdim_v, gqa_ratio=args.gqa,
                                mask=Mask.parse(args.mask), softcap=args.softcap, bias=args.bias, dbias=args.dbias,
                                alibi_slopes=slopes, deterministic=args.deterministic, grad_accum=args.grad_accum,
                                varlen=args.varlen is not None, sinks=args.sinks, lse_grad=args.dlse)
        spec.check()   # before the problem's sizes divide by gqa_ratio
        problem, size_line = _problem(args, spec)
        problem.oracle_gradients()
        targets = targets_of(args)
        shapes = {n: "x".join(map(str, t.shape)) for n, t in problem.tensors.items() if n in ("bias", "alibi_slopes")}
        extras = (f" softcap {spec.softcap:g}" if spec.softcap else "") + (
            f" bias {spec.bias}" if spec.bias != "none" else "") + "".join(
            f" {n}[{s}]" for n, s in shapes.items()) + (" +dbias" if spec.dbias else "") + (
            " deterministic" if spec.deterministic else "") + (
            f" grad-accum {spec.grad_accum}" if spec.grad_accum != "f32" else "") + (
            " sinks" if spec.sinks else "") + (" dlse" if spec.lse_grad else "")
        print(f"fmha-bwd: {spec.dtype} hdim {spec.hdim_q}x{spec.hdim_v} mask {spec.mask} gqa {spec.gqa_ratio}"
              f"{extras} | {size_line}")
        print(f"seed {args.seed}; the gate: max|err| <= 2 x max|same-dtype reference err| + 2^-20 max|oracle| "
              "(fmha_mlir.tolerance); CK's table beside it")
        print(f"{'target':<8} {'body':<6} {'executor':<9} {'compile':>8} {'run':>8}  {'grad':<13} {'max|err|':>10} "
              f"{'allowed':>10} {'ratio':>6} {'CK':>10}  status")
        failed = False
        for index, arch in enumerate(targets, 1):
            runner = AttentionBackward(executor=None if args.executor == "auto" else args.executor,
                                       arch=arch, bundle_dir=args.bundle_dir, atomic_order=args.atomic_order,
                                       body=args.body)
            label = arch or "auto"
            print(f"[{index}/{len(targets)}] {label}: compiling ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            bundle = runner.bundle(spec)
            compiled = time.perf_counter()
            t = problem.tensors
            scalars = getattr(problem, "scalars", None)
            layouts = plan_layouts(bundle, check_tensors(bundle, t), scalars)
            workspace = sum(layout.nbytes for name, layout in layouts.items()
                            if bundle.buffers[name]["role"] == "workspace")
            print(f"[{index}/{len(targets)}] {runner.arch}: running {bundle.spec.kernel_prefix} on "
                  f"{runner.device().name} (workspaces {workspace / 2**20:.2f} MiB) ...", file=sys.stderr, flush=True)
            grads = runner.run(spec, t["q"], t["k"], t["v"], t["o"], t["do"], t["lse"], bias=t.get("bias"),
                               alibi_slopes=t.get("alibi_slopes"), cu_seqlens_q=t.get("cu_seqlens_q"),
                               cu_seqlens_k=t.get("cu_seqlens_k"), sinks=t.get("sinks"), dlse=t.get("dlse"),
                               **(scalars or {}))
            ran = time.perf_counter()
            names = ("dq", "dk", "dv") + spec.bias_operands()[1] + spec.row_operands()[1]
            for check in problem.check(dict(zip(names, grads)), bundle.numerics):
                failed |= not check.passed
                print(f"{runner.arch:<8} {bundle.config.body:<6} {runner.device().name:<9} {compiled - start:>7.2f}s "
                      f"{ran - compiled:>7.2f}s  {check.name:<13} {check.max_abs_err:>10.3e} {check.allowed:>10.3e} "
                      f"{check.ratio:>6.2f} {check.ck_allowed:>10.3e}  {'PASS' if check.passed else 'FAIL'}")
        return EXIT_FAIL if failed else EXIT_OK
    except FmhaError as exc:
        print(f"fmha-bwd: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
