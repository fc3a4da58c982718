"""Host time and Python calls per call of our torch path, here, without a GPU (a figure repeatable on any machine).

    python tools/bench_torch_overhead.py build DIR            # the bundles (needs MLIR)
    python tools/bench_host_path.py DIR --report reports/bench_host_path.md

The real code runs from the entry point down to cuLaunchKernel, on bf16 tensors of
bench_torch_overhead.py's small shape (B1 H2 S128 D64, causal top-left): the driver and torch's CUDA
parts are tools/cuda_stand_in.py's stand-ins (its docstring lists them). Three entry points:

- AttentionBackward: `ours(q, k, v, o, do, lse, mask="top_left")`, bench_torch_overhead.py's call;
- backward op: fmha_mlir::attention_backward as autograd's backward calls it (options, runner, views);
- forward: `attention(q, k, v, ...)` with q, k, v requiring grad (options, checks, the forward table,
  the autograd node, the lse conversion); torch's flash forward op is replaced by one that returns
  empty out and lse tensors (the GPU op also only queues work);
- step: what a training loop pays per attention call: that forward, then `torch.autograd.backward` from
  a gradient of out through autograd's engine to our backward's launches, the gradients set to None
  between steps (as optimizer.zero_grad does); every tensor says it is on cuda:0 here
  (cuda_stand_in.every_tensor_on_cuda), since torch makes out, lse and the gradients.

Figures: us per call, the median of --repeats timings of --calls calls after a warm-up; and cProfile's
primitive calls per call (function calls, builtins included, each generator resumption counted): a
count of Python operations that does not depend on this machine's speed. The stand-ins' own calls are
included (one per driver call, as cuda-bindings' are one each) and given beside it.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import platform
import pstats
import statistics
import sys
import time
from pathlib import Path

from build_run import write_report_files  # tools/ is on sys.path
import cuda_stand_in

SHAPE = (1, 2, 128, 64)
MASK = "top_left"
WARMUP_CALLS = 50


def entry_points(directory: Path) -> dict:
    """name -> (a call of that entry point on stand-in CUDA tensors, whether every tensor must say cuda)."""
    import torch

    from fmha_mlir.api import AttentionBackward
    from fmha_mlir.spec import Mask
    from fmha_mlir.torch import attention, ops
    from fmha_mlir.torch.options import AttentionOptions

    g = torch.Generator().manual_seed(0)
    q, k, v, o, do = (cuda_stand_in.cuda_like(torch.randn(SHAPE, generator=g).to(torch.bfloat16)) for _ in range(5))
    lse = cuda_stand_in.cuda_like(torch.randn(SHAPE[:3], generator=g))
    leaves = [cuda_stand_in.cuda_like(x.detach().clone().requires_grad_()) for x in (q, k, v)]
    ours = AttentionBackward(executor="cuda", bundle_dir=str(directory))
    text = AttentionOptions(mask=Mask.parse(MASK), bundle_dir=str(directory)).text()

    def step():
        out = attention(*leaves, mask=MASK, layout="bhsd", bundle_dir=str(directory))
        torch.autograd.backward(out, do)
        for x in leaves:
            x.grad = None

    return {
        "AttentionBackward": (lambda: ours(q, k, v, o, do, lse, mask=MASK), False),
        "backward op": (lambda: ops.attention_backward(do, q, k, v, o, lse, None, None, None, None, text), False),
        "forward": (lambda: attention(*leaves, mask=MASK, layout="bhsd", bundle_dir=str(directory)), False),
        "step": (step, True),
    }


def time_per_call(call, calls: int, repeats: int) -> list[float]:
    """Seconds per call of each of `repeats` timings of `calls` calls."""
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        out.append((time.perf_counter() - started) / calls)
    return out


def python_calls(call, calls: int) -> dict:
    """cProfile's primitive calls per call: all of them (this file's loop left out), and the stand-ins'."""
    profiler = cProfile.Profile()
    profiler.runcall(_loop, call, calls)
    stats = pstats.Stats(profiler).stats    # (file, line, function) -> (primitive calls, calls, ...)
    by_file = {}
    for (filename, _, _), (primitive, *_) in stats.items():
        by_file[Path(filename).name] = by_file.get(Path(filename).name, 0) + primitive
    harness = by_file.get(Path(__file__).name, 0) + calls      # _loop, the lambdas, and the profiler's own call
    total = sum(primitive for primitive, *_ in stats.values()) - harness
    return {"calls": total / calls, "stand_in_calls": by_file.get(Path(cuda_stand_in.__file__).name, 0) / calls}


def _loop(call, calls: int) -> None:
    for _ in range(calls):
        call()


def run(directory: Path, calls: int, repeats: int) -> list[dict]:
    driver = cuda_stand_in.StandInDriver()
    rows = []
    with cuda_stand_in.torch_cuda_stand_ins(driver):
        for name, (call, all_cuda) in entry_points(directory).items():
            with cuda_stand_in.every_tensor_on_cuda() if all_cuda else contextlib.nullcontext():
                for _ in range(WARMUP_CALLS):
                    call()
                seconds = time_per_call(call, calls, repeats)
                rows.append({"entry": name, "us_per_call": statistics.median(seconds) * 1e6,
                             "us_per_call_min": min(seconds) * 1e6, **python_calls(call, calls)})
            print(f"{name}: {rows[-1]['us_per_call']:.1f} us/call (min {rows[-1]['us_per_call_min']:.1f}), "
                  f"{rows[-1]['calls']:.0f} Python calls/call ({rows[-1]['stand_in_calls']:.0f} in stand-ins)",
                  flush=True)
    return rows


def write_report(path: Path, rows: list[dict], meta: dict) -> None:
    lines = ["# Host path per call, here with stand-ins for the GPU (tools/bench_host_path.py)", "",
             f"`{meta['command']}` at commit {meta['commit']} on {meta['host']} (Python {meta['python']}, torch "
             f"{meta['torch']}): bf16 B{SHAPE[0]} H{SHAPE[1]} S{SHAPE[2]} D{SHAPE[3]}, causal top-left; us per "
             f"call the median of {meta['repeats']} timings of {meta['calls']} calls (min beside it); Python "
             "calls per call: cProfile's primitive calls, the stand-ins' own included and given beside.", "",
             "| entry point | us / call | min us / call | Python calls / call | of them in stand-ins |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['entry']} | {r['us_per_call']:.1f} | {r['us_per_call_min']:.1f} | {r['calls']:.0f} | "
                     f"{r['stand_in_calls']:.0f} |")
    write_report_files(path, lines, {"meta": meta, "rows": rows})


def _commit() -> str:
    import subprocess

    root = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True)
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory", type=Path, help="bundles: python tools/bench_torch_overhead.py build DIR")
    p.add_argument("--calls", type=int, default=2000, help="calls per timing (and per profile)")
    p.add_argument("--repeats", type=int, default=5, help="timings per entry point (the median is reported)")
    p.add_argument("--report", type=Path, help="also write this Markdown report (and its .json)")
    args = p.parse_args(argv)
    if args.calls < 1 or args.repeats < 1:
        p.error("--calls and --repeats: give at least 1")
    rows = run(args.directory, args.calls, args.repeats)
    if args.report:
        import torch

        command = "python tools/bench_host_path.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_report(args.report, rows, {"command": command, "commit": _commit(), "host": platform.node(),
                                         "python": platform.python_version(), "torch": torch.__version__,
                                         "calls": args.calls, "repeats": args.repeats})
    return 0


if __name__ == "__main__":
    sys.exit(main())
