"""Time the attention backward on an NVIDIA GPU: our bodies against torch SDPA's flash, cuDNN and
mem-efficient backends and FlexAttention, on the same inputs.

    python tools/bench_bwd.py build DIR [--sweep]           # where MLIR is: bundles, compile times, ptxas -v
    python tools/bench_bwd.py run DIR --report FILE         # on the GPU: numpy, cuda-bindings, torch

Rows: bf16 and f16 x {B4 H16 S2048 D64, B4 H16 S2048 D128, B2 H16 S4096 D128, B2 H8 S2048 D256,
B1 H32 Hkv8 S8192 D128 (GQA)} x {no mask, causal}. Before timing, our gradients are checked under the
gate (fmha_mlir.tolerance, with the bundle's numerics) against the float64 oracle on a slice of the
problem (batch 0, the first kv head's query heads: the kernels are the same for every slice), and
against torch's flash gradients. Timing: CUDA events around each backward, warm-up first, the median
of many, three input sets rotated so that no run finds its inputs in L2. Ours is the whole launch plan
(D = rowsum(dO * O), zero fill, dq_dk_dv, converts) on buffers already on the device; torch's is
autograd.grad of scaled_dot_product_attention restricted to one backend (its forward is not timed).
TFLOP/s counts the backward as 2.5 x the forward's 4 B Hq Sq Sk D, halved for causal masks.

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
from fmha_mlir.bodies import BODIES, TILED_TABLE, choose_config
from fmha_mlir.kernel_config import KernelConfig, TiledConfig, WarpConfig
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import get_target
from build_run import build_run_parser, write_report_files  # run as a script: tools/ is on sys.path

ARCH = "sm_90"


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
    deterministic: bool = False   # dQ partials per key block, summed in order: ours only
    grad_accum: str = "f32"       # bf16: dQ by packed bf16 atomics into dq itself: ours only

    @property
    def spec(self) -> AttentionBwdSpec:
        return AttentionBwdSpec(dtype=self.dtype, hdim_q=self.hdim, gqa_ratio=self.heads_q // self.heads_kv,
                                mask=Mask("causal_top_left" if self.causal else "none"), softcap=self.softcap,
                                bias=self.bias, dbias=self.dbias, alibi_slopes=self.bias == "alibi" and self.dbias,
                                deterministic=self.deterministic, grad_accum=self.grad_accum)

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
        return f"{self.dtype} B{self.batch} H{self.heads_q}{kv} S{self.seqlen} D{self.hdim}" + (
            " causal" if self.causal else "") + (f" softcap {self.softcap:g}" if self.softcap else "") + bias + (
            " deterministic" if self.deterministic else "") + (
            f" grad-accum {self.grad_accum}" if self.grad_accum != "f32" else "")

    @property
    def flops(self) -> float:
        forward = 4 * self.batch * self.heads_q * self.seqlen * self.seqlen * self.hdim
        return 2.5 * forward / (2 if self.causal else 1)


SHAPES = [(4, 16, 16, 2048, 64), (4, 16, 16, 2048, 128), (2, 16, 16, 4096, 128), (2, 8, 8, 2048, 256),
          (1, 32, 8, 8192, 128)]
ROWS = [Row(*shape, causal, dtype) for dtype in ("bf16", "f16") for shape in SHAPES for causal in (False, True)]

WARP = WarpConfig(wave_size=32)
# Candidate tiled configs per head dim, measured by `build --sweep` + `run`.
_BASE = dict(wave_size=32, instruction="mma.m16n8k16", swizzle="xor")
SWEEP: dict[int, list[KernelConfig]] = {
    64: [TILED_TABLE[64], dataclasses.replace(TILED_TABLE[64], grid_order="keys_inner")],
    128: [TILED_TABLE[128], dataclasses.replace(TILED_TABLE[128], grid_order="keys_inner")],
    256: [TILED_TABLE[256], TiledConfig(**_BASE, block_m=32, block_n=64, warps=8, stages=2, sdp_warps=(4, 2),
                                         dkv_warps=(2, 4), dq_warps=(2, 4))],
}


BIAS_VARIANTS = {"elementwise": {"bias": "elementwise"}, "elementwise+dbias": {"bias": "elementwise", "dbias": True},
                 "alibi": {"bias": "alibi"}, "alibi+dslopes": {"bias": "alibi", "dbias": True}}


def bundle_dir(directory: Path, row: Row, config: KernelConfig) -> Path:
    return bundle_path(directory, row.spec, ARCH, config=config)


def row_configs(row: Row, sweep: bool) -> list[KernelConfig]:
    default = choose_config(row.spec, get_target(ARCH), "tiled")
    extra = SWEEP.get(row.hdim, []) if sweep else []
    warp = [] if BODIES["warp"].spec_reasons(row.spec, WARP) else [WARP]   # e.g. deterministic mode: no warp body
    return list(dict.fromkeys([default, *extra, *warp]))


# -- build (here) -------------------------------------------------------------------------------------


def build(directory: Path, sweep: bool, ptxas: str | None, rows: list[Row]) -> None:
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.runtime.bundle import Bundle

    ptxas = ptxas or shutil.which("ptxas")
    compiler = Compiler(ptxas=ptxas)   # a cubin when ptxas sits in a CUDA toolkit: no JIT on the GPU
    facts = {}
    for row in rows:
        for config in row_configs(row, sweep):
            out = bundle_dir(directory, row, config)
            if out.is_dir():
                continue
            start = time.perf_counter()
            compiled = compiler.compile_spec(row.spec, ARCH, config=config)
            seconds = time.perf_counter() - start
            Bundle(compiled.manifest, compiled.bundle_files()).save(out)
            facts[out.name] = {"compile_seconds": round(seconds, 3), "config": config.to_json(),
                               "kernels": ptxas_facts(compiled.isa, ptxas) if ptxas else "no ptxas"}
            print(f"{out.name}: {seconds:.2f} s", flush=True)
    report = directory / "build.json"
    old = json.loads(report.read_text()) if report.is_file() else {}
    facts = {**old, **facts}
    report.write_text(json.dumps(facts, indent=1) + "\n")
    report.with_suffix(".md").write_text(_build_table(facts, ptxas))


def _build_table(facts: dict, ptxas: str | None) -> str:
    """Compile time and the main kernel's registers and spills per bundle, as markdown."""
    lines = [f"# Bundles of the benchmark: compile time (spec to cubin, ptxas {ptxas or 'absent'}), registers "
             "and spills of the dq_dk_dv kernel (ptxas -v, sm_90)", "",
             "| bundle | compile s | dq_dk_dv registers | spill bytes |", "| --- | --- | --- | --- |"]
    for name, entry in sorted(facts.items()):
        kernels = entry["kernels"] if isinstance(entry["kernels"], dict) else {}
        main = next((v for k, v in kernels.items() if k.endswith("dq_dk_dv")), {})
        lines.append(f"| {name} | {entry['compile_seconds']:.2f} | {main.get('registers', 'n/a')} | "
                     f"{main.get('spill_bytes', 'n/a')} |")
    return "\n".join(lines) + "\n"


