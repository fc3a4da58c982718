"""The device memory a backward allocates besides its inputs and outputs (its workspaces), per benchmark row
of tools/bench_bwd.py, without and with deterministic mode: read from the body plans the op would run
(fmha_mlir.bodies.body_plan, sizes evaluated at the row's shape), so exact, and needing neither MLIR nor
a GPU.

    python tools/workspace_bytes.py [--arch sm_90a] [--report reports/workspace_bytes.md]

Deterministic mode's dQ is where the modes differ: partials, one per key block (ceil(Sk / block_n) times
dQ's f32 size), or, on the rows whose writer warp takes turns (bodies.dq_in_turns), one accumulator and
a semaphore per query block.
"""
from __future__ import annotations

import dataclasses
import sys
from math import prod
from pathlib import Path

from fmha_mlir.bodies import body_plan, choose_config, dq_in_turns
from fmha_mlir.dtypes import BUFFER_STORAGE
from fmha_mlir.errors import SpecError
from fmha_mlir.shape_expr import evaluate
from fmha_mlir.target import get_target
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/: the modules the tools share
from bench_bwd import ROWS  # noqa: E402
from build_run import write_report_files  # noqa: E402

MB = 1e6


def shapes_of(row) -> dict[str, tuple[int, ...]]:
    """The problem operands' shapes a plan's sizes refer to, for a bench row's spec."""
    spec = row.spec
    heads_kv = row.heads_q // spec.gqa_ratio
    q = (row.batch, row.heads_q, row.seqlen, spec.hdim_q)
    k = (row.batch, heads_kv, row.seqlen, spec.hdim_q)
    v = (row.batch, heads_kv, row.seqlen, spec.hdim_v)
    o = (row.batch, row.heads_q, row.seqlen, spec.hdim_v)
    return {"q": q, "dq": q, "k": k, "dk": k, "v": v, "dv": v, "o": o, "do": o, "lse": q[:3]}


def workspace_bytes(spec, arch: str, shapes) -> tuple[int | None, object]:
    """(bytes of every workspace of the plan the op runs for `spec` on `arch`, that plan's config); (None,
    None) where every body refuses the spec there (gfx942 at d256 in deterministic mode)."""
    try:
        config = choose_config(spec, get_target(arch))
    except SpecError:
        return None, None
    plan = body_plan(spec, config)
    total = sum(prod(evaluate(d, shapes, f"workspace {w.name}") for d in w.dims) * BUFFER_STORAGE[w.element].itemsize
                for w in plan.workspaces)
    return total, config


def report(arch: str) -> tuple[list[str], list[dict]]:
    rows = []
    for row in (r for r in ROWS if r.dtype == "bf16"):
        shapes = shapes_of(row)
        default, _ = workspace_bytes(row.spec, arch, shapes)
        deterministic_spec = dataclasses.replace(row.spec, deterministic=True)
        deterministic, config = workspace_bytes(deterministic_spec, arch, shapes)
        gradients = sum(prod(shapes[g]) for g in ("dq", "dk", "dv")) * BUFFER_STORAGE[row.dtype].itemsize
        rows.append({"row": row.label, "default_bytes": default, "deterministic_bytes": deterministic,
                     "gradients_bytes": gradients,
                     "turns": config is not None and dq_in_turns(deterministic_spec, config)})
    lines = [f"# Workspace memory of the backward on {arch}, bf16", "",
             f"`python tools/workspace_bytes.py --arch {arch}`: the workspaces (MB, 10^6 bytes) of the plan the "
             "op runs for each benchmark row, without and with deterministic mode, from the body plans at the "
             "row's shape (exact; nothing runs). For scale: the gradients dQ, dK, dV themselves. Deterministic "
             "dQ by turns (one accumulator, a semaphore per query block) or by partials (one per key block).", "",
             "| row | default | deterministic | deterministic dQ | gradients |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['row']} | {_mb(r['default_bytes'])} | {_mb(r['deterministic_bytes'])} | "
              f"{'refused' if r['deterministic_bytes'] is None else 'turns' if r['turns'] else 'partials'} | "
              f"{_mb(r['gradients_bytes'])} |" for r in rows]
    return lines, rows


def _mb(count: int | None) -> str:
    return "refused" if count is None else f"{count / MB:.0f}"


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--report", type=Path, help="write the table here (and its .json); default: print it")
    args = p.parse_args(argv)
    lines, rows = report(args.arch)
    if args.report:
        write_report_files(args.report, lines, rows)
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
