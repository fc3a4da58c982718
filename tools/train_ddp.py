"""Data-parallel (DDP or FSDP2) training of tools/train_gpt.py's GPT over the processes torchrun starts,
with our attention backward or SDPA's: one process per GPU (NCCL), or CPU processes (gloo) for a smoke run.

    python tools/train_gpt.py build DIR                                        # here (MLIR): the bundles
    torchrun --standalone --nproc-per-node 2 tools/train_ddp.py --attention fmha --bundle-dir DIR --json FILE
    torchrun --standalone --nproc-per-node 2 tools/train_ddp.py --device cpu --layers 1 --width 64 --heads 2 \\
        --seq 32 --batch 2 --steps 2                                            # a smoke run (gloo)

Every rank starts from the seed's weights and trains on its --batch rows of each step's world x batch
sequences (train_gpt.DataShard): a run over N ranks sees the data a one-process run of N x --batch
sees, and its averaged gradients are that run's; --wrap ddp (DistributedDataParallel) or fsdp2
(fully_shard: weights, gradients and optimizer state sharded). Rank 0 prints the run and writes its record
(train_gpt's, with world_size; the loss is rank 0's rows', the gradient norms the averaged gradients').
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from train_gpt import WRAPS, DataShard, add_config_arguments, configs, train, write_record

# What torchrun tells each process (its contract: environment variables).
TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--attention", choices=("sdpa", "sdpa_default", "fmha"), default="sdpa")
    p.add_argument("--wrap", choices=WRAPS, default="ddp", help="how the model is made data-parallel")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="where rank 0 writes the run's record (default: not written)")
    add_config_arguments(p)
    args = p.parse_args(argv)
    if not all(name in os.environ for name in TORCHRUN):
        p.error("run under torchrun (it sets RANK, WORLD_SIZE, LOCAL_RANK): torchrun --nproc-per-node N "
                "tools/train_ddp.py ...")
    rank, world, local = (int(os.environ[name]) for name in TORCHRUN)
    m, t = configs(p, args, args.attention, args.seed)
    if t.device == "cuda":   # one GPU per process: its own, for the model, the op and NCCL
        torch.cuda.set_device(local)
        t = dataclasses.replace(t, device=f"cuda:{local}")
    dist.init_process_group("nccl" if t.device.startswith("cuda") else "gloo")
    try:
        record = train(m, t, shard=DataShard(rank, world, args.wrap))
    finally:
        dist.destroy_process_group()
    if rank == 0:
        write_record(record, f"seed {args.seed}, {world} ranks ({args.wrap})", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
