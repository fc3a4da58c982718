"""A small GPT trained with torch SDPA's attention backward or ours: the proof that training with ours matches.

    python tools/train_gpt.py build DIR                                   # here (MLIR): the sm_90 bundles
    python tools/train_gpt.py run --attention fmha --bundle-dir DIR --seed 0 --json FILE    # on the GPU
    python tools/train_gpt.py run --layers 1 --width 64 --seq 64 --steps 3 --device cpu      # a smoke run

Pre-LN GPT with learned positions, causal attention, AdamW, bf16 autocast, trained on gpt_corpus's
synthetic sequences. Every attention runs torch's flash forward; the backwards differ:
`--attention sdpa` is torch's flash backward, `fmha` is ours (fmha_mlir.torch.attention) and `reference`
is the exact one: autograd through the float32 math forward (fmha_mlir.torch.forwards.math_forward),
rounded once to bf16 (slow: a yardstick, not a candidate). The same seed gives the same initial weights
and the same data order. Logged per step: loss, global grad norm (before clipping), and the grad norms
of each layer's attention projections (qkv, out); steps/s after the first --timing-warmup steps.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from build_run import build_bf16_bundles  # run as a script: tools/ is on sys.path
from gpt_corpus import CorpusConfig, make_sequences
from train_compare import ATTENTION_OF

# Every attention a run may use, by what its record calls it: the compared backwards, and SDPA's default
# backend, which tools/train_speed.py times against ours (its forward is not flash's).
LABELS = {**ATTENTION_OF, "sdpa_default": "torch SDPA, its default backend (forward and backward)"}

MASK = "top_left"   # causal, query i sees keys 0..i (Sq == Sk)


@dataclass(frozen=True)
class ModelConfig:
    layers: int = 6
    width: int = 512
    heads: int = 8
    seq: int = 1024
    vocab: int = 256

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def problem(self) -> str | None:
        """Why this model cannot be built, with the fix (None: it can)."""
        if self.heads < 1 or self.width % self.heads:
            return f"--width {self.width} is not a multiple of --heads {self.heads}: give a width heads x head_dim"
        return None

    def trainee(self, t: "TrainConfig") -> "Trainee":
        return gpt_trainee(self, t)


@dataclass(frozen=True)
class DataShard:
    """One process's part of a data-parallel run (tools/train_ddp.py): rank `rank` of `world` trains on
    its TrainConfig.batch rows of each step's world x batch sequences, its model wrapped by `wrap` when
    world > 1 (the default: the whole run in one process): 'ddp' (DistributedDataParallel: every rank
    holds the weights, the gradients are all-reduced) or 'fsdp2' (fully_shard per block and the model:
    weights, gradients and optimizer state sharded)."""

    rank: int = 0
    world: int = 1
    wrap: str = "ddp"


WRAPS = ("ddp", "fsdp2")


def data_parallel(model: nn.Module, shard: DataShard, device: torch.device) -> nn.Module:
    """What a step calls: the model itself in one process, else wrapped as shard.wrap says (fsdp2 wraps
    it in place)."""
    if shard.world == 1:
        return model
    if shard.wrap == "ddp":
        return torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    return fully_shard(model)


def _replicated(norm: torch.Tensor) -> torch.Tensor:
    """A gradient norm as a plain tensor (under fsdp2 it is a replicated DTensor)."""
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


@dataclass(frozen=True)
class TrainConfig:
    attention: str = "sdpa"
    seed: int = 0
    steps: int = 300
    batch: int = 16
    lr: float = 1e-3
    lr_warmup: int = 20          # linear warm-up, then cosine decay to lr / 10
    timing_warmup: int = 10      # steps left out of steps/s (allocator, kernel and module loading)
    device: str = "cuda"
    bundle_dir: str | None = None


class Block(nn.Module):
    def __init__(self, m: ModelConfig):
        super().__init__()
        self.heads = m.heads
        self.ln1, self.ln2 = nn.LayerNorm(m.width), nn.LayerNorm(m.width)
        self.qkv, self.out = nn.Linear(m.width, 3 * m.width), nn.Linear(m.width, m.width)
        self.mlp = nn.Sequential(nn.Linear(m.width, 4 * m.width), nn.GELU(), nn.Linear(4 * m.width, m.width))

    def forward(self, x, attend):
        b, s, w = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, w // self.heads)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))    # [B, H, S, D] views: no copies
        x = x + self.out(attend(q, k, v).transpose(1, 2).reshape(b, s, w))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, m: ModelConfig):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(m.vocab, m.width), nn.Embedding(m.seq, m.width)
        self.blocks = nn.ModuleList(Block(m) for _ in range(m.layers))
        self.ln_f, self.head = nn.LayerNorm(m.width), nn.Linear(m.width, m.vocab, bias=False)
        for module in self.modules():   # GPT-2's initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens, attend):
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x, attend)
        return self.head(self.ln_f(x))


def sdpa_attention(q, k, v):
    # Flash, as the fmha op's forward: the two runs then differ only in the backward.
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_default_attention(q, k, v):
    # SDPA as a model calls it: its default backend choice (cuDNN's on an H200), forward and backward.
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def fmha_attention(bundle_dir: str | None):
    """Our backward behind torch's flash forward."""
    from fmha_mlir.torch import attention

    def attend(q, k, v):
        return attention(q, k, v, mask=MASK, layout="bhsd", bundle_dir=bundle_dir)
    return attend


