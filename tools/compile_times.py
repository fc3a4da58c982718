"""Compile time per variant, and per kernel-config table row the static facts of the code it emits.

    python tools/compile_times.py [--ptxas PATH] [--report FILE]
    python tools/compile_times.py --rows [--ptxas PATH] [--report FILE]

Each variant is compiled in a fresh Compiler (no cache), after one warm-up compile that loads the
bindings and the LLVM backends; the figure is the median of three. The benchmark's build step
(tools/bench_bwd.py build) also records a compile time per bundle, but it runs beside whatever else
the machine is doing: this tool is the one to quote.

--rows covers every row of the tiled tables (fmha_mlir/bodies/mma_sync.py TILED_TABLE for sm_90,
AMD_TILED_TABLE for gfx942 / gfx950, wgmma.py WGMMA_TABLE for sm_90a) and the warp body on sm_90 and
AMD, bf16, without a mask and causal: compile time spec to binary (a cubin with --ptxas; wall and CPU
seconds), and for the dq_dk_dv kernel on NVIDIA registers at entry (sm_90a: before setmaxnreg moves
them), spill bytes and stack frame (ptxas -v), on AMD VGPRs, AGPRs, SGPRs, scratch
bytes and the MFMAs and instructions of one iteration of the innermost loop (one step of the tiled
body; the warp body's key loop). A change to the pipeline is judged on this table
(reports/cleanup_passes.md).
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

from amd_static_report import innermost_loops   # run as a script: tools/ is on sys.path
from bench_bwd import ptxas_facts
from fmha_mlir.bodies import AMD_TILED_TABLE, TILED_TABLE
from fmha_mlir.bodies.wgmma import HOPPER_ARCH, WGMMA_TABLE
from fmha_mlir.compiler import Compiler
from fmha_mlir.kernel_config import KernelConfig
from fmha_mlir.spec import AttentionBwdSpec, Mask

VARIANTS = [AttentionBwdSpec(dtype, hdim, mask=mask, gqa_ratio=gqa)
            for dtype in ("bf16",) for hdim in (64, 128, 256)
            for mask, gqa in ((Mask("none"), 1), (Mask("causal_top_left"), 1), (Mask("none"), 4))]

ROW_MASKS = (Mask("none"), Mask("causal_top_left"))
WARP_HDIM = 128
MAIN_KERNEL = "dq_dk_dv"


def table_rows() -> list[tuple[str, str, AttentionBwdSpec, KernelConfig | None]]:
    """(arch, row label, spec, config) per table row and mask; config None: the warp body's default."""
    tables = {"sm_90": TILED_TABLE, **AMD_TILED_TABLE, HOPPER_ARCH: WGMMA_TABLE}
    rows = []
    for arch, table in tables.items():
        for hdim, config in sorted(table.items()):
            rows += [(arch, f"tiled d{hdim}", AttentionBwdSpec("bf16", hdim, mask=mask), config)
                     for mask in ROW_MASKS]
        if arch != HOPPER_ARCH:   # (sm_90a's warp body is sm_90's)
            rows += [(arch, f"warp d{WARP_HDIM}", AttentionBwdSpec("bf16", WARP_HDIM, mask=mask), None)
                     for mask in ROW_MASKS]
    return rows


def seconds(spec: AttentionBwdSpec, ptxas: str | None) -> float:
    return timed(spec, ptxas)[0]


def timed(spec: AttentionBwdSpec, ptxas: str | None, target: str = "sm_90", **compile_args):
    """(median wall seconds, median CPU seconds of this process and its children (ptxas), of three
    compiles; the last one's CompiledKernels). On a machine others share, CPU time is the one to compare."""
    walls, cpus = [], []
    for _ in range(3):
        compiler = Compiler(ptxas=ptxas)
        start, cpu = time.perf_counter(), _cpu_seconds()
        result = compiler.compile_spec(spec, target, **compile_args)
        walls.append(time.perf_counter() - start)
        cpus.append(_cpu_seconds() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def _cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def row_facts(arch: str, result, ptxas: str | None) -> str:
    """The static columns of one row's main kernel, as markdown cells."""
    name = next(k for k in result.kernel_names if k.endswith(MAIN_KERNEL))
    if arch.startswith("sm_"):
        k = ptxas_facts(result.isa, ptxas, arch)[name] if ptxas else {}
        return (f"{k.get('registers', 'n/a')} | {k.get('spill_bytes', 'n/a')} | {k.get('stack_bytes', 'n/a')} | "
                f"{len(result.isa.splitlines())} PTX lines")
    from fmha_mlir.runtime.hsaco_metadata import read_hsaco_metadata

    k = read_hsaco_metadata(result.binary)["kernels"][name]
    loops = "; ".join(f"{lp.mfma} / {lp.instructions}" for lp in innermost_loops(result.isa, name)) or "no loop"
    return (f"{k['vgpr_count']} + {k['agpr_count']} | {k['sgpr_count']} | {k['private_segment_fixed_size']} | "
            f"MFMA / all per iteration: {loops}")


def rows_table(ptxas: str | None) -> list[str]:
    lines = ["| arch | row | mask | compile wall s | compile CPU s | NVIDIA: registers / AMD: VGPR + AGPR | "
             "NVIDIA: spill B / AMD: SGPR | NVIDIA: stack B / AMD: scratch B | code |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for arch, label, spec, config in table_rows():
        compile_args = {"body": "warp"} if config is None else {"config": config}
        wall, cpu, result = timed(spec, ptxas if arch.startswith("sm_") else None, arch, **compile_args)
        lines.append(f"| {arch} | {label} | {spec.mask.kind} | {wall:.2f} | {cpu:.2f} | "
                     f"{row_facts(arch, result, ptxas)} |")
        print(lines[-1], flush=True)
    return lines


def variants_table(ptxas: str | None) -> list[str]:
    lines = ["| variant | spec to PTX, s | spec to cubin, s |", "| --- | --- | --- |"]
    for spec in VARIANTS:
        ptx = seconds(spec, None)
        cubin = f"{seconds(spec, ptxas):.2f}" if ptxas else "n/a"
        lines.append(f"| {spec.kernel_prefix} | {ptx:.2f} | {cubin} |")
        print(lines[-1], flush=True)
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ptxas", help="also to a cubin with this ptxas (of a CUDA toolkit); --rows: ptxas -v facts")
    p.add_argument("--rows", action="store_true", help="every table row: compile time and the main kernel's "
                                                       "registers, spills, scratch and MFMAs per step")
    p.add_argument("--report", type=Path, help="write the table (markdown) here")
    args = p.parse_args(argv)
    Compiler().compile_spec(VARIANTS[0], "sm_90")   # warm-up: bindings, backends
    lines = rows_table(args.ptxas) if args.rows else variants_table(args.ptxas)
    if args.report:
        title = ("Compile time (spec to binary; wall and CPU seconds, median of 3, fresh Compiler each) and the "
                 "dq_dk_dv kernel's static facts per table row" if args.rows else
                 "Compile time per tiled variant (sm_90), median of 3, fresh Compiler each")
        flags = " --rows" if args.rows else ""
        args.report.write_text(f"# {title}\n\nCommand: `python tools/compile_times.py{flags} --ptxas "
                               f"/usr/local/cuda-13.0/bin/ptxas --report {args.report}`\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
