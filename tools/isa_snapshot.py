"""A fingerprint of the code the compiler emits: the sha256 of the PTX (sm_90, sm_90a) or AMD ISA (gfx942,
gfx950) text of every kernel-config table row and a spread of features, to prove that a refactoring
changes no instruction.

    python tools/isa_snapshot.py snapshot FILE [--only SUBSTRING]   # write {variant: sha256} as JSON
    python tools/isa_snapshot.py compare FILE [--only SUBSTRING]    # compile again; exit 1 on a difference
    python tools/isa_snapshot.py list                               # the variant names
    python tools/isa_snapshot.py dump VARIANT DIR                   # its ISA and IR stages, to diff

Typical use: `snapshot /tmp/before.json` on the commit before a change (a worktree of it, or `git stash`),
then `compare /tmp/before.json` after each step; where a variant differs, `dump` it on both sides and diff
the kernel and llvm stages to find the first change. The snapshot file is a local artefact, not a record to
commit: it depends on the LLVM / MLIR build.

Variants (names read target/body/row/feature):
- every row of the tiled tables (fmha_mlir.bodies.TILED_TABLE for sm_90, tiled_table("sm_90a") with its
  wgmma rows, AMD_TILED_TABLE for gfx942 and gfx950) with its own table config, bf16, without a mask and causal;
- per target, features on the d128 row (gfx950: d128, gfx942: d128): every mask kind (and windows with an
  unbounded side), softcap, ALiBi (standard and slopes, with d(slopes)), an elementwise bias with dbias,
  GQA, varlen, deterministic, bf16 dQ atomics, f16, hdim_q != hdim_v;
- head dims 80 / 48, on tiles the kernel zero-pads;
- non-table configs that exercise other paths of the tiled body: one Q / dO buffer, P^T in registers,
  no swizzle (sm_90), P^T through shared memory and one warpgroup (sm_90a), the 32x32 MFMA shapes (AMD);
- the warp body (f32 and bf16) on every target.
A variant the compiler refuses records the refusal's first line instead of a hash, so a change in
what is accepted shows as a difference too.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from pathlib import Path

from fmha_mlir.bodies import AMD_TILED_TABLE, TILED_TABLE, tiled_table
from fmha_mlir.compiler import Compiler
from fmha_mlir.errors import SpecError
from fmha_mlir.kernel_config import KernelConfig
from fmha_mlir.spec import AttentionBwdSpec, Mask

TABLES = {"sm_90": TILED_TABLE, "sm_90a": tiled_table("sm_90a"), **AMD_TILED_TABLE}
FEATURE_HDIM = 128


def _features() -> dict[str, AttentionBwdSpec]:
    """Feature name -> spec at FEATURE_HDIM (the row its target's table takes for it)."""
    d = FEATURE_HDIM
    bf16 = dict(dtype="bf16", hdim_q=d)
    return {
        "bottom_right": AttentionBwdSpec(**bf16, mask=Mask("causal_bottom_right")),
        "window_64_0": AttentionBwdSpec(**bf16, mask=Mask("sliding_window", 64, 0)),
        "window_m1_32": AttentionBwdSpec(**bf16, mask=Mask("sliding_window", -1, 32)),
        "window_16_m1": AttentionBwdSpec(**bf16, mask=Mask("sliding_window", 16, -1)),
        "softcap": AttentionBwdSpec(**bf16, mask=Mask("causal_top_left"), softcap=30.0),
        "alibi": AttentionBwdSpec(**bf16, bias="alibi"),
        "alibi_slopes_dslopes": AttentionBwdSpec(**bf16, bias="alibi", alibi_slopes=True, dbias=True),
        "bias_dbias": AttentionBwdSpec(**bf16, bias="elementwise", dbias=True, mask=Mask("causal_top_left")),
        "gqa4": AttentionBwdSpec(**bf16, gqa_ratio=4, mask=Mask("sliding_window", 32, 32)),
        "varlen": AttentionBwdSpec(**bf16, varlen=True, mask=Mask("causal_bottom_right")),
        "deterministic": AttentionBwdSpec(**bf16, deterministic=True, mask=Mask("causal_top_left")),
        "grad_accum_bf16": AttentionBwdSpec(**bf16, grad_accum="bf16"),
        "grad_accum_bf16_causal": AttentionBwdSpec(**bf16, grad_accum="bf16", mask=Mask("causal_top_left")),
        "f16": AttentionBwdSpec("f16", d, mask=Mask("causal_top_left")),
        "hdim_128x64": AttentionBwdSpec("bf16", d, 64, mask=Mask("causal_top_left")),
        "hdim_64x128_dbias": AttentionBwdSpec("bf16", 64, 128, bias="elementwise", dbias=True),
        "scale_softcap_alibi": AttentionBwdSpec(**bf16, scale=0.3, softcap=15.0, bias="alibi", alibi_slopes=True,
                                                mask=Mask("sliding_window", 48, 16)),
    }


def _other_configs(arch: str) -> dict[str, KernelConfig]:
    """Non-table configs of the d64 row: the paths the table rows leave out."""
    row = TABLES[arch][64]
    if arch == "sm_90":
        return {"stages1": dataclasses.replace(row, stages=1),
                "p_in_registers": dataclasses.replace(row, sdp_warps=(8, 1), dkv_warps=(8, 1), p_in_registers=True),
                "no_swizzle": dataclasses.replace(row, swizzle="none")}
    if arch == "sm_90a":   # the wgmma body: P^T and dS^T through shared memory, one buffer, one warpgroup
        return {"p_in_shared_stages1": dataclasses.replace(row, p_in_registers=False, stages=1),
                "one_warpgroup": dataclasses.replace(row, block_m=64, block_n=64, warps=4, sdp_warps=(1, 1),
                                                     dkv_warps=(1, 1), dq_warps=(1, 1))}
    return {"mfma_32x32x8": dataclasses.replace(row, instruction="mfma.32x32x8", block_m=64, block_n=64,
                                                sdp_warps=(2, 2), dkv_warps=(2, 2), dq_warps=(2, 2), warps=4),
            "no_pad": dataclasses.replace(row, swizzle="none")} | (
        {"mfma_32x32x16": dataclasses.replace(row, instruction="mfma.32x32x16", block_m=64, block_n=64,
                                              sdp_warps=(2, 2), dkv_warps=(2, 2), dq_warps=(2, 2), warps=4)}
        if arch == "gfx950" else {})


def variants() -> dict[str, tuple[str, AttentionBwdSpec, dict]]:
    """name -> (target, spec, compile_spec keyword arguments)."""
    out = {}
    for arch, table in TABLES.items():
        for hdim, config in sorted(table.items()):
            for mask in ("none", "causal_top_left"):
                out[f"{arch}/tiled/d{hdim}/{mask}"] = (arch, AttentionBwdSpec("bf16", hdim, mask=Mask(mask)),
                                                       {"config": config})
        for feature, spec in _features().items():
            out[f"{arch}/tiled/d{FEATURE_HDIM}/{feature}"] = (arch, spec, {"body": "tiled"})
        # Head dims on tiles zero-padded inside the kernel (bodies.tile_hdims), each on its own.
        out[f"{arch}/tiled/d80x48/padded"] = (arch, AttentionBwdSpec("bf16", 80, hdim_v=48), {"body": "tiled"})
        if arch == "sm_90a":   # the d128 wgmma row on 128 / 64-column tiles (the table keeps d80 on mma.sync)
            out[f"{arch}/tiled/d80x48/padded_wgmma"] = (arch, AttentionBwdSpec("bf16", 80, hdim_v=48),
                                                        {"config": TABLES[arch][128]})
        for name, config in _other_configs(arch).items():
            for label, spec in (("none", AttentionBwdSpec("bf16", 64)),
                                ("causal_top_left", AttentionBwdSpec("bf16", 64, mask=Mask("causal_top_left"))),
                                ("softcap_dbias", AttentionBwdSpec("bf16", 64, softcap=20.0, bias="elementwise",
                                                                   dbias=True, mask=Mask("causal_bottom_right")))):
                out[f"{arch}/tiled/d64/{name}/{label}"] = (arch, spec, {"config": config})
        for dtype in ("f32", "bf16"):
            out[f"{arch}/warp/d128/{dtype}"] = (arch, AttentionBwdSpec(dtype, 128, mask=Mask("causal_top_left")),
                                                {"body": "warp"})
    return out


def fingerprint(arch: str, spec: AttentionBwdSpec, kwargs: dict) -> str:
    """sha256 of the ISA text, or 'refused: <first reason>'."""
    try:
        result = Compiler().compile_spec(spec, arch, **kwargs)
    except SpecError as exc:
        return "refused: " + str(exc).splitlines()[0]
    return hashlib.sha256(result.isa.encode()).hexdigest()


def dump(name: str, directory: Path) -> None:
    """The variant's ISA text and every IR stage's module, one file each."""
    arch, spec, kwargs = variants()[name]
    result = Compiler().compile_spec(spec, arch, **kwargs)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / result.isa_file).write_text(result.isa)
    for stage in result.stages:
        (directory / f"{stage}.mlir").write_text(result.stages[stage])


