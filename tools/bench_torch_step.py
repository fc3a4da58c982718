"""Host and wall time per training step of one attention call: fmha_mlir.torch.attention against SDPA's
flash and cuDNN backends, eager and under CUDA-graph replay.

    python tools/bench_torch_step.py build DIR                                            # here (MLIR)
    python tools/bench_torch_step.py run DIR --report reports/h200_torch_step.md    # the GPU

A step is what a training loop pays per attention call: the forward on q, k, v that require grad, then
torch.autograd.grad(out, (q, k, v), dO) (bf16); for the `qkv` shape the views are taken of the fused
projection inside the step and the gradient is the projection's, as in a model. For each shape the
contenders are measured in blocks of --steps steps, interleaved (the order rotated every round),
--rounds rounds; the figures are the median over rounds, with the min and max beside. Per block:

- host us: the CPU time to issue a step, timed while the GPU is kept busy by a sleep kernel queued
  first (long enough to outlast the issuing: `busy` says it did), so no step waits for the GPU;
- GPU us: CUDA events around the same steps, which run back to back behind the sleep;
- wall us: steps issued back to back from an idle GPU, one synchronisation at the end: what a loop
  that does nothing else sees (the larger of host and GPU time, in a steady state).

`graph`: the same step captured once in a torch.cuda.CUDAGraph (after a warm-up on a side stream) and
replayed on the same buffers: host and wall per replay. A contender whose capture fails is reported
with the error.
"""
from __future__ import annotations

import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench_timing import sleep_rate  # tools/ is on sys.path
from build_run import build_run_parser, write_report_files


@dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    seqlen: int
    dim: int
    mask: str        # 'none' or 'top_left' (SDPA's is_causal, Sq == Sk)
    layout: str      # the caller's storage: 'bhsd', 'bshd', or 'qkv': [B, H, S, D] views of one fused
                     # [B, S, 3, H, D] projection (what a GPT's attention gets; tools/train_gpt.py)

    @property
    def name(self) -> str:
        causal = " causal" if self.mask != "none" else ""
        return f"B{self.batch} H{self.heads} S{self.seqlen} D{self.dim}{causal} {self.layout}"

    def storage(self) -> tuple[int, ...]:
        b, h, s, d = self.batch, self.heads, self.seqlen, self.dim
        return (b, s, h, d) if self.layout == "bshd" else (b, h, s, d)

    @property
    def attention_layout(self) -> str:
        """The layout the attention call is given (a fused projection's views are [B, H, S, D])."""
        return "bhsd" if self.layout == "qkv" else self.layout


# The three shapes, and a layer of tools/train_gpt.py's GPT (width 512, S 1024, batch 16).
SHAPES = (Shape(1, 2, 128, 64, "none", "bhsd"), Shape(8, 16, 1024, 64, "top_left", "bhsd"),
          Shape(4, 16, 2048, 128, "top_left", "bhsd"), Shape(16, 8, 1024, 64, "top_left", "qkv"))
CONTENDERS = ("ours", "sdpa_flash", "sdpa_cudnn")
WARMUP_STEPS = 5
PROFILED_STEPS = 20   # per contender, with --profile


def build(directory: Path) -> None:
    import torch

    from fmha_mlir.torch import prebuild

    for shape in SHAPES:
        meta = torch.empty(shape.storage(), dtype=torch.bfloat16, device="meta")
        print("built", prebuild(directory, meta, meta, meta, arch="sm_90", mask=shape.mask,
                                layout=shape.attention_layout))


