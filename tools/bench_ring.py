"""Ring attention's step time and scaling over the processes torchrun starts: ring_attention on each
rank's zigzag part of one sequence, against attention() on the whole sequence on one device.

    python tools/bench_ring.py build DIR --heads 16 --dim 128                 # here (MLIR): the bundles
    torchrun --standalone --nproc-per-node N tools/bench_ring.py run --bundle-dir DIR --seqlen 65536 \\
        --heads 16 --dim 128 --json FILE                                       # the GPUs (NCCL)
    torchrun --standalone --nproc-per-node 2 tools/bench_ring.py run --device cpu --seqlen 16 --heads 2 \\
        --dim 32 --steps 1 --warmup 0                                          # a smoke run (gloo)

A step is one forward and backward (bf16; q, k, v require grad, dO given) of [1, H, S, D] attention:
ring_attention over all ranks, each on its S / N rows, or attention() on all S rows on rank 0 alone
(the one-device step the ring splits; --no-single leaves it out, e.g. when it does not fit). Every
step starts after a synchronisation and a barrier; a ring step takes as long as its slowest rank.
Figures: the median over --steps after --warmup, min and max beside; speedup = single / ring,
efficiency = speedup / N.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from fmha_mlir.torch import attention, prebuild, ring_attention, zigzag_shard

# What torchrun tells each process (its contract: environment variables).
TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
# The block masks a ring asks for: its full blocks, and under causal its own diagonal block (and the
# single call's mask, top_left, is the same spec).
BLOCK_MASKS = ("none", "top_left")


def build(directory: Path, heads: int, heads_kv: int, dim: int, arch: str) -> list[Path]:
    """The bf16 bundles every block of a ring (and the single call) loads: the spec has no sequence length."""
    q = torch.empty(1, heads, 64, dim, dtype=torch.bfloat16, device="meta")
    kv = torch.empty(1, heads_kv, 64, dim, dtype=torch.bfloat16, device="meta")
    return [prebuild(directory, q, kv, kv, arch=arch, mask=mask) for mask in BLOCK_MASKS]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_seconds(step, steps: int, warmup: int, device: torch.device, together: bool) -> list[float]:
    """Wall seconds of each timed step (after `warmup` untimed ones); together: every rank runs it,
    each step starts at a barrier and takes its slowest rank's time."""
    seconds = []
    for i in range(warmup + steps):
        _synchronize(device)
        if together:
            dist.barrier()
        started = time.perf_counter()
        step()
        _synchronize(device)
        if i >= warmup:
            seconds.append(time.perf_counter() - started)
    if together:
        slowest = torch.tensor(seconds, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        seconds = slowest.cpu().tolist()
    return seconds


def _figures(seconds: list[float]) -> dict:
    return {"median_ms": 1e3 * statistics.median(seconds), "min_ms": 1e3 * min(seconds), "max_ms": 1e3 * max(seconds)}


def run(args, rank: int, world: int, device: torch.device) -> dict:
    """This rank's part of the benchmark; the record (rank 0's is complete)."""
    g = torch.Generator().manual_seed(0)
    full = [torch.randn(1, h, args.seqlen, args.dim, generator=g).to(device, torch.bfloat16)
            for h in (args.heads, args.heads_kv, args.heads_kv, args.heads)]   # q, k, v, dO
    options = dict(mask=args.mask, bundle_dir=None if args.bundle_dir is None else str(args.bundle_dir))
    mine = [zigzag_shard(x, rank, world) for x in full]
    q, k, v = (x.requires_grad_() for x in mine[:3])

    def ring_step():
        torch.autograd.grad(ring_attention(q, k, v, **options), (q, k, v), mine[3])

    record = {"world_size": world, "seqlen": args.seqlen, "heads": args.heads, "heads_kv": args.heads_kv,
              "dim": args.dim, "mask": args.mask, "dtype": "bf16", "torch": torch.__version__,
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
              "ring": _figures(step_seconds(ring_step, args.steps, args.warmup, device, together=True))}
    if not args.no_single:
        if rank == 0:
            qf, kf, vf = (x.requires_grad_() for x in full[:3])

            def single_step():
                torch.autograd.grad(attention(qf, kf, vf, **options), (qf, kf, vf), full[3])

            record["single"] = _figures(step_seconds(single_step, args.steps, args.warmup, device, together=False))
            speedup = record["single"]["median_ms"] / record["ring"]["median_ms"]
            record.update(speedup=speedup, efficiency=speedup / world)
        dist.barrier()
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build", help="compile the bf16 bundles of the ring's blocks (needs MLIR)")
    b.add_argument("directory", type=Path)
    b.add_argument("--arch", default="sm_90a", help="sm_90a for an H100 / H200 (its wgmma body), sm_90 otherwise")
    r = sub.add_parser("run", help="time the ring and the single call (under torchrun)")
    r.add_argument("--bundle-dir", type=Path, help="the build step's bundles (CUDA)")
    r.add_argument("--seqlen", type=int, default=32768, help="the whole sequence (a multiple of 2 x world size)")
    r.add_argument("--mask", choices=("none", "top_left"), default="top_left")
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    r.add_argument("--steps", type=int, default=10)
    r.add_argument("--warmup", type=int, default=3)
    r.add_argument("--no-single", action="store_true", help="leave out attention() on the whole sequence")
    r.add_argument("--json", type=Path, help="where rank 0 writes the record (default: not written)")
    for parser in (b, r):
        parser.add_argument("--heads", type=int, default=16)
        parser.add_argument("--heads-kv", type=int, help="key / value heads (GQA; default: --heads)")
        parser.add_argument("--dim", type=int, default=128)
    args = p.parse_args(argv)
    args.heads_kv = args.heads_kv or args.heads
    if args.action == "build":
        for path in build(args.directory, args.heads, args.heads_kv, args.dim, args.arch):
            print(f"built {path}")
        return 0
    if not all(name in os.environ for name in TORCHRUN):
        p.error("run under torchrun (it sets RANK, WORLD_SIZE, LOCAL_RANK): torchrun --nproc-per-node N "
                "tools/bench_ring.py run ...")
    rank, world, local = (int(os.environ[name]) for name in TORCHRUN)
    if args.seqlen % (2 * world) or min(args.steps, args.heads, args.heads_kv, args.dim) < 1:
        p.error(f"--seqlen must be a multiple of 2 x {world} ranks; --steps, --heads, --heads-kv, --dim positive")
    if args.device == "cuda":   # one GPU per process: its own, for the tensors, the op and NCCL
        torch.cuda.set_device(local)
    device = torch.device(f"cuda:{local}" if args.device == "cuda" else "cpu")
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    try:
        record = run(args, rank, world, device)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        ring = record["ring"]["median_ms"]
        single = f", one device {record['single']['median_ms']:.2f} ms: speedup {record['speedup']:.2f}, " \
                 f"efficiency {record['efficiency']:.2f}" if "single" in record else ""
        print(f"S {args.seqlen} H {args.heads}/{args.heads_kv} D {args.dim} {args.mask}, {world} ranks: "
              f"ring {ring:.2f} ms{single}")
        if args.json:
            args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