def ptxas_facts(ptx: str, ptxas: str) -> dict[str, dict[str, int]]:
    """Per kernel from `ptxas -v` (sm_90): registers, spill_bytes (stores + loads), stack_bytes."""
    with subprocess.Popen([ptxas, "-arch=sm_90", "-v", "-", "-o", "/dev/null"], stdin=subprocess.PIPE,
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
        return out[0], out[1][..., :row.seqlen]
    added = bias if row.bias == "elementwise" else _alibi(torch, row, q.dtype)
    out = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, added.expand(row.batch, -1, -1, -1), True, is_causal=row.causal)
    return out[0], out[1][..., :row.seqlen]


def _time(torch, fn, repeats: int) -> float:
    """Median seconds of fn() over `repeats` runs, each between two CUDA events (after a warm-up)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return float(np.median(times))


def _torch_backend(torch, row: Row, backend: str, sets, repeats: int):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    prepared = []
    for q, k, v, do, _ in sets:
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        try:
            with sdpa_kernel([getattr(SDPBackend, backend)]):
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=row.causal,
                                                                      enable_gqa=row.heads_q != row.heads_kv)
        except RuntimeError as exc:
            return None, str(exc).splitlines()[0]
        prepared.append((out, (q, k, v), do))
    index = [0]

    def once():
        out, inputs, do = prepared[index[0] % len(prepared)]
        index[0] += 1
        with sdpa_kernel([getattr(SDPBackend, backend)]):
            torch.autograd.grad(out, inputs, do, retain_graph=True)

    try:
        return _time(torch, once, repeats), None
    except RuntimeError as exc:
        return None, str(exc).splitlines()[0]


def _flex(torch, row: Row, sets, repeats: int):
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as exc:
        return None, str(exc)
    compiled = torch.compile(flex_attention, dynamic=False)
    mask = None
    if row.causal:
        mask = create_block_mask(lambda b, h, q, k: q >= k, None, None, row.seqlen, row.seqlen, device="cuda")
    prepared = []
    for q, k, v, do, _ in sets:
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        out = compiled(q, k, v, block_mask=mask, enable_gqa=row.heads_q != row.heads_kv)
        prepared.append((out, (q, k, v), do))
    index = [0]

    def once():
        out, inputs, do = prepared[index[0] % len(prepared)]
        index[0] += 1
        torch.autograd.grad(out, inputs, do, retain_graph=True)

    try:
        return _time(torch, once, repeats), None
    except Exception as exc:  # noqa: BLE001 - any compile failure is reported as n/a
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _ours(torch, bundle, device, row: Row, sets, repeats: int):
    """(median seconds, the gradients of the first set) for one bundle on device-resident tensors."""
    from fmha_mlir.runtime.runner import PreparedRun

    runs = []
    for q, k, v, do, bias in sets:
        o, lse = _forward(torch, row, q, k, v, bias)
        tensors = {"q": q, "k": k, "v": v, "o": o, "do": do, "lse": lse.contiguous(),
                   "dq": torch.empty_like(q), "dk": torch.empty_like(k), "dv": torch.empty_like(v)}
        if bias is not None:
            tensors["bias"] = bias
            if row.dbias:
                tensors["dbias"] = torch.empty_like(bias)
        elif row.spec.alibi_slopes:   # the standard slopes as a tensor, and their gradient
            tensors["alibi_slopes"] = _standard_slopes(torch, row)
            tensors["dalibi_slopes"] = torch.empty_like(tensors["alibi_slopes"])
        runs.append((PreparedRun(bundle, device, {n: torch_device_array(t) for n, t in tensors.items()}), tensors))
    index = [0]

    def once():
        runs[index[0] % len(runs)][0].launch()
        index[0] += 1

    try:
        seconds = _time(torch, once, repeats)
        steps = _time_steps(torch, runs[0][0], repeats)
        runs[0][0].launch()
        torch.cuda.synchronize()
        return seconds, runs[0][1], steps
    finally:
        for run, _ in runs:
            run.close()


def _time_steps(torch, run, repeats: int) -> dict[str, float]:
    """Median seconds of each step of the plan alone (where the time of a backward goes)."""
    run.launch()   # binds and packs every step
    out = {}
    for index, (step, prepared) in enumerate(zip(run.bundle.steps, run._prepared)):
        label = step["buffer"] if step["op"] == "zero" else step["kernel"].rsplit("_", 2)[-2] + "_" + \
            step["kernel"].rsplit("_", 1)[-1]
        out[f"{index}:{step['op']}:{label}"] = _time(torch, prepared, repeats)
    return out


def _check(row: Row, bundle, tensors) -> dict:
    """The gate on a slice (batch 0, the first kv head and its query heads) against the float64 oracle,
    and the largest difference from torch's flash gradients relative to their largest value."""
    import torch

    from fmha_mlir import oracle
    from fmha_mlir.tolerance import check_gradients

    g = row.heads_q // row.heads_kv
    cut = {"q": (0, slice(0, g)), "k": (0, slice(0, 1)), "v": (0, slice(0, 1)), "o": (0, slice(0, g)),
           "do": (0, slice(0, g)), "lse": (0, slice(0, g)), "dq": (0, slice(0, g)), "dk": (0, slice(0, 1)),
           "dv": (0, slice(0, 1))}
    host = {n: tensors[n][cut[n]].unsqueeze(0).float().cpu().numpy().astype(np.float64) for n in cut}
    spec = bundle.spec
    bias = None   # dbias sums over the batch: the gate on it is the variant matrix's (tools/gpu_matrix.py)
    if row.bias == "elementwise":
        bias = tensors["bias"][:, :g].float().cpu().numpy().astype(np.float64)
    elif row.bias == "alibi":
        bias = oracle.alibi_bias(oracle.alibi_slopes(row.heads_q)[:g].astype(np.float32), row.seqlen, row.seqlen)
    args = dict(mask=spec.mask, scale=spec.scale, gqa_ratio=g, softcap=spec.softcap, bias=bias)
    exact = oracle.backward(*(host[n] for n in ("q", "k", "v", "o", "do", "lse")), **args)
    lowp = oracle.lowp_backward(*(host[n] for n in ("q", "k", "v", "o", "do", "lse")), dtype=spec.dtype,
                                numerics=bundle.numerics, **args)
    checks = check_gradients({n: host[n] for n in ("dq", "dk", "dv")}, exact, lowp, spec.dtype, spec.hdim_q)
    gate = {c.name: {"ratio": c.ratio, "passed": c.passed} for c in checks}
    if row.score_features:   # torch's flash backward has no softcap or bias to compare with
        return {"gate": gate, "vs_torch_flash": None}
    q, k, v, do = (tensors[n].detach().requires_grad_() for n in ("q", "k", "v", "do"))
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.FLASH_ATTENTION]):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=row.causal,
                                                              enable_gqa=row.heads_q != row.heads_kv)
        ref = torch.autograd.grad(out, (q, k, v), do)
    vs_torch = {n: float((tensors[n].float() - r.float()).abs().max() / r.float().abs().max())
                for n, r in zip(("dq", "dk", "dv"), ref)}
    return {"gate": gate, "vs_torch_flash": vs_torch}