def step_of(torch, contender: str, shape: Shape, directory: Path, seed: int):
    """step(): one forward + backward of `contender` on its q, k, v, dO (the same values for every
    contender of a seed), returning the gradients (fresh tensors each time: torch.autograd.grad)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from fmha_mlir.torch import attention

    g = torch.Generator(device="cuda").manual_seed(seed)
    if shape.layout == "qkv":   # the views made in the step, the gradient taken of the projection: a model's
        b, h, s, d = shape.storage()
        fused = torch.randn((b, s, 3, h, d), generator=g, device="cuda", dtype=torch.bfloat16).requires_grad_()
        leaves = (fused,)

        def inputs():
            return [fused[:, :, i].transpose(1, 2) for i in range(3)]
    else:
        leaves = tuple(torch.randn(shape.storage(), generator=g, device="cuda", dtype=torch.bfloat16).requires_grad_()
                       for _ in range(3))

        def inputs():
            return leaves
    do = torch.randn(shape.storage(), generator=g, device="cuda", dtype=torch.bfloat16)
    to_bhsd = (lambda t: t.transpose(1, 2)) if shape.layout == "bshd" else (lambda t: t)
    causal = shape.mask != "none"

    def forward(q, k, v):
        if contender == "ours":
            return attention(q, k, v, mask=shape.mask, layout=shape.attention_layout, bundle_dir=str(directory))
        backend = SDPBackend.FLASH_ATTENTION if contender == "sdpa_flash" else SDPBackend.CUDNN_ATTENTION
        with sdpa_kernel([backend]):
            return to_bhsd(F.scaled_dot_product_attention(to_bhsd(q), to_bhsd(k), to_bhsd(v), is_causal=causal))

    def step():
        grads = torch.autograd.grad(forward(*inputs()), leaves, do)
        return grads[0].unbind(2) if shape.layout == "qkv" else grads

    return step


def captured(torch, step):
    """A replay() of `step` captured in a CUDA graph (warmed up on a side stream first, as torch asks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def measure(torch, call, steps: int, rate: float, host_guess: float) -> dict:
    """host, GPU and wall seconds per call of `call` (the module's docstring says how)."""
    torch.cuda.synchronize()
    torch.cuda._sleep(int((2 * host_guess * steps + 0.005) * rate))
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    started = time.perf_counter()
    for _ in range(steps):
        call()
    host = (time.perf_counter() - started) / steps
    busy = not torch.cuda.current_stream().query()   # the sleep (or our work) still ran: no step waited
    stop.record()
    stop.synchronize()
    gpu = start.elapsed_time(stop) / 1e3 / steps
    started = time.perf_counter()
    for _ in range(steps):
        call()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - started) / steps
    return {"host_s": host, "gpu_s": gpu, "wall_s": wall, "busy": busy}


def agreement(torch, ours, flash) -> dict:
    """max |ours - flash| / max |flash| per gradient (a sanity check, not the gate)."""
    return {name: float((a.float() - b.float()).abs().max() / b.float().abs().max())
            for name, a, b in zip(("dq", "dk", "dv"), ours(), flash())}


def run_shape(torch, shape: Shape, directory: Path, steps: int, rounds: int, rate: float, profiled: bool) -> dict:
    calls, errors = {}, {}
    for contender in CONTENDERS:
        try:
            step = step_of(torch, contender, shape, directory, seed=0)
            for _ in range(WARMUP_STEPS):
                step()
            calls[contender] = step
        except Exception as exc:   # a backend that cannot serve this shape is reported, not fatal
            errors[contender] = f"{type(exc).__name__}: {exc}"[:300]
    graphs = {}
    for contender, step in calls.items():
        try:
            graphs[contender] = captured(torch, step)
        except Exception as exc:
            errors[f"{contender} graph"] = f"{type(exc).__name__}: {exc}"[:300]
    row = {"shape": shape.name, "errors": errors, "eager": {c: [] for c in calls}, "graph": {c: [] for c in graphs}}
    if "ours" in calls and "sdpa_flash" in calls:
        row["agreement"] = agreement(torch, calls["ours"], calls["sdpa_flash"])
    guess = 0.002
    for r in range(rounds):
        for kind, table in (("eager", calls), ("graph", graphs)):
            order = list(table)[r % max(len(table), 1):] + list(table)[:r % max(len(table), 1)]
            for contender in order:
                row[kind][contender].append(measure(torch, table[contender], steps, rate, guess))
    for kind in ("eager", "graph"):
        row[kind] = {c: summary(blocks) for c, blocks in row[kind].items()}
    row["profile"] = profile_table(torch, row, calls, PROFILED_STEPS) if profiled else None
    return row


def profile_table(torch, row: dict, calls: dict, steps: int) -> str:
    """torch.profiler's table (CPU side) of `steps` eager steps of ours and of SDPA flash: the host time
    of each autograd node, op and driver call, by inclusive time (our Python shows as the self time of
    the _Attention and _AttentionBackward nodes)."""
    from torch.profiler import ProfilerActivity, profile

    parts = []
    for contender in ("ours", "sdpa_flash"):
        if contender not in calls:
            continue
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as profiler:
            for _ in range(steps):
                calls[contender]()
        torch.cuda.synchronize()
        table = profiler.key_averages().table(sort_by="cpu_time_total", row_limit=40, max_name_column_width=90)
        parts.append(f"## {row['shape']}: {contender}, {steps} steps\n\n{table}")
    return "\n\n".join(parts)


