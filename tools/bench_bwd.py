"""Time the attention backward on an NVIDIA GPU: our bodies against torch SDPA's flash and cuDNN backends
and compiled FlexAttention, in one process, on the same inputs, each timed the same way.

    python tools/bench_bwd.py build DIR [--sweep] [--ptxas PTXAS]   # where MLIR is: bundles, compile times, ptxas -v
    python tools/bench_bwd.py run DIR --report FILE                # on the GPU: numpy, cuda-bindings, torch

Rows (bf16, then f16): B4 H16 S2048 D64; B4 H16 S2048 D128 causal; B2 H16 S4096 D128; B2 H8 S2048 D256;
B1 H32 Hkv8 S8192 D128 causal (GQA); and d128 at long sequences, 16k tokens of 16 heads (B2 S8192, B1
S16384), with and without the causal mask, against cuDNN's published H200 figures.

Before a contender is timed on a row, its gradients of the first input set are judged by the gate
(fmha_mlir.tolerance, the lowp model with our bundle's numerics) against the float64 oracle on two cuts
of batch 0's first kv head group (tools/bench_gate.py: dQ of the last query rows, dK and dV of the first
keys); a failure of ours makes the run's status 1, a peer's is marked in the report.

Timing (tools/bench_timing.py): backward only, the GPU kept fed: each round queues a sleep, then many
calls between two CUDA events, issued while the GPU still sleeps (checked per round: `ahead`), so the
events hold GPU time only; the host time to issue a call is reported beside it. Three input sets are
rotated so that no call finds its inputs in L2. Ours is what the op runs on an H100 / H200 (sm_90a's
table; sm_90's mma.sync row is timed beside it), the whole launch plan (D = rowsum(dO * O), zero
fill, dq_dk_dv, converts) on buffers already on the device; a peer's call is torch.autograd.grad of its
forward's output (retain_graph: the forward is run once, outside the timing). TFLOP/s counts the
backward as 2.5 x the forward's 4 B Hq Sq Sk D, halved for causal masks.

--softcap C and --bias elementwise elementwise+dbias alibi alibi+dslopes add each row with that score feature (only
ours is timed: torch's fused backwards have none of them; the forward that makes O and the LSE is
torch's mem-efficient one, which takes an additive bias), for the feature's speed cost.

--deterministic adds each row in deterministic mode (ours only: its cost against the same row).

--grad-accum bf16 adds each bf16 row with dQ added by packed bf16 atomics (ours only: its gain against the
same row; the gate checks it under its own model, Numerics.dq_add_block).

--sweep also builds the candidate tiled configs of SWEEP for each row, so that one GPU run measures
them all; the table in fmha_mlir/bodies/mma_sync.py is chosen from that run (reports/bench_notes.md).
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from fmha_mlir.api import bundle_path, load_bundle
from fmha_mlir.torch_in_place import torch_device_array, torch_dtype_names
from fmha_mlir.bodies import BODIES, DQ_DONE, DQ_SEMAPHORES, TILED_TABLE, choose_config, dq_fragment_order, dq_in_turns
from fmha_mlir.bodies.wgmma import HOPPER_ARCH, WGMMA_TABLE
from fmha_mlir.kernel_config import TURN_ORDERS, WGMMA, KernelConfig, TiledConfig, WarpConfig
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import get_target
import bench_gate  # run as a script: tools/ is on sys.path
import bench_timing
from build_run import build_run_parser, write_report_files

ARCH = "sm_90"
# The counters a kernel waits on, zero-filled by the plan before it every call (steps_alone).
COUNTERS = (DQ_SEMAPHORES, DQ_DONE)


@dataclasses.dataclass(frozen=True)
class Row:
    batch: int
    heads_q: int
    heads_kv: int
    seqlen: int
    hdim: int
    causal: bool
    dtype: str
    softcap: float = 0.0   # > 0: the same shape with softcap (no peer has it: only ours is timed)
    bias: str = "none"     # elementwise ([1, H, S, S]) or alibi (standard slopes): ours only
    dbias: bool = False    # with an elementwise bias: also dbias; with ALiBi: d(slopes) of a slopes tensor
    deterministic: bool = False   # dQ in a fixed order (turns, or partials per key block): ours only
    grad_accum: str = "f32"       # bf16: dQ by packed bf16 atomics into dq itself: ours only

    @functools.cached_property
    def spec(self) -> AttentionBwdSpec:
        """What our kernels compute for the row: at its head dim, or zero-padded to the narrowest one a body
        computes on sm_90, as the torch op pads (fmha_mlir.torch.call.computed_spec; the scale stays the
        row's own)."""
        from fmha_mlir.torch.call import computed_spec

        return computed_spec(AttentionBwdSpec(
            dtype=self.dtype, hdim_q=self.hdim, gqa_ratio=self.heads_q // self.heads_kv,
            mask=Mask("causal_top_left" if self.causal else "none"), softcap=self.softcap, bias=self.bias,
            dbias=self.dbias, alibi_slopes=self.bias == "alibi" and self.dbias, deterministic=self.deterministic,
            grad_accum=self.grad_accum), get_target(ARCH))

    @property
    def score_features(self) -> bool:
        """Rows only ours is timed on (torch's fused backwards have no softcap, bias gradient or ALiBi; the
        deterministic and bf16-accumulation rows compare with our own default ones)."""
        return bool(self.softcap) or self.bias != "none" or self.deterministic or self.grad_accum != "f32"

    @property
    def label(self) -> str:
        kv = f" Hkv{self.heads_kv}" if self.heads_kv != self.heads_q else ""
        bias = {"none": "", "elementwise": " bias", "alibi": " alibi"}[self.bias] + (
            "" if not self.dbias else " dslopes" if self.bias == "alibi" else " dbias")
        padded = f" (padded {self.spec.hdim_q})" if self.spec.hdim_q != self.hdim else ""
        return f"{self.dtype} B{self.batch} H{self.heads_q}{kv} S{self.seqlen} D{self.hdim}{padded}" + (
            " causal" if self.causal else "") + (f" softcap {self.softcap:g}" if self.softcap else "") + bias + (
            " deterministic" if self.deterministic else "") + (
            f" grad-accum {self.grad_accum}" if self.grad_accum != "f32" else "")

    @property
    def long(self) -> bool:
        """One of the d128 long-sequence rows that compare with cuDNN's published record."""
        return (self.batch, self.heads_q, self.heads_kv, self.seqlen, self.hdim, self.causal) in LONG_SHAPES

    @property
    def flops(self) -> float:
        forward = 4 * self.batch * self.heads_q * self.seqlen * self.seqlen * self.hdim
        return 2.5 * forward / (2 if self.causal else 1)


# (batch, heads_q, heads_kv, seqlen, hdim, causal): the rows of the Hopper body's issue, then d128 at 16k
# tokens of 16 heads (the long-sequence shape of FlashAttention-3's and cuDNN's published H200 figures).
SHAPES = [(4, 16, 16, 2048, 64, False), (4, 16, 16, 2048, 128, True), (2, 16, 16, 4096, 128, False),
          (2, 8, 8, 2048, 256, False), (1, 32, 8, 8192, 128, True)]
LONG_SHAPES = [(2, 16, 16, 8192, 128, False), (2, 16, 16, 8192, 128, True), (1, 16, 16, 16384, 128, False),
               (1, 16, 16, 16384, 128, True)]
# Head dims no table row is made for (small models' 32, Stable Diffusion's 80, 96, 160 and 192): the tiled bodies
# pad them inside the kernel where their warp layouts need it (bodies.tile_hdims: d80 on 96-column Q / K tiles
# on sm_90, on 128-column ones on the wgmma rows; d160 on 192-column ones of the d256 row, whose warpgroups
# split d192 at 96 columns); a head dim that is not a multiple of 8 the op pads (Row.spec). d192 causal: the
# d256 row's producer with a mask too (reports/bench_notes.md, "Register budgets and the producer at d160 /
# d192, measured").
PADDED_SHAPES = [(4, 16, 16, 2048, 32, False), (4, 16, 16, 2048, 80, False), (4, 16, 16, 2048, 96, False),
                 (4, 16, 16, 2048, 160, False), (4, 16, 16, 2048, 192, False), (4, 16, 16, 2048, 192, True)]
ROWS = [Row(*shape, dtype) for dtype in ("bf16", "f16") for shape in SHAPES + LONG_SHAPES + PADDED_SHAPES]
# cuDNN 9.19 on an H200, d128 backward at long sequences (TFLOP/s as counted here): the record to compare with.
CUDNN_PUBLISHED = {False: 612, True: 581}

WARP = WarpConfig(wave_size=32)
# Candidate tiled configs per head dim, measured by `build --sweep` + `run`.
_BASE = dict(wave_size=32, instruction="mma.m16n8k16", swizzle="xor")
SWEEP: dict[int, list[KernelConfig]] = {
    64: [TILED_TABLE[64], dataclasses.replace(TILED_TABLE[64], grid_order="keys_inner")],
    128: [TILED_TABLE[128], dataclasses.replace(TILED_TABLE[128], grid_order="keys_inner")],
    256: [TILED_TABLE[256], TiledConfig(**_BASE, block_m=32, block_n=64, warps=8, stages=2, sdp_warps=(4, 2),
                                         dkv_warps=(2, 4), dq_warps=(2, 4))],
}


# wgmma candidates: the table row without its producer warpgroup (every warp copies by cp.async and
# computes), and with it but dQ by the consumers' atomics, against which the table row is measured.
WGMMA_SWEEP: dict[int, list[KernelConfig]] = {
    d: [WGMMA_TABLE[d].without_producer(),
        dataclasses.replace(WGMMA_TABLE[d].without_dq_bulk(), producer=True)] for d in WGMMA_TABLE}
# d256: dQ's f32 tile fits beside one Q / dO stage only: the writer's bulk reduce-adds against double buffering.
WGMMA_SWEEP[256].append(dataclasses.replace(WGMMA_TABLE[256], stages=1, producer=True, dq_bulk=True))
# 128 query rows a step in one stage: S^T's and dQ's warpgroup tiles become whole m64n64 products (d192's
# 96-column dK / dV stay m64n32), at the cost of the copies' overlap (one stage) and half the steps.
WGMMA_SWEEP[256].append(dataclasses.replace(WGMMA_TABLE[256], block_m=128, stages=1, dq_warps=(2, 1)))
# Deterministic rows whose writer takes dQ's turns (bodies.dq_in_turns): the op's config in the other turn
# order, and each order with the writer's completions overlapping the next step.
TURN_SWEEP = [{"turn_order": order, "turn_overlap": overlap} for order in TURN_ORDERS for overlap in (False, True)]


BIAS_VARIANTS = {"elementwise": {"bias": "elementwise"}, "elementwise+dbias": {"bias": "elementwise", "dbias": True},
                 "alibi": {"bias": "alibi"}, "alibi+dslopes": {"bias": "alibi", "dbias": True}}


def arch_of(config: KernelConfig) -> str:
    """The chip a config's bundle is built for: sm_90a for the wgmma body, else sm_90."""
    return HOPPER_ARCH if getattr(config, "instruction", "") == WGMMA else ARCH


def bundle_dir(directory: Path, row: Row, config: KernelConfig) -> Path:
    return bundle_path(directory, row.spec, arch_of(config), config=config)


@dataclasses.dataclass(frozen=True)
class Candidates:
    """Which configs of ours a row times beside the op's own (row_configs; the command line's flags)."""
    sweep: bool = False            # SWEEP's mma.sync candidates, and the wgmma ones as wgmma_sweep
    warp: bool = False             # the scalar warp body
    wgmma: bool = False            # the wgmma row of the head dim's bucket
    wgmma_sweep: bool = False      # its candidates: WGMMA_SWEEP, TURN_SWEEP, dQ's logical order
    sections: tuple[int, ...] = ()  # the op's wgmma config with each of these l2_section_bytes
    registers: tuple[int, ...] = ()  # the op's wgmma config, where it has a producer, with each producer_registers
    dkv_stores: bool = False       # the op's wgmma config, where it has a producer, with dkv_tma_store toggled
    convert_rows: tuple[int, ...] = ()  # the op's wgmma config, where it takes them, with each dq_convert_rows


def row_configs(row: Row, candidates: Candidates = Candidates()) -> list[KernelConfig]:
    """What the op runs on an H100 / H200 first (sm_90a's table: ours), then sm_90's table row (the mma.sync
    body on the generic chip) and the sweep's candidates, then the wgmma body's row of the head dim's bucket
    and, with either sweep, its candidates (WGMMA_SWEEP, and the op's config in TURN_SWEEP's turns or in
    dQ's logical order where those apply; where they take the spec on sm_90a), then the op's config in
    each L2 section size and producer register budget, with dK and dV stored the other way and with dQ
    converted in its grid by each number of rows (those the body takes), then the scalar
    warp body (where it takes the spec: not in deterministic mode)."""
    sweep, wgmma = candidates.sweep, candidates.wgmma
    default = choose_config(row.spec, get_target(HOPPER_ARCH), "tiled")
    generic = choose_config(row.spec, get_target(ARCH), "tiled")
    extra = SWEEP.get(row.hdim, []) if sweep else []
    # The wgmma row of the head dim's bucket: a head dim between the rows runs on zero-padded tiles.
    bucket = next((d for d in sorted(WGMMA_TABLE) if max(row.spec.hdim_q, row.spec.hdim_v) <= d), None)
    hopper = [WGMMA_TABLE[bucket]] if wgmma and bucket else []
    if wgmma and (sweep or candidates.wgmma_sweep):
        hopper += WGMMA_SWEEP.get(bucket, [])
        if dq_in_turns(row.spec, default):
            hopper += [dataclasses.replace(default, **turns) for turns in TURN_SWEEP]
        if dq_fragment_order(row.spec, default):   # its lane places against v2 atomics
            hopper.append(dataclasses.replace(default, dq_fragment=False))
    if getattr(default, "instruction", "") == WGMMA:
        hopper += [dataclasses.replace(default, l2_section_bytes=size) for size in candidates.sections]
        hopper += [dataclasses.replace(default, producer_registers=n) for n in candidates.registers if default.producer]
        if candidates.dkv_stores and default.producer:
            hopper.append(dataclasses.replace(default, dkv_tma_store=not default.dkv_tma_store))
        hopper += [dataclasses.replace(default, dq_convert_rows=n) for n in candidates.convert_rows]
        # both: each pair too (the convert branch moves ptxas's register allocation, so a producer budget
        # that spills without it may not with it: d64 with 48)
        hopper += [dataclasses.replace(default, dq_convert_rows=n, producer_registers=r)
                   for n in candidates.convert_rows for r in candidates.registers if default.producer]
    hopper = [c for c in hopper if not BODIES["tiled"].reasons(row.spec, get_target(HOPPER_ARCH), c)]
    scalar = [WARP] if candidates.warp and not BODIES["warp"].spec_reasons(row.spec, WARP) else []
    return list(dict.fromkeys([default, generic, *extra, *hopper, *scalar]))


# -- build (here) -------------------------------------------------------------------------------------


def build(directory: Path, ptxas: str | None, rows: list[Row], candidates: Candidates) -> None:
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.runtime.bundle import Bundle

    ptxas = ptxas or shutil.which("ptxas")
    compiler = Compiler(ptxas=ptxas)   # a cubin when ptxas sits in a CUDA toolkit: no JIT on the GPU
    facts = {}
    for row in rows:
        for config in row_configs(row, candidates):
            out = bundle_dir(directory, row, config)
            if out.is_dir():
                continue
            start = time.perf_counter()
            compiled = compiler.compile_spec(row.spec, arch_of(config), config=config)
            seconds = time.perf_counter() - start
            Bundle(compiled.manifest, compiled.bundle_files()).save(out)
            facts[out.name] = {"compile_seconds": round(seconds, 3), "config": config.to_json(),
                               "kernels": ptxas_facts(compiled.isa, ptxas, arch_of(config)) if ptxas else "no ptxas"}
            print(f"{out.name}: {seconds:.2f} s", flush=True)
    report = directory / "build.json"
    old = json.loads(report.read_text()) if report.is_file() else {}
    facts = {**old, **facts}
    report.write_text(json.dumps(facts, indent=1) + "\n")
    report.with_suffix(".md").write_text(_build_table(facts, ptxas))


def _build_table(facts: dict, ptxas: str | None) -> str:
    """Compile time and the main kernel's registers and spills per bundle, as markdown."""
    lines = [f"# Bundles of the benchmark: compile time (spec to cubin, ptxas {ptxas or 'absent'}), registers "
             "and spills of the dq_dk_dv kernel (ptxas -v, the bundle's chip)", "",
             "| bundle | compile s | dq_dk_dv registers | spill bytes |", "| --- | --- | --- | --- |"]
    for name, entry in sorted(facts.items()):
        kernels = entry["kernels"] if isinstance(entry["kernels"], dict) else {}
        main = next((v for k, v in kernels.items() if k.endswith("dq_dk_dv")), {})
        lines.append(f"| {name} | {entry['compile_seconds']:.2f} | {main.get('registers', 'n/a')} | "
                     f"{main.get('spill_bytes', 'n/a')} |")
    return "\n".join(lines) + "\n"


def ptxas_facts(ptx: str, ptxas: str, arch: str = ARCH) -> dict[str, dict[str, int]]:
    """Per kernel from `ptxas -v` (for `arch`): registers, spill_bytes (stores + loads), stack_bytes."""
    with subprocess.Popen([ptxas, f"-arch={arch}", "-v", "-", "-o", "/dev/null"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        out, _ = proc.communicate(ptx)
    facts, current = {}, None
    for line in out.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            current = m.group(1)
            facts[current] = {}
        elif current and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                                         r"loads", line)):
            facts[current]["stack_bytes"] = int(m.group(1))
            facts[current]["spill_bytes"] = int(m.group(2)) + int(m.group(3))
        elif current and (m := re.search(r"Used (\d+) registers", line)):
            facts[current]["registers"] = int(m.group(1))
    return facts


# -- run (on the GPU) ---------------------------------------------------------------------------------


def _inputs(torch, row: Row, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = next(t for t, name in torch_dtype_names().items() if name == row.dtype)
    shape = lambda heads: (row.batch, heads, row.seqlen, row.hdim)  # noqa: E731
    q = torch.randn(shape(row.heads_q), generator=g, device="cuda", dtype=dt)
    k = torch.randn(shape(row.heads_kv), generator=g, device="cuda", dtype=dt)
    v = torch.randn(shape(row.heads_kv), generator=g, device="cuda", dtype=dt) * 0.5
    do = torch.randn(shape(row.heads_q), generator=g, device="cuda", dtype=dt) * 0.5
    bias = None
    if row.bias == "elementwise":
        bias = torch.randn((1, row.heads_q, row.seqlen, row.seqlen), generator=g, device="cuda", dtype=dt) * 0.5
    return q, k, v, do, bias


def _alibi(torch, row: Row, dtype):
    """The standard-slope ALiBi as a [1, H, S, S] tensor (what our kernels compute in place)."""
    from fmha_mlir import oracle

    return torch.tensor(oracle.alibi_bias(oracle.alibi_slopes(row.heads_q), row.seqlen, row.seqlen)[None],
                        device="cuda", dtype=dtype)


def _standard_slopes(torch, row: Row):
    from fmha_mlir import oracle

    return torch.tensor(oracle.alibi_slopes(row.heads_q)[None], device="cuda", dtype=torch.float32)


def _forward(torch, row: Row, q, k, v, bias=None):
    """O and the natural-log LSE from torch's flash forward (the backward's inputs); with a bias (or
    ALiBi) from its mem-efficient forward, which takes an additive bias."""
    k, v = (t.repeat_interleave(row.heads_q // row.heads_kv, 1) for t in (k, v))
    if row.bias == "none":
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, is_causal=row.causal)
        return out[0], out[1][..., :row.seqlen].contiguous()
    added = bias if row.bias == "elementwise" else _alibi(torch, row, q.dtype)
    out = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, added.expand(row.batch, -1, -1, -1), True, is_causal=row.causal)
    return out[0], out[1][..., :row.seqlen].contiguous()


@dataclasses.dataclass(frozen=True)
class TimingOptions:
    calls: int              # calls queued between the two events of a round
    rounds: int             # rounds per contender (the medians are reported)
    sleep_rate: float       # torch.cuda._sleep cycles per second on this GPU

    def time(self, torch, call, rounds: int | None = None) -> bench_timing.Timing:
        return bench_timing.queued(torch, call, calls=self.calls, rounds=rounds or self.rounds, rate=self.sleep_rate)


def _group(tensor, heads: int) -> np.ndarray:
    """Batch 0's first `heads` heads as float64 on the host ([1, heads, S, ...]): the cut the gate judges."""
    return tensor[0:1, :heads].double().cpu().numpy()


def _problem(row: Row, inputs, o, lse, numerics) -> bench_gate.Problem:
    """The gate's problem: batch 0's first kv head and its query heads, with the O and LSE the backward takes."""
    q, k, v, do, bias = inputs
    g = row.heads_q // row.heads_kv
    spec = row.spec
    host_bias = None
    if row.bias == "elementwise":
        host_bias = bias[:, :g].double().cpu().numpy()
    elif row.bias == "alibi":
        from fmha_mlir import oracle

        host_bias = oracle.alibi_bias(oracle.alibi_slopes(row.heads_q)[:g].astype(np.float32), row.seqlen,
                                      row.seqlen)[None]
    return bench_gate.Problem(_group(q, g), _group(k, 1), _group(v, 1), _group(o, g), _group(do, g), _group(lse, g),
                              spec.mask, spec.scale, g, spec.dtype, numerics, spec.softcap, host_bias)


def _gate_grads(row: Row, refs: bench_gate.References, grads: dict) -> dict:
    g = row.heads_q // row.heads_kv
    host = {n: _group(grads[n][..., :row.hdim], g if n == "dq" else 1) for n in ("dq", "dk", "dv")}   # (unpadded)
    return bench_gate.gate(refs, host, row.dtype, row.hdim)


def _measured(row: Row, timing: bench_timing.Timing | None, gate: dict | None, why: str | None = None) -> dict:
    return {"timing": timing.to_json() if timing else None,
            "tflops": row.flops / timing.gpu_s / 1e12 if timing else None,
            "gate": gate, "passed": all(c["passed"] for c in gate.values()) if gate else None, "why": why}


@dataclasses.dataclass
class Contender:
    """One backward of a row, gated and ready to time beside the row's others: `call` queues it once (None:
    it could not run, `why` says why); `close` frees what it holds outside Python (ours: its launch plans);
    `run`, ours only, is its launch plan."""
    gate: dict | None
    call: object = None
    why: str | None = None
    close: object = lambda: None
    run: object = None


def _peer(torch, row: Row, sets, refs, forward) -> Contender:
    """torch.autograd.grad of `forward(q, k, v)`'s output, one prepared graph per input set, gated."""
    prepared = []
    for q, k, v, do, _ in sets:
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        prepared.append((forward(q, k, v), (q, k, v), do))
    turn = itertools.cycle(prepared)

    def once():
        out, inputs, do = next(turn)
        return torch.autograd.grad(out, inputs, do, retain_graph=True)

    out, inputs, do = prepared[0]
    first = torch.autograd.grad(out, inputs, do, retain_graph=True)
    gate = _gate_grads(row, refs, dict(zip(("dq", "dk", "dv"), first)))
    del first
    return Contender(gate, once)


def _sdpa_peer(torch, row: Row, backend: str, sets, refs) -> Contender:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def forward(q, k, v):
        with sdpa_kernel([getattr(SDPBackend, backend)]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=row.causal,
                                                                    enable_gqa=row.heads_q != row.heads_kv)

    try:
        return _peer(torch, row, sets, refs, forward)
    except RuntimeError as exc:
        return Contender(None, why=str(exc).splitlines()[0])


def _flex_peer(torch, row: Row, sets, refs) -> Contender:
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as exc:
        return Contender(None, why=str(exc))
    torch._dynamo.reset()   # each row compiles anew: past dynamo's recompile limit flex would run eagerly (S^2 scores)
    compiled = torch.compile(flex_attention, dynamic=False)
    mask = None
    if row.causal:
        mask = create_block_mask(lambda b, h, q, k: q >= k, None, None, row.seqlen, row.seqlen, device="cuda")
    try:
        return _peer(torch, row, sets, refs,
                     lambda q, k, v: compiled(q, k, v, block_mask=mask, enable_gqa=row.heads_q != row.heads_kv))
    except Exception as exc:  # noqa: BLE001 - any compile failure is reported as n/a
        return Contender(None, why=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def _prepared_runs(torch, bundle, device, row: Row, sets, forwards):
    """One PreparedRun per input set on torch's current stream, with its tensors."""
    from fmha_mlir.runtime.runner import PreparedRun

    stream = torch.cuda.current_stream().cuda_stream
    runs = []
    for (q, k, v, do, bias), (o, lse) in zip(sets, forwards):
        # A padded row runs on zero columns up to the spec's head dim (made once, outside the timing, as
        # the op's F.pad is: its cost is not in these figures)
        q, k, v, o, do = (_padded(torch, t, row.spec.hdim_q) for t in (q, k, v, o, do))
        tensors = {"q": q, "k": k, "v": v, "o": o, "do": do, "lse": lse,
                   "dq": torch.empty_like(q), "dk": torch.empty_like(k), "dv": torch.empty_like(v)}
        if bias is not None:
            tensors["bias"] = bias
            if row.dbias:
                tensors["dbias"] = torch.empty_like(bias)
        elif row.spec.alibi_slopes:   # the standard slopes as a tensor, and their gradient
            tensors["alibi_slopes"] = _standard_slopes(torch, row)
            tensors["dalibi_slopes"] = torch.empty_like(tensors["alibi_slopes"])
        arrays = {n: torch_device_array(t) for n, t in tensors.items()}
        runs.append((PreparedRun(bundle, device, arrays, stream=stream), tensors))
    return runs


def _padded(torch, tensor, hdim: int):
    """`tensor` with zero columns up to `hdim` (itself when it has them)."""
    extra = hdim - tensor.shape[-1]
    return tensor if extra == 0 else torch.nn.functional.pad(tensor, (0, extra)).contiguous()


def _ours(torch, bundle, device, row: Row, sets, forwards, refs) -> Contender:
    """One bundle's launch plan on device-resident tensors, one prepared run per input set, gated."""
    runs = _prepared_runs(torch, bundle, device, row, sets, forwards)

    def close():
        for run, _ in runs:
            run.close()

    try:
        runs[0][0].launch()
        torch.cuda.synchronize()
        gate = _gate_grads(row, refs, runs[0][1])
    except BaseException:
        close()
        raise
    turn = itertools.cycle([run for run, _ in runs])
    return Contender(gate, lambda: next(turn).launch(), close=close, run=runs[0][0])


def _ours_entry(config: KernelConfig, measured: dict, steps: dict) -> dict:
    """A config's entry in a row's report: its measurement, its steps' and what it is."""
    return {**measured, "steps": steps, "body": config.body, "arch": arch_of(config), "about": config_about(config)}


def _time_steps(torch, run, options: TimingOptions) -> dict[str, dict]:
    """Each step of the plan alone, queued as the whole plan is (GPU and host time per call). A kernel
    whose work-groups wait on counters (deterministic dQ's turns, dQ converted in the grid) is timed
    behind their zero fill (`steps_alone`): launched again on counts its last launch left behind, it would
    wait for counts that never come."""
    out = {}
    for index, (step, calls) in enumerate(steps_alone(run.bundle.steps, run.step_calls())):
        label = step["buffer"] if step["op"] == "zero" else step["kernel"].rsplit("_", 2)[-2] + "_" + \
            step["kernel"].rsplit("_", 1)[-1]
        if len(calls) > 1:
            label = f"{label} behind its counters' zero fill"
        out[f"{index}:{step['op']}:{label}"] = options.time(
            torch, lambda calls=calls: [call() for call in calls], rounds=3).to_json()
    return out


def steps_alone(steps: list[dict], calls: list) -> list[tuple[dict, list]]:
    """(step, what to call to run it alone) for each step of a plan: the step's own call, after the zero
    fill of the counters it takes, if any (a plan zero-fills them before their kernel, every call; launched
    again on counts its last launch left, its waits for a turn or a head's count would never pass)."""
    zero = {step["buffer"]: call for step, call in zip(steps, calls) if step["op"] == "zero"}
    out = []
    for step, call in zip(steps, calls):
        takes = [arg["buffer"] for arg in step.get("args", ()) if arg.get("buffer") in COUNTERS]
        out.append((step, [zero[name] for name in takes] + [call]))
    return out


def run(directory: Path, report: Path, options: TimingOptions, rows: list[Row], flex: str, budget_s: float,
        candidates: Candidates) -> int:
    """Every row (until `budget_s` seconds have passed: the rows after it are listed as not run)."""
    import torch

    from fmha_mlir.runtime.executor import get_executor

    device = get_executor("cuda")
    options = dataclasses.replace(options, sleep_rate=bench_timing.sleep_rate(torch))
    results, skipped, failures, began = [], [], 0, time.perf_counter()
    for row in rows:
        if budget_s and time.perf_counter() - began > budget_s:
            skipped.append(row.label)
            continue
        default = row_configs(row)[0]
        if not bundle_dir(directory, row, default).is_dir():
            raise SystemExit(f"no bundle for {row.label} under {directory}: run `bench_bwd.py build` first")
        sets = [_inputs(torch, row, seed) for seed in range(3)]
        forwards = [_forward(torch, row, q, k, v, bias) for q, k, v, _, bias in sets]
        numerics = load_bundle(directory, row.spec, arch_of(default), default).numerics
        refs = bench_gate.references(_problem(row, sets[0], *forwards[0], numerics))
        entry = {"row": row.label, "flops": row.flops, "causal": row.causal, "long": row.long, "ours": {}, "peers": {}}
        ours, peers = {}, {}
        for config in row_configs(row, candidates):
            if not bundle_dir(directory, row, config).is_dir():
                continue
            if config.body == "warp" and row.seqlen * row.heads_q * row.batch > 16 * 2048 * 4:
                continue  # the scalar body would take minutes here: it is timed on the smaller rows only
            bundle = load_bundle(directory, row.spec, arch_of(config), config)
            if config.body == "warp":   # one call, one round, alone: it would hold the others' rounds for seconds
                scalar = _ours(torch, bundle, device, row, sets[:1], forwards, refs)
                try:
                    measured = _measured(row, bench_timing.queued(torch, scalar.call, calls=1, rounds=1,
                                                                   rate=options.sleep_rate), scalar.gate)
                finally:
                    scalar.close()
                entry["ours"][config.tag] = _ours_entry(config, measured, {})
                continue
            ours[config] = _ours(torch, bundle, device, row, sets, forwards, refs)
        if not row.score_features:
            for backend in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
                peers[backend] = _sdpa_peer(torch, row, backend, sets, refs)
            if flex == "all" or flex == row.dtype:
                peers["FLEX"] = _flex_peer(torch, row, sets, refs)
        contenders = {**{config.tag: c for config, c in ours.items()}, **peers}
        timings = bench_timing.interleaved(torch, {n: c.call for n, c in contenders.items() if c.call is not None},
                                           calls=options.calls, rounds=options.rounds, rate=options.sleep_rate)
        for config, contender in ours.items():
            measured = _measured(row, timings[config.tag], contender.gate)
            entry["ours"][config.tag] = _ours_entry(config, measured, _time_steps(torch, contender.run, options))
        for name, contender in peers.items():
            entry["peers"][name] = _measured(row, timings.get(name), contender.gate, contender.why)
        for contender in contenders.values():
            contender.close()
        del contenders, ours, peers   # the peers' graphs too, before the next row's inputs
        failures += sum(not m["passed"] for m in entry["ours"].values())
        results.append(entry)
        print(_line(entry), flush=True)
        _write(report, results, skipped, torch)  # after every row: a run cut short keeps what it measured
        del sets, forwards
        torch.cuda.empty_cache()
    _write(report, results, skipped, torch)
    return 1 if failures else 0


def once(directory: Path, row: Row, tag: str | None, candidates: Candidates) -> int:
    """Two backwards of one bundle (the second is the one to profile: module load and JIT are done): the
    op's own config, or the one of `tag` among the row's configs under the flags the build took."""
    configs = row_configs(row, dataclasses.replace(candidates, sweep=True, warp=True, wgmma=True))
    config = next((c for c in configs if c.tag == tag), None) if tag else configs[0]
    if config is None:
        print(f"{row.label}: no config tagged {tag} under these flags (pass the build's, e.g. --l2-sections); "
              f"these are: {', '.join(c.tag for c in configs)}", file=sys.stderr)
        return 2
    import torch

    from fmha_mlir.runtime.executor import get_executor

    bundle = load_bundle(directory, row.spec, arch_of(config), config)
    inputs = _inputs(torch, row, 0)
    runs = _prepared_runs(torch, bundle, get_executor("cuda"), row, [inputs], [_forward(torch, row, *inputs[:3],
                                                                                       inputs[4])])
    try:
        for _ in range(2):
            runs[0][0].launch()
        torch.cuda.synchronize()
    finally:
        runs[0][0].close()
    print(f"{row.label} {config.tag}: done")
    return 0


CONTENDERS = (("ours", None), ("flash", "FLASH_ATTENTION"), ("cuDNN", "CUDNN_ATTENTION"), ("flex", "FLEX"))


def contenders(entry: dict) -> dict[str, dict | None]:
    """A row's measured entry per contender name: ours is its default (first) config."""
    ours = next(iter(entry["ours"].values()), None)
    return {name: ours if key is None else entry["peers"].get(key) for name, key in CONTENDERS}


def config_about(config: KernelConfig) -> str:
    """A config in a few words: its matrix instruction and, on the wgmma body, its producer and dQ path."""
    if config.body != "tiled":
        return config.body
    words = [config.instruction]
    if config.instruction == WGMMA:
        words.append(f"producer ({config.producer_registers} registers)" if config.producer else "no producer")
        words.append("dQ bulk" if config.dq_bulk else "dQ by consumers")
        words += ["dK, dV by TMA"] if config.dkv_tma_store else []
        if config.dq_convert_rows:
            words.append(f"dQ converted in the grid, {config.dq_convert_rows} rows a work-group")
        words += [] if config.dq_fragment else ["dQ in logical order"]
        if (config.turn_order, config.turn_overlap) != (TURN_ORDERS[0], False):   # deterministic mode's dQ turns
            words.append(f"turns {config.turn_order.replace('_', ' ')}")
            words += ["overlapped"] if config.turn_overlap else []
        words += [f"L2 sections of {config.l2_section_bytes >> 20} MiB"] if config.l2_section_bytes else []
    return ", ".join(words)


def config_lines(results: list[dict]) -> list[str]:
    """Every config of ours timed on each row (the first is the op's choice on an H100 / H200)."""
    lines = ["", "Every config of ours per row (the first is ours above):", "",
             "| row | config | chip | what | TFLOP/s | gate |", "| --- | --- | --- | --- | --- | --- |"]
    for entry in results:
        for tag, measured in entry["ours"].items():
            lines.append(f"| {entry['row']} | {tag} | {measured.get('arch', 'n/a')} | {measured.get('about', '')} | "
                         f"{tflops_cell(measured)} | {gate_cell(measured)} |")
    return lines


def tflops_cell(measured: dict | None) -> str:
    """TFLOP/s, marked `!` where a round did not keep the host ahead and `(gate FAIL)` where the gate failed."""
    if not measured or not measured["tflops"]:
        return "n/a"
    mark = "" if measured["timing"]["ahead"] else "!"
    fail = " (gate FAIL)" if measured["passed"] is False else ""
    return f"{measured['tflops']:.1f}{mark}{fail}"


def ratio_cell(ours: dict | None, other: dict | None) -> str:
    if not ours or not other or not ours["tflops"] or not other["tflops"]:
        return "n/a"
    return f"{ours['tflops'] / other['tflops']:.2f}x"


def host_cell(measured: dict | None) -> str:
    """Host us per call / GPU us per call."""
    if not measured or not measured["timing"]:
        return "n/a"
    t = measured["timing"]
    return f"{1e6 * t['host_s']:.0f} / {1e6 * t['gpu_s']:.0f}"


def gate_cell(measured: dict | None) -> str:
    """The largest of dQ's, dK's and dV's ratio to the gate's bound (> 1 fails)."""
    if not measured or not measured["gate"]:
        return "n/a"
    return f"{max(c['ratio'] for c in measured['gate'].values()):.2f}"


def table_lines(results: list[dict]) -> list[str]:
    """The report's tables: TFLOP/s and ratios; host and GPU us per call; the gate per contender."""
    names = [name for name, _ in CONTENDERS]
    lines = ["| row | " + " | ".join(names) + " | ours / flash | ours / cuDNN | ours / flex |",
             "| --- |" + " --- |" * (len(names) + 3)]
    for entry in results:
        c = contenders(entry)
        lines.append(f"| {entry['row']} | " + " | ".join(tflops_cell(c[n]) for n in names) + " | "
                     + " | ".join(ratio_cell(c["ours"], c[n]) for n in ("flash", "cuDNN", "flex")) + " |")
        tiled = [v for v in entry["ours"].values() if v["body"] == "tiled" and v["tflops"]]
        best = max(tiled, key=lambda v: v["tflops"]) if tiled else None
        if best and best is not c["ours"]:
            lines.append(f"|  (best swept config: {best['tflops']:.1f}) |" + " |" * (len(names) + 3))
    lines += ["", "Host us to issue one call / GPU us per call:", "",
              "| row | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    lines += [f"| {e['row']} | " + " | ".join(host_cell(contenders(e)[n]) for n in names) + " |" for e in results]
    lines += ["", "Gate: the largest of dQ's, dK's, dV's ratio to the bound (> 1 fails):", "",
              "| row | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    lines += [f"| {e['row']} | " + " | ".join(gate_cell(contenders(e)[n]) for n in names) + " |" for e in results]
    long_rows = [e for e in results if e["long"] and e["row"].startswith("bf16")]
    if long_rows:
        lines += ["", "d128 at long sequences against cuDNN's published H200 record "
                  f"({CUDNN_PUBLISHED[False]} non-causal / {CUDNN_PUBLISHED[True]} causal TFLOP/s):", "",
                  "| row | ours | cuDNN here | published | ours / published |", "| --- | --- | --- | --- | --- |"]
        for e in long_rows:
            c, published = contenders(e), CUDNN_PUBLISHED[e["causal"]]
            ours = c["ours"]["tflops"] if c["ours"] and c["ours"]["tflops"] else None
            lines.append(f"| {e['row']} | {tflops_cell(c['ours'])} | {tflops_cell(c['cuDNN'])} | {published} | "
                         + (f"{ours / published:.2f}x" if ours else "n/a") + " |")
    return lines


def _line(entry: dict) -> str:
    parts = []
    for name, measured in contenders(entry).items():
        if measured:
            parts.append(f"{name}={tflops_cell(measured)} [{host_cell(measured)} us, gate {gate_cell(measured)}]")
    return f"{entry['row']}: " + " ".join(parts)


def _write(report: Path, results: list[dict], skipped: list[str], torch) -> None:
    props = torch.cuda.get_device_properties(0)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    command = "python " + " ".join(sys.argv)
    lines = [f"# Attention backward on {props.name} ({platform.node()})", "",
             f"Command: `{command}`. Driver {driver}, torch {torch.__version__} (CUDA {torch.version.cuda}), cuDNN "
             f"{torch.backends.cudnn.version()}, Python {platform.python_version()}.", "",
             "TFLOP/s = 2.5 x 4 B Hq S S D / GPU time per backward (halved for causal). GPU time: the median over "
             "rounds of many calls queued between two CUDA events behind a sleep kernel, every call issued "
             "before the GPU reached the first (`!` marks a row where a round did not manage that), the row's "
             "contenders taking their rounds in turn (bench_timing.interleaved); 3 input sets rotated "
             "(torch.Generator seeds 0, 1, 2 on the GPU). Ours: the prepared launch plan; peers: torch.autograd.grad "
             "of a forward run once. Every contender's gradients of seed 0 judged by the gate first "
             "(tools/bench_gate.py).", ""]
    lines += table_lines(results) + config_lines(results)
    if skipped:
        lines += ["", "Not run (past the run's time budget): " + "; ".join(skipped) + "."]
    meta = {"command": command, "device": props.name, "driver": driver, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "skipped": skipped}
    write_report_files(report, lines, {"meta": meta, "rows": results})


def select_rows(texts: list[str]) -> list[Row]:
    """The benchmark rows whose label contains one of `texts`, in ROWS' order ("" takes every row)."""
    return [r for r in ROWS if any(text in r.label for text in texts)]


def main(argv=None) -> int:
    p = build_run_parser(__doc__, "bench_report.md", ("build", "run", "once"),
                         "once: one backward of the first matching row with config --tag (for a profiler)")
    p.add_argument("--calls", type=int, default=10, help="run: calls queued between the events of a round")
    p.add_argument("--rounds", type=int, default=5, help="run: rounds per contender (medians reported)")
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="run: start no row after this many seconds (0: no limit); the rest are listed as not run")
    p.add_argument("--sweep", action="store_true", help="also the candidate configs of SWEEP")
    p.add_argument("--warp", action="store_true", help="also the scalar warp body (the smaller rows only)")
    p.add_argument("--wgmma", action="store_true", help="also the wgmma body (sm_90a) where its table takes the row")
    p.add_argument("--wgmma-sweep", action="store_true",
                   help="with --wgmma: also WGMMA_SWEEP's candidates, TURN_SWEEP's on deterministic rows whose "
                        "writer takes turns, and dQ in logical order where the op's config keeps fragment order")
    p.add_argument("--l2-sections", nargs="+", type=int, default=[], metavar="MIB",
                   help="with --wgmma: also the op's wgmma config with L2 sections of these many MiB "
                        "(config.l2_section_bytes)")
    p.add_argument("--producer-registers", nargs="+", type=int, default=[], metavar="N",
                   help="with --wgmma: also the op's wgmma config, where it has a producer, with these register "
                        "budgets for it (config.producer_registers)")
    p.add_argument("--dkv-stores", action="store_true",
                   help="with --wgmma: also the op's wgmma config, where it has a producer, with dK and dV stored "
                        "the other way (config.dkv_tma_store toggled)")
    p.add_argument("--dq-convert-rows", nargs="+", type=int, default=[], metavar="N",
                   help="with --wgmma: also the op's wgmma config with dQ converted in its grid, N query rows a "
                        "work-group (config.dq_convert_rows; 0: by the convert kernel); with --producer-registers "
                        "also each pair")
    p.add_argument("--rows", nargs="+", default=[""], help="only rows whose label contains one of these texts")
    p.add_argument("--flex", choices=("bf16", "f16", "all", "none"), default="bf16",
                   help="rows on which compiled FlexAttention is timed (its torch.compile takes tens of seconds a row)")
    p.add_argument("--ptxas", help="build: ptxas of a CUDA toolkit, for cubins and register counts")
    p.add_argument("--tag", default="", help="once: the config tag, among the row's configs under the flags given "
                   "(as to build; default: the op's own)")
    p.add_argument("--softcap", type=float, default=0.0, help="also each row with this softcap (its speed cost)")
    p.add_argument("--deterministic", action="store_true", help="also each row in deterministic mode (its cost)")
    p.add_argument("--grad-accum", choices=("bf16",), help="also each bf16 row with bf16 dQ atomics (their gain)")
    p.add_argument("--bias", nargs="*", default=[], choices=BIAS_VARIANTS,
                   help="also each row with each of these biases (their speed cost)")
    args = p.parse_args(argv)
    rows = select_rows(args.rows)
    if args.softcap:
        rows = [v for r in rows for v in (r, dataclasses.replace(r, softcap=args.softcap))]
    if args.bias:
        rows = [v for r in rows for v in (r, *(dataclasses.replace(r, **BIAS_VARIANTS[b]) for b in args.bias))]
    if args.deterministic:
        rows = [v for r in rows for v in (r, dataclasses.replace(r, deterministic=True))]
    if args.grad_accum:   # packed bf16 atomics add into a bf16 dQ: the bf16 rows only
        rows = [v for r in rows for v in (r, *([dataclasses.replace(r, grad_accum=args.grad_accum)]
                                               if r.dtype == "bf16" and not r.deterministic else []))]
    candidates = Candidates(args.sweep, args.warp, args.wgmma, args.wgmma_sweep,
                            tuple(mib << 20 for mib in args.l2_sections), tuple(args.producer_registers),
                            args.dkv_stores, tuple(args.dq_convert_rows))
    if args.action == "build":
        build(args.directory, args.ptxas, rows, candidates)
        return 0
    if args.action == "once":
        return once(args.directory, rows[0], args.tag, candidates)
    options = TimingOptions(calls=args.calls, rounds=args.rounds, sleep_rate=0.0)
    return run(args.directory, args.report, options, rows, args.flex, args.budget_s, candidates)


if __name__ == "__main__":
    sys.exit(main())