def run(directory: Path, report: Path, repeats: int, sweep: bool, rows: list[Row], flex: bool) -> int:
    import torch

    from fmha_mlir.runtime.executor import get_executor

    device = get_executor("cuda")
    results, failures = [], 0
    for row in rows:
        sets = [_inputs(torch, row, seed) for seed in range(3)]
        entry = {"row": row.label, "flops": row.flops, "ours": {}, "peers": {}}
        for config in row_configs(row, sweep):
            path = bundle_dir(directory, row, config)
            if not path.is_dir():
                continue
            bundle = load_bundle(directory, row.spec, ARCH, config)
            count = repeats if config.body == "tiled" else 2
            if config.body == "warp" and row.seqlen * row.heads_q * row.batch > 16 * 2048 * 4:
                continue  # the scalar body would take minutes here: it is timed on the smaller rows only
            seconds, grads, steps = _ours(torch, bundle, device, row, sets[:1] if config.body == "warp" else sets, count)
            check = _check(row, bundle, grads) if config == row_configs(row, False)[0] else None
            if check and not all(c["passed"] for c in check["gate"].values()):
                failures += 1
            entry["ours"][config.tag] = {"seconds": seconds, "tflops": row.flops / seconds / 1e12, "check": check,
                                         "body": config.body, "steps": steps}
            del grads
        for backend in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION") if not row.score_features else ():
            seconds, why = _torch_backend(torch, row, backend, sets, repeats)
            entry["peers"][backend] = {"seconds": seconds, "tflops": row.flops / seconds / 1e12 if seconds else None,
                                       "why": why}
        if flex and not row.score_features:
            seconds, why = _flex(torch, row, sets, repeats)
            entry["peers"]["FLEX"] = {"seconds": seconds, "tflops": row.flops / seconds / 1e12 if seconds else None,
                                      "why": why}
        results.append(entry)
        print(_line(entry), flush=True)
        _write(report, results, torch)  # after every row: a run cut short keeps what it measured
        del sets
        torch.cuda.empty_cache()
    return 1 if failures else 0


