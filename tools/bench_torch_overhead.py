"""Host overhead per attention-backward call from torch: torch's flash backward op against ours.

    python tools/bench_torch_overhead.py build DIR                                  # here (MLIR)
    python tools/bench_torch_overhead.py run DIR --report reports/bench_torch_overhead.md   # the GPU

For each shape (bf16, causal): (a) torch.ops.aten._scaled_dot_product_flash_attention_backward called
directly, (b) AttentionBackward(executor="cuda", bundle_dir=DIR)(q, k, v, o, do, lse, mask="top_left") on
torch CUDA tensors, both from the same flash forward. Host time: wall time of --calls calls with one
synchronisation at the end (host-bound: the GPU work of the small shape is a few microseconds). GPU time:
CUDA events around the same calls queued behind a sleep kernel, so that the kernels run back to back; a
call that synchronises cannot queue behind the sleep, and its GPU time then includes host gaps (flagged).
"""
from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

from bench_timing import sleep_rate  # tools/ is on sys.path
from build_run import build_bf16_bundles, build_run_parser, write_report_files

SHAPES = ((1, 2, 128, 64), (16, 8, 1024, 64))   # (B, H, S, D): the small shape, and train_gpt.py's attention
MASK = "top_left"
WARMUP_CALLS = 20


def backward_calls(torch, ours, shape, seed: int):
    """(torch's flash backward, ours) as calls on the same inputs: random q, k, v, dO and the flash
    forward's O and log-sum-exp."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(shape, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out, lse, cum_q, cum_k, max_q, max_k, philox_seed, philox_offset, _ = \
        torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)   # its rng state: seed, offset
    our_lse = lse[..., :shape[2]].contiguous()

    def torch_backward():
        return torch.ops.aten._scaled_dot_product_flash_attention_backward(
            do, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, 0.0, True, philox_seed, philox_offset)

    def our_backward():
        return ours(q, k, v, out, do, our_lse, mask=MASK)
    return torch_backward, our_backward


def measure(torch, call, calls: int, cycles_per_second: float) -> dict:
    """Host and GPU seconds per call of `call` (see the module's docstring)."""
    for _ in range(WARMUP_CALLS):
        call()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    host = (time.perf_counter() - started) / calls

    sleep_seconds = 2 * host * calls + 0.01
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(sleep_seconds * cycles_per_second))
    start.record()
    started = time.perf_counter()
    for _ in range(calls):
        call()
    queued = time.perf_counter() - started
    stop.record()
    stop.synchronize()
    return {"host_s": host, "gpu_s": start.elapsed_time(stop) / 1e3 / calls, "back_to_back": queued < sleep_seconds}


def profile(torch, our_backward, calls: int, path: Path) -> None:
    """Where our host time goes: cProfile's top functions, by cumulative and by own time."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(lambda: [our_backward() for _ in range(calls)])
    torch.cuda.synchronize()
    text = io.StringIO()
    for order in ("cumulative", "tottime"):
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(30)
    path.write_text(text.getvalue())


def run(directory: Path, report: Path, calls: int, profile_path: Path | None = None) -> int:
    import torch

    from fmha_mlir.api import AttentionBackward

    if not torch.cuda.is_available():
        raise SystemExit("error: run needs a CUDA GPU (torch.cuda.is_available() is False): run it on the GPU machine")
    ours = AttentionBackward(executor="cuda", bundle_dir=str(directory))
    rate, rows = sleep_rate(torch), []
    for n, shape in enumerate(SHAPES):
        torch_backward, our_backward = backward_calls(torch, ours, shape, seed=n)
        agreement = {name: float((a.float() - b.float()).abs().max() / b.float().abs().max())
                     for name, a, b in zip(("dq", "dk", "dv"), our_backward(), torch_backward())}
        if profile_path is not None and n == 0:
            profile(torch, our_backward, calls, profile_path)
        rows.append({"shape": list(shape), "torch": measure(torch, torch_backward, calls, rate),
                     "ours": measure(torch, our_backward, calls, rate), "max_rel_diff": agreement})
        print(f"B{shape[0]} H{shape[1]} S{shape[2]} D{shape[3]}: host {rows[-1]['torch']['host_s'] * 1e6:.1f} us "
              f"(torch) vs {rows[-1]['ours']['host_s'] * 1e6:.1f} us (ours)", flush=True)
    write_report(report, rows, {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                "calls": calls, "host": platform.node(), "directory": str(directory)})
    return 0


def write_report(path: Path, rows: list[dict], meta: dict) -> None:
    us = lambda seconds: f"{seconds * 1e6:.1f}"  # noqa: E731
    lines = [f"# Host overhead per backward call from torch ({meta['device']})", "",
             f"torch {meta['torch']}, bf16, causal (top-left), {meta['calls']} calls per figure after "
             f"{WARMUP_CALLS} warm-up calls. Commands: `python tools/bench_torch_overhead.py build "
             f"{meta['directory']}` (here), then `python tools/bench_torch_overhead.py run {meta['directory']} "
             f"--calls {meta['calls']} --report {path}` (the GPU).", "",
             "Host: wall time of all calls with one synchronisation at the end, per call. GPU: CUDA events around "
             "the calls queued behind a sleep kernel, per call; where a call could not be queued behind it (it "
             "synchronises) the GPU time includes host gaps (`no`). Agreement: max |ours - torch| / max |torch| "
             "per gradient (a sanity check; the gate's checks are the GPU matrix's).", "",
             "| B H S D | torch host us | ours host us | ours / torch | torch GPU us | ours GPU us | "
             "GPU back to back (torch, ours) | dQ / dK / dV agreement |", "| --- " * 8 + "|"]
    for r in rows:
        t, o = r["torch"], r["ours"]
        agree = " / ".join(f"{r['max_rel_diff'][g]:.1e}" for g in ("dq", "dk", "dv"))
        lines.append(f"| {' '.join(map(str, r['shape']))} | {us(t['host_s'])} | {us(o['host_s'])} | "
                     f"{o['host_s'] / t['host_s']:.2f} | {us(t['gpu_s'])} | {us(o['gpu_s'])} | "
                     f"{'yes' if t['back_to_back'] else 'no'}, {'yes' if o['back_to_back'] else 'no'} | {agree} |")
    write_report_files(path, lines, {"meta": meta, "rows": rows})


def main(argv=None) -> int:
    p = build_run_parser(__doc__, "reports/bench_torch_overhead.md")
    p.add_argument("--calls", type=int, default=200, help="calls per timed figure")
    p.add_argument("--profile", type=Path, help="run: also write cProfile's top functions of --calls calls of "
                                                "ours on the small shape to this file")
    args = p.parse_args(argv)
    if args.calls < 1:
        p.error(f"--calls {args.calls}: give at least 1")
    if args.action == "build":
        for path in build_bf16_bundles(args.directory, SHAPES, MASK):
            print(f"built {path}")
        return 0
    return run(args.directory, args.report, args.calls, args.profile)


if __name__ == "__main__":
    sys.exit(main())
