"""A static report of the AMD kernels the compiler emits, from the code object and its ISA (no GPU).

    python tools/amd_static_report.py [--arch gfx942 gfx950] [--report FILE]
    fmha-compile ... --emit isa | python tools/amd_static_report.py --loops -   (per kernel, for lit)

No AMD GPU is lent to this project, so what the hardware would do is read from what the compiler
produced: per variant (the variant matrix, body auto) and kernel, the code object's VGPR, AGPR and
SGPR counts, scratch and LDS bytes (static plus the launch plan's dynamic), the occupancy those
imply by AMD's rules, and for the ISA's innermost loops the instructions per iteration: all of them,
MFMA, global / buffer memory, LDS and s_waitcnt.

Occupancy (CDNA3 ISA guide, "Register and LDS limits"; gfx90a and later have one VGPR file shared by
architectural and accumulation registers): a SIMD holds 512 VGPRs per lane for wave64 and at most 8
waves; a kernel allocates align(VGPR, 4) + AGPR registers in granules of 8, so waves per SIMD =
min(8, 512 // allocated). A CU has 4 SIMDs and 64 KB (gfx942) or 160 KB (gfx950) of LDS: work-groups
per CU by LDS = LDS_CU // LDS per work-group, i.e. waves per SIMD = that x waves per work-group / 4.
SGPRs are not modelled (each wave's are its own on CDNA3 up to 102).

For the tiled (MFMA) variants a second table adds what the tile implies: per work-group and step of
the inner loop (one query block against the key block) the FLOPs (2 bm bn (3 hdim_q + 2 hdim_v): S^T,
dP^T, dV, dK, dQ) and the bytes it moves to or from memory (Q and dO rows, LSE and D, the dQ partials
as 4-byte atomics; K and V are read once per work-group and left out), their ratio, and the roofline
that ratio allows on the chip's part (min(peak, intensity x bandwidth), assuming no L2 reuse of Q and
dO across key blocks), next to aiter's published bwd d128 bf16 figures (shared/anchors: b1, 32/8 heads,
s 8192; a16 = bf16 dQ atomics, a32 = fp32 dQ atomics as here). Peaks as AMD publishes them: MI300X
1307 TFLOP/s dense bf16 and 5.3 TB/s; MI355X 2517 TFLOP/s and 8 TB/s.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

MAX_WAVES_PER_SIMD = 8
VGPRS_PER_SIMD_LANE = 512
VGPR_GRANULE = 8
SIMDS_PER_CU = 4
LDS_PER_CU = {"gfx942": 64 * 1024, "gfx950": 160 * 1024}


@dataclass(frozen=True)
class Part:
    name: str
    peak_tflops: float      # dense bf16 / f16
    bandwidth_tbs: float
    aiter_a16: float        # aiter asm bwd TFLOP/s, d128 bf16, b1 32/8 heads s8192: bf16 dQ atomics
    aiter_a32: float        # the same with fp32 dQ atomics (as this body)


PARTS = {"gfx942": Part("MI300X", 1307.0, 5.3, 524.0, 481.0), "gfx950": Part("MI355X", 2517.0, 8.0, 1183.0, 818.0)}

_BRANCH = re.compile(r"^\s*s_(?:cbranch_\w+|branch)\s+(\.\w+)")
_LABEL = re.compile(r"^(\.?\w+):")


def allocated_vgprs(vgpr: int, agpr: int) -> int:
    """Registers of the unified file a wave takes: align(VGPR, 4) + AGPR, rounded up to the granule."""
    total = -(-vgpr // 4) * 4 + agpr
    return max(VGPR_GRANULE, -(-total // VGPR_GRANULE) * VGPR_GRANULE)


def waves_per_simd(vgpr: int, agpr: int, lds_bytes: int, waves_per_group: int, arch: str) -> tuple[int, str]:
    """(waves per SIMD, the limit that sets it: registers, lds or the hardware maximum)."""
    limits = {"max": MAX_WAVES_PER_SIMD, "registers": VGPRS_PER_SIMD_LANE // allocated_vgprs(vgpr, agpr)}
    if lds_bytes:
        groups = LDS_PER_CU[arch] // lds_bytes
        limits["lds"] = groups * waves_per_group // SIMDS_PER_CU
    limit = min(limits, key=lambda k: (limits[k], k != "max"))
    return limits[limit], limit


@dataclass(frozen=True)
class Loop:
    """One loop of the ISA: the lines from its header label to the backward branch that closes it."""

    label: str
    instructions: int
    mfma: int
    global_memory: int
    lds: int
    waitcnt: int


def innermost_loops(isa: str, kernel: str) -> list[Loop]:
    """The loops of `kernel`'s function in the assembly that contain no other loop."""
    lines = _function_lines(isa, kernel)
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := _LABEL.match(line))}
    spans = []
    for i, line in enumerate(lines):
        m = _BRANCH.match(line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            spans.append((labels[m.group(1)], i, m.group(1)))
    inner = [s for s in spans if not any(o is not s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]
    return [_count(label, lines[start:end + 1]) for start, end, label in inner]


def _function_lines(isa: str, kernel: str) -> list[str]:
    lines = isa.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"{kernel}:")), None)
    if start is None:
        raise ValueError(f"kernel {kernel} is not in the assembly")
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(".Lfunc_end")), len(lines))
    return lines[start:end]