def reference_attention():
    """torch's flash forward (as in the other runs) with the exact backward: autograd through the f32 math
    forward recomputed from the saved q, k, v, its gradients rounded once to the inputs' dtype. It rounds
    nothing on the way that a bf16 backward rounds (P, dS), so it is the yardstick of the step-0
    gradients and one of the correct backwards whose training curves measure the noise."""
    from fmha_mlir.torch.call import checked_call
    from fmha_mlir.torch.forwards import math_forward, run_forward
    from fmha_mlir.spec import Mask
    from fmha_mlir.torch.options import AttentionOptions

    text = AttentionOptions(mask=Mask.parse(MASK)).text()

    class ReferenceBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            call = checked_call(text, q, k, v, None, None)
            ctx.case = call.case
            ctx.save_for_backward(q, k, v)
            return run_forward(call.forward, q, k, v, None, None, call.case)[0]

        @staticmethod
        def backward(ctx, grad_out):
            saved = ctx.saved_tensors
            inputs = [x.detach().float().requires_grad_() for x in saved]
            with torch.enable_grad(), torch.autocast(grad_out.device.type, enabled=False):
                out = math_forward(*inputs, None, None, ctx.case)[0]
                grads = torch.autograd.grad(out, inputs, grad_out.float())
            return tuple(g.to(x.dtype) for g, x in zip(grads, saved))

    return ReferenceBackward.apply


def attention_of(t: "TrainConfig") -> Callable:
    """The attention callable of t.attention (a key of LABELS)."""
    makers = {"sdpa": lambda: sdpa_attention, "sdpa_default": lambda: sdpa_default_attention,
              "fmha": lambda: fmha_attention(t.bundle_dir),
              "reference": reference_attention}
    return makers[t.attention]()


@dataclass(frozen=True)
class Trainee:
    """What train() trains: a model (initialised from the CPU generator when made), its call, and the
    gradients the runs are compared on."""
    model: nn.Module
    label: str                                  # the attention, as the record names it
    # (module, tokens, keep) -> logits: module is the model or its data-parallel wrapper; keep: a step-0 call
    logits: Callable[[nn.Module, torch.Tensor, bool], torch.Tensor]
    gradient_groups: Callable[[], dict[str, list[torch.Tensor]]]   # after a keep call's backward
    # per layer: its attention's (in projection, out projection) params, asked for once the model is wrapped
    # (fsdp2 replaces its parameters)
    projections: Callable[[], list[tuple[list, list]]]


def gpt_trainee(m: ModelConfig, t: "TrainConfig") -> Trainee:
    attend = attention_of(t)
    model = GPT(m)
    retained = RetainedInputs(attend)

    def logits(module, tokens, keep):
        return module(tokens, retained if keep else attend)

    return Trainee(model, LABELS[t.attention], logits, lambda: gradient_groups(model, retained.inputs),
                   lambda: [(list(block.qkv.parameters()), list(block.out.parameters())) for block in model.blocks])