def compute(only: str | None) -> dict[str, str]:
    out = {}
    for name, (arch, spec, kwargs) in variants().items():
        if only and only not in name:
            continue
        out[name] = fingerprint(arch, spec, kwargs)
        print(f"{out[name][:16]}  {name}", file=sys.stderr, flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for command in ("snapshot", "compare"):
        c = sub.add_parser(command)
        c.add_argument("file", type=Path)
        c.add_argument("--only", help="only the variants whose name contains this")
    sub.add_parser("list")
    d = sub.add_parser("dump")
    d.add_argument("variant", choices=list(variants()), metavar="VARIANT")
    d.add_argument("directory", type=Path)
    args = p.parse_args(argv)
    if args.command == "list":
        print("\n".join(variants()))
        return 0
    if args.command == "dump":
        dump(args.variant, args.directory)
        return 0
    if args.command == "snapshot":
        args.file.write_text(json.dumps(compute(args.only), indent=1, sort_keys=True) + "\n")
        return 0
    before = json.loads(args.file.read_text())
    now = compute(args.only)
    differ = [n for n in now if before.get(n) != now[n]]
    missing = [n for n in now if n not in before]
    for name in differ:
        print(f"DIFFERS  {name}: {before.get(name, 'absent')[:16]} -> {now[name][:16]}")
    print(f"{len(now) - len(differ)} of {len(now)} variants identical" +
          (f" ({len(missing)} not in {args.file})" if missing else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