def summary(blocks: list[dict]) -> dict:
    out = {"busy": all(b["busy"] for b in blocks), "rounds": len(blocks)}
    for key in ("host_s", "gpu_s", "wall_s"):
        values = [b[key] for b in blocks]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def run(directory: Path, report: Path, steps: int, rounds: int, only: list[str] | None, profiled: bool) -> int:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("error: run needs a CUDA GPU (torch.cuda.is_available() is False): run it on the GPU machine")
    rate, rows, started = sleep_rate(torch), [], time.perf_counter()
    for shape in SHAPES:
        if only and shape.name not in only:
            continue
        rows.append(run_shape(torch, shape, directory, steps, rounds, rate, profiled))
        print(_line(rows[-1]), f"({time.perf_counter() - started:.0f} s)", flush=True)
    write_report(report, rows, {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                "host": platform.node(), "python": platform.python_version(), "steps": steps,
                                "rounds": rounds, "directory": str(directory), "argv": sys.argv[1:],
                                "seconds": time.perf_counter() - started})
    return 0


def _us(x: dict) -> str:
    return f"{x['median'] * 1e6:.0f} ({x['min'] * 1e6:.0f}-{x['max'] * 1e6:.0f})"


def _line(row: dict) -> str:
    parts = [f"{c} host {s['host_s']['median'] * 1e6:.0f} wall {s['wall_s']['median'] * 1e6:.0f}"
             for c, s in row["eager"].items()]
    return f"{row['shape']}: " + "; ".join(parts)


def write_report(path: Path, rows: list[dict], meta: dict) -> None:
    lines = [f"# Training step of one attention call: ours against SDPA ({meta['device']})", "",
             f"torch {meta['torch']}, Python {meta['python']}, bf16; {meta['rounds']} interleaved rounds of "
             f"{meta['steps']} steps per contender, {meta['seconds']:.0f} s. Commands: `python "
             f"tools/bench_torch_step.py build {meta['directory']}` (where MLIR is), then `python "
             f"tools/bench_torch_step.py {' '.join(meta['argv'])}` (the GPU).", "",
             "A step: forward, then torch.autograd.grad(out, (q, k, v), dO). us per step: median over rounds "
             "(min-max). host: CPU time to issue a step while the GPU is busy (busy = the GPU never ran "
             "dry while timing); GPU: the steps back to back behind a sleep kernel; wall: steps issued from "
             "an idle GPU, one synchronisation at the end. graph: the step captured once in a CUDA graph "
             "and replayed. ours / flash: the medians' ratio.", ""]
    for kind in ("eager", "graph"):
        lines += [f"## {kind}", "", "| shape | contender | host us | GPU us | wall us | busy | host / flash | "
                  "wall / flash |", "| --- " * 8 + "|"]
        for row in rows:
            flash = row[kind].get("sdpa_flash")
            for contender, s in row[kind].items():
                ratio = (lambda key: f"{s[key]['median'] / flash[key]['median']:.2f}") if flash else (lambda key: "")
                lines.append(f"| {row['shape']} | {contender} | {_us(s['host_s'])} | {_us(s['gpu_s'])} | "
                             f"{_us(s['wall_s'])} | {'yes' if s['busy'] else 'no'} | {ratio('host_s')} | "
                             f"{ratio('wall_s')} |")
        lines.append("")
    lines += ["## agreement and errors", ""]
    for row in rows:
        agree = " / ".join(f"{row.get('agreement', {}).get(g, float('nan')):.1e}" for g in ("dq", "dk", "dv"))
        lines.append(f"- {row['shape']}: dQ / dK / dV max |ours - flash| / max |flash| {agree}"
                     + "".join(f"; {name}: {error}" for name, error in row["errors"].items()))
    profiles = [row.pop("profile", None) for row in rows]
    write_report_files(path, lines, {"meta": meta, "rows": rows})
    if any(profiles):
        path.with_name(path.stem + "_profile.txt").write_text("\n\n".join(p for p in profiles if p) + "\n")


def main(argv=None) -> int:
    p = build_run_parser(__doc__, "reports/h200_torch_step.md")
    p.add_argument("--steps", type=int, default=40, help="steps per timed block")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per shape")
    p.add_argument("--shape", action="append", help="run only this shape (its name as printed; repeatable)")
    p.add_argument("--profile", action="store_true", help=f"also write torch.profiler's table of {PROFILED_STEPS} "
                   "eager steps of ours and of flash per shape (REPORT's name + _profile.txt)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        p.error("--steps and --rounds: give at least 1")
    if args.action == "build":
        build(args.directory)
        return 0
    return run(args.directory, args.report, args.steps, args.rounds, args.shape, args.profile)


if __name__ == "__main__":
    sys.exit(main())
