"""A static report of the AMD kernels the compiler emits, from the code object and its ISA (no GPU).

    python tools/amd_static_report.py [--arch gfx942 gfx950] [--report FILE]

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


def report(archs: list[str]) -> str:
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.runtime.hsaco_metadata import read_hsaco_metadata
    from fmha_mlir.variants import variant_matrix

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
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="+", default=["gfx942", "gfx950"])
    p.add_argument("--report", type=Path)
    args = p.parse_args(argv)
    text = report(args.arch)
    if args.report:
        args.report.write_text("# AMD kernels, static facts from the code objects (no GPU)\n\n"
                               f"Command: `python tools/amd_static_report.py --arch {' '.join(args.arch)} "
                               f"--report {args.report}`. Rules: the tool's docstring.\n\n" + text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