def once(directory: Path, row: Row, tag: str) -> int:
    """Two backwards of one bundle (the second is the one to profile: module load and JIT are done)."""
    import torch

    from fmha_mlir.runtime.executor import get_executor

    config = next((c for c in row_configs(row, True) if c.tag == tag), row_configs(row, False)[0])
    bundle = load_bundle(directory, row.spec, ARCH, config)
    _ours(torch, bundle, get_executor("cuda"), row, [_inputs(torch, row, 0)], 1)
    print(f"{row.label} {config.tag}: done")
    return 0


def _line(entry: dict) -> str:
    ours = " ".join(f"{tag}={v['tflops']:.1f} [" + " ".join(f"{k.split(':')[-1]}={1e6 * t:.0f}us"
                                                         for k, t in v["steps"].items()) + "]"
                    for tag, v in entry["ours"].items())
    peers = " ".join(f"{name}={v['tflops']:.1f}" if v["tflops"] else f"{name}=n/a"
                     for name, v in entry["peers"].items())
    return f"{entry['row']}: ours {ours} | {peers}"


def _write(report: Path, results: list[dict], torch) -> None:
    props = torch.cuda.get_device_properties(0)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    lines = [f"# Attention backward on {props.name} ({platform.node()})", "",
             f"Driver {driver}, torch {torch.__version__} (CUDA {torch.version.cuda}), cuDNN "
             f"{torch.backends.cudnn.version()}, Python {platform.python_version()}. TFLOP/s = 2.5 x 4 B Hq S S D "
             "/ time (halved for causal); median of CUDA-event timings, 3 input sets rotated (torch.Generator seeds 0, 1, 2 on the GPU; the gate check uses seed 0).", "",
             "| row | ours (tiled) | ours (warp) | flash | cuDNN | mem-efficient | flex | ours / flash | ours / cuDNN | gate (dQ dK dV ratio) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for entry in results:
        tiled = [v for v in entry["ours"].values() if v["body"] == "tiled"]
        best = max(tiled, key=lambda v: v["tflops"]) if tiled else None
        default = tiled[0] if tiled else None
        warp = next((v for v in entry["ours"].values() if v["body"] == "warp"), None)
        peer = lambda name: entry["peers"].get(name, {}).get("tflops")  # noqa: E731
        cell = lambda x: f"{x:.1f}" if x else "n/a"  # noqa: E731
        flash, cudnn = peer("FLASH_ATTENTION"), peer("CUDNN_ATTENTION")
        ratio = lambda other: f"{default['tflops'] / other:.2f}x" if default and other else "n/a"  # noqa: E731
        gate = default["check"]["gate"] if default and default["check"] else {}
        gate_cell = " ".join(f"{gate[g]['ratio']:.2f}" for g in ("dq", "dk", "dv")) if gate else "n/a"
        lines.append(f"| {entry['row']} | {cell(default['tflops'] if default else None)} | "
                     f"{cell(warp['tflops'] if warp else None)} | {cell(flash)} | {cell(cudnn)} | "
                     f"{cell(peer('EFFICIENT_ATTENTION'))} | {cell(peer('FLEX'))} | {ratio(flash)} | {ratio(cudnn)} | "
                     f"{gate_cell} |")
        if best is not default and best:
            lines.append(f"|  (best swept config: {best['tflops']:.1f}) | | | | | | | | | |")
    write_report_files(report, lines, results)


def main(argv=None) -> int:
    p = build_run_parser(__doc__, "bench_report.md", ("build", "run", "once"),
                         "once: one backward of the first matching row with config --tag (for a profiler)")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--sweep", action="store_true", help="also the candidate configs of SWEEP")
    p.add_argument("--rows", default="", help="only rows whose label contains this text")
    p.add_argument("--flex", action="store_true", help="also FlexAttention (torch.compile: slow to start)")
    p.add_argument("--ptxas", help="build: ptxas of a CUDA toolkit, for cubins and register counts")
    p.add_argument("--tag", default="", help="once: the config tag (default: the body's table entry)")
    p.add_argument("--softcap", type=float, default=0.0, help="also each row with this softcap (its speed cost)")
    p.add_argument("--deterministic", action="store_true", help="also each row in deterministic mode (its cost)")
    p.add_argument("--grad-accum", choices=("bf16",), help="also each bf16 row with bf16 dQ atomics (their gain)")
    p.add_argument("--bias", nargs="*", default=[], choices=BIAS_VARIANTS,
                   help="also each row with each of these biases (their speed cost)")
    args = p.parse_args(argv)
    rows = [r for r in ROWS if args.rows in r.label]
    if args.softcap:
        rows = [v for r in rows for v in (r, dataclasses.replace(r, softcap=args.softcap))]
    if args.bias:
        rows = [v for r in rows for v in (r, *(dataclasses.replace(r, **BIAS_VARIANTS[b]) for b in args.bias))]
    if args.deterministic:
        rows = [v for r in rows for v in (r, dataclasses.replace(r, deterministic=True))]
    if args.grad_accum:   # packed bf16 atomics add into a bf16 dQ: the bf16 rows only
        rows = [v for r in rows for v in (r, *([dataclasses.replace(r, grad_accum=args.grad_accum)]
                                               if r.dtype == "bf16" and not r.deterministic else []))]
    if args.action == "build":
        build(args.directory, args.sweep, args.ptxas, rows)
        return 0
    if args.action == "once":
        return once(args.directory, rows[0], args.tag)
    return run(args.directory, args.report, args.repeats, args.sweep, rows, args.flex)


if __name__ == "__main__":
    sys.exit(main())