def gradient_groups(model: "GPT", attention_inputs: list) -> dict[str, list[torch.Tensor]]:
    """The gradients the runs are compared on, by name: what each layer's attention backward returns
    (dq{i}, dk{i}, dv{i}: its own output, on the model's real activations), each layer's attention
    projections (qkv{i}, out{i}: weight and bias) and the whole model (global). attention_inputs: each
    layer's (q, k, v), their grads retained (RetainedInputs)."""
    groups = {"global": [p.grad for p in model.parameters()]}
    for i, (block, inputs) in enumerate(zip(model.blocks, attention_inputs)):
        groups.update({f"{name}{i}": [x.grad] for name, x in zip(("dq", "dk", "dv"), inputs)})
        groups.update({f"{kind}{i}": [p.grad for p in getattr(block, kind).parameters()] for kind in ("qkv", "out")})
    return groups


class RetainedInputs:
    """An attention callable that keeps each call's q, k, v with their grads retained (for one step's
    gradient_groups; the model's arithmetic is unchanged)."""

    def __init__(self, attend: Callable):
        self.attend, self.inputs = attend, []

    def __call__(self, q, k, v):
        for x in (q, k, v):
            x.retain_grad()
        self.inputs.append((q, k, v))
        return self.attend(q, k, v)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def learning_rate(t: TrainConfig, step: int) -> float:
    if step < t.lr_warmup:
        return t.lr * (step + 1) / t.lr_warmup
    progress = (step - t.lr_warmup) / max(1, t.steps - t.lr_warmup)
    return t.lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * progress)))


PROFILED_STEPS = 5


def write_profile(profiler, path: Path) -> None:
    """torch.profiler's tables of the profiled steps: where the host time and the GPU time go."""
    averages = profiler.key_averages()
    path.write_text("\n\n".join(averages.table(sort_by=key, row_limit=30)
                                 for key in ("self_cpu_time_total", "self_cuda_time_total")) + "\n")


def train(m, t: TrainConfig, profile: Path | None = None,
          on_step0: Callable[[dict[str, list[torch.Tensor]]], None] | None = None,
          shard: DataShard = DataShard()) -> dict:
    """Train m (a model config with a trainee(t) method: ModelConfig, train_hf's) and return the run's
    record (the per-step logs, steps/s and what ran). With `profile`,
    steps timing_warmup .. + PROFILED_STEPS run under torch.profiler (its tables go there; the run's
    steps/s then include the profiler's own cost). `on_step0` gets step 0's gradient_groups before
    clipping (the same weights and batch in every run of a seed: only the attention backward differs).
    shard: this process's part of a data-parallel run (its process group initialised); the loss logged
    is its own rows', the gradient norms the averaged gradients'."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler_of

    profiler = None
    device = torch.device(t.device)
    sequences = t.steps * t.batch * shard.world
    data = torch.from_numpy(make_sequences(CorpusConfig(vocab=m.vocab), sequences, m.seq + 1)).to(device)
    order = torch.from_numpy(np.random.default_rng(t.seed).permutation(sequences)).to(device)
    torch.manual_seed(t.seed)
    trainee = m.trainee(t)
    model = trainee.model.to(device)   # initialised on the CPU generator: the same weights on any device
    stepper = data_parallel(model, shard, device)
    projections = trainee.projections()
    optimizer = torch.optim.AdamW(model.parameters(), lr=t.lr, betas=(0.9, 0.95), weight_decay=0.1)
    logs = []    # per step, on the device: no synchronisation inside the loop
    for step in range(t.steps):
        if step == t.timing_warmup:
            synchronize(device)
            started = time.perf_counter()
            if profile is not None:
                profiler = profiler_of(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
                profiler.__enter__()
        if profiler is not None and step == t.timing_warmup + PROFILED_STEPS:
            profiler.__exit__(None, None, None)
            write_profile(profiler, profile)
            profiler = None
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(t, step)
        first = (step * shard.world + shard.rank) * t.batch
        batch = data[order[first:first + t.batch]]
        keep = step == 0 and on_step0 is not None
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = trainee.logits(stepper, batch[:, :-1], keep)
        loss = F.cross_entropy(logits.float().reshape(-1, m.vocab), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if keep:
            on_step0(trainee.gradient_groups())
        projection_norms = [_replicated(torch.nn.utils.get_total_norm([p.grad for p in params]))
                            for layer in projections for params in layer]
        total = _replicated(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        optimizer.step()
        logs.append(torch.stack([loss.detach(), total, *projection_norms]))
    synchronize(device)
    timed = max(0, t.steps - t.timing_warmup)
    seconds = time.perf_counter() - started if timed > 0 else float("nan")
    logs = torch.stack(logs).float().cpu().numpy()
    return {"model": dataclasses.asdict(m), "train": dataclasses.asdict(t), "attention": trainee.label,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "loss": logs[:, 0].tolist(), "grad_norm": logs[:, 1].tolist(),
            "qkv_grad_norm": logs[:, 2::2].tolist(), "out_grad_norm": logs[:, 3::2].tolist(),
            "timed_steps": timed, "steps_per_s": timed / seconds if timed > 0 else None, "world_size": shard.world,
            "data_parallel": shard.wrap if shard.world > 1 else None,
            "profiled": profile is not None}


def add_config_arguments(p: argparse.ArgumentParser, model=ModelConfig()) -> None:
    """--FIELD options of the model config's fields (defaulting to `model`'s) and TrainConfig's."""
    for config in (model, TrainConfig(attention="", seed=0)):
        for f in dataclasses.fields(config):
            if f.name in ("attention", "seed", "bundle_dir", "family"):
                continue
            p.add_argument("--" + f.name.replace("_", "-"), type=type(getattr(config, f.name)),
                           default=getattr(config, f.name))
    p.add_argument("--bundle-dir", help="prebuilt bundles (the build subcommand) for --attention fmha")