def _count(label: str, lines: list[str]) -> Loop:
    ops = [line.split()[0] for line in lines
           if line.strip() and not line.lstrip().startswith((".", ";")) and not _LABEL.match(line)]
    return Loop(label, len(ops), sum(op.startswith("v_mfma") for op in ops),
                sum(op.startswith(("global_", "buffer_", "flat_")) for op in ops),
                sum(op.startswith("ds_") for op in ops), sum(op == "s_waitcnt" for op in ops))


def tile_step(spec, config) -> tuple[int, int]:
    """(FLOPs, bytes to / from memory) of one work-group step of the tiled body (module docstring)."""
    bm, bn, dq, dv = config.block_m, config.block_n, spec.hdim_q, spec.hdim_v
    flops = 2 * bm * bn * (3 * dq + 2 * dv)
    element = 2
    moved = bm * (dq + dv) * element + 2 * 4 * bm + bm * dq * 4
    return flops, moved


def roofline(flops: int, moved: int, part: Part) -> float:
    """TFLOP/s the intensity allows: min(peak, FLOP/byte x TB/s)."""
    return min(part.peak_tflops, flops / moved * part.bandwidth_tbs)


def report(archs: list[str]) -> str:
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.runtime.hsaco_metadata import read_hsaco_metadata
    from fmha_mlir.variants import variant_matrix

    tiled = ["| variant | arch | tile (bm x bn, instruction, waves) | VGPR + AGPR | scratch B | LDS B | waves/SIMD "
             "(limit) | per loop iteration: MFMA / all / global+buffer / LDS / s_waitcnt | FLOP / byte per step | "
             "roofline TFLOP/s (part) | aiter d128 bf16 a16 / a32 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines = ["| variant | arch | kernel | VGPR | AGPR | SGPR | scratch B | LDS B | waves/SIMD (limit) | "
             "innermost loops: instructions / MFMA / global / LDS / s_waitcnt |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    compiler = Compiler()
    for arch in archs:
        for spec in variant_matrix():
            result = compiler.compile_spec(spec, arch)
            metadata = read_hsaco_metadata(result.binary)["kernels"]
            steps = {s["kernel"]: s for s in result.manifest["steps"] if s["op"] == "launch"}
            for name in result.kernel_names:
                k, step = metadata[name], steps[name]
                lds = k["group_segment_fixed_size"] + int(step.get("shared_bytes", 0) or 0)
                waves_per_group = -(-k["max_flat_workgroup_size"] // k["wavefront_size"])
                waves, limit = waves_per_simd(k["vgpr_count"], k["agpr_count"], lds, waves_per_group, arch)
                loops = "; ".join(f"{lp.instructions} / {lp.mfma} / {lp.global_memory} / {lp.lds} / {lp.waitcnt}"
                                  for lp in innermost_loops(result.isa, name)) or "none"
                stage = name[len(f"{spec.kernel_prefix}_{result.config.tag}_"):]
                lines.append(f"| {spec.kernel_prefix}_{result.config.tag} | {arch} | {stage} | {k['vgpr_count']} | "
                             f"{k['agpr_count']} | {k['sgpr_count']} | "
                             f"{k['private_segment_fixed_size']} | {lds} | {waves} ({limit}) | {loops} |")
                if stage == "dq_dk_dv" and result.config.body == "tiled":
                    config, part = result.config, PARTS[arch]
                    flops, moved = tile_step(spec, config)
                    tiled.append(f"| {spec.kernel_prefix}_{config.tag} | {arch} | {config.block_m} x {config.block_n}, "
                                 f"{config.instruction}, {config.warps} | {k['vgpr_count']} + {k['agpr_count']} | "
                                 f"{k['private_segment_fixed_size']} | {lds} | {waves} ({limit}) | {loops} | "
                                 f"{flops / moved:.0f} | {roofline(flops, moved, part):.0f} ({part.name}) | "
                                 f"{part.aiter_a16:.0f} / {part.aiter_a32:.0f} |")
    return ("## The tiled (MFMA) body's dq_dk_dv\n\n" + "\n".join(tiled) + "\n\n## Every kernel\n\n"
            + "\n".join(lines) + "\n")


def loops_text(isa: str) -> str:
    """Every kernel of an assembly file and its innermost loops, one line each."""
    kernels = [m.group(1) for line in isa.splitlines() if (m := re.match(r"^([A-Za-z_]\w*):", line))]
    out = []
    for kernel in kernels:
        for lp in innermost_loops(isa, kernel) or [None]:
            out.append(f"{kernel}: " + ("no loop" if lp is None else
                       f"loop {lp.label}: {lp.instructions} instructions, {lp.mfma} mfma, {lp.global_memory} "
                       f"global, {lp.lds} lds, {lp.waitcnt} s_waitcnt"))
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="+", default=["gfx942", "gfx950"])
    p.add_argument("--report", type=Path)
    p.add_argument("--loops", metavar="ISA", help="print the innermost loops of every kernel of an assembly file "
                                                 "('-': stdin) and exit")
    args = p.parse_args(argv)
    if args.loops:
        import sys
        print(loops_text(sys.stdin.read() if args.loops == "-" else Path(args.loops).read_text()), end="")
        return 0
    text = report(args.arch)
    if args.report:
        args.report.write_text("# AMD kernels, static facts from the code objects (no GPU)\n\n"
                               f"Command: `python tools/amd_static_report.py --arch {' '.join(args.arch)} "
                               f"--report {args.report}`. Rules: the tool's docstring.\n\n" + text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