def configs(p: argparse.ArgumentParser, args, attention: str, seed: int, model=ModelConfig()) -> tuple:
    """The options as configs (the model's of `model`'s kind), refused (with the fix) where they cannot train."""
    m = dataclasses.replace(model, **{f.name: getattr(args, f.name) for f in dataclasses.fields(model)
                                      if f.name != "family"})
    t = TrainConfig(attention, seed, args.steps, args.batch, args.lr, args.lr_warmup, args.timing_warmup,
                    args.device, args.bundle_dir)
    if m.problem():
        p.error(m.problem())
    if min(m.layers, m.seq, m.vocab, t.steps, t.batch) < 1 or m.vocab < 8 or m.seq < 8:
        p.error("--layers, --steps and --batch must be at least 1, --seq and --vocab at least 8")
    if t.device == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA device here: run on the GPU machine, or pass --device cpu")
    return m, t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    build = sub.add_parser("build", help="compile the sm_90 bundles --attention fmha needs (needs MLIR)")
    build.add_argument("directory", type=Path)
    for name in ("heads", "width", "seq"):
        build.add_argument("--" + name, type=int, default=getattr(ModelConfig(), name))
    run = sub.add_parser("run", help="train once and write the run's JSON")
    run.add_argument("--attention", choices=tuple(LABELS), default="sdpa")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--json", type=Path, help="where the run's record goes (default: not written)")
    run.add_argument("--profile", type=Path, help=f"write torch.profiler's tables of {PROFILED_STEPS} steps after "
                                                  "--timing-warmup to this file (slows those steps)")
    add_config_arguments(run)
    args = p.parse_args(argv)
    if args.action == "build":
        m = ModelConfig(width=args.width, heads=args.heads, seq=args.seq)
        for path in build_bf16_bundles(args.directory, [(1, m.heads, m.seq, m.head_dim)], MASK):
            print(f"built {path}")
        return 0
    record = train(*configs(run, args, args.attention, args.seed), profile=args.profile)
    write_record(record, f"seed {args.seed}", args.json)
    return 0


def write_record(record: dict, what: str, path: Path | None) -> None:
    """Print a run's one-line summary (`what`: its seed and setup) and write its record to `path`."""
    print(f"{record['attention']}, {what}: loss {record['loss'][0]:.3f} -> {record['loss'][-1]:.3f}, "
          f"{record['steps_per_s'] or float('nan'):.2f} steps/s")
    if path:
        path.write_text(json.dumps(record) + "\n")


if __name__ == "__main__":
    sys.exit(main())
