"""The sanitizer report: per kernel variant and tool, clean / N errors / timeout / ..., what the plan covers
and what it does not, the commands and the device; Markdown to read, JSON (the rows) for --resume."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from build_run import write_report_files   # run as a script: tools/ is on sys.path
from sanitize_plan import SIZES, VARLEN_HEADS, VARLEN_LENGTHS, Skipped, Variant


@dataclass(frozen=True)
class Header:
    arch: str
    device: str              # the GPU and driver, in words
    sanitizer: str           # compute-sanitizer's version line
    commands: tuple[str, ...]  # how the bundles were built and this report made
    children: tuple[str, ...]  # a child's command per tool, BUNDLE for the bundle's folder
    tools: tuple[str, ...]
    seconds: float
    earlier: int = 0         # rows taken over from an earlier run (--resume)


def cell(row: dict) -> str:
    status = row["status"]
    text = {"clean": "clean", "timeout": f"timeout ({row['seconds']:.0f} s)", "gate_fail": "gate FAIL",
            "errors": f"**{row['errors']} error{'s' * (row['errors'] != 1)}**",
            "failed": f"**failed** (exit {row['exit']})"}[status]
    warnings = row["warnings"]
    return text + (f", {warnings} warning{'s' * (warnings != 1)}" if warnings else "")


def write_report(path: Path, header: Header, variants: list[Variant], skipped: list[Skipped], rows: list[dict]) -> None:
    by_cell = {(r["variant"], r["tool"]): r for r in rows}
    planned = len(variants) * len(header.tools)
    counts = defaultdict(int)
    for r in rows:
        counts[r["status"]] += 1
    partial = ("" if len(rows) >= planned
               else f" (**incomplete: {len(rows)} of {planned} planned runs**; `--resume` does the rest)")
    lines = [f"# compute-sanitizer on every {header.arch} kernel variant", "",
             f"Device: {header.device}; {header.sanitizer}. {len(variants)} variants x {len(header.tools)} tools "
             f"({', '.join(header.tools)}): {len(rows)} runs{partial}, {len(rows) - header.earlier} in "
             f"{header.seconds:.0f} s" + (f", {header.earlier} from an earlier run" if header.earlier else "") + "; "
             + ", ".join(f"{counts[s]} {s}" for s in ("clean", "errors", "gate_fail", "failed", "timeout")) + ".", "",
             "Each run is one child process under `compute-sanitizer --tool T --error-exitcode 99` (racecheck with "
             "`--racecheck-report all`, memcheck with `--leak-check full`): it loads the bundle, runs it once on each "
             "problem below and puts every gradient to the gate (fmha_mlir.tolerance) against the float64 oracle. "
             "*clean*: the tool's summary says 0 errors, the child exited 0 and printed a PASS gate line per problem "
             "(a child that dies can still end in a summary of 0 hazards).", "",
             "Problems per bundle: "
             + "; ".join(f"B{s.batch} Hq{s.heads_q} Sq{s.seqlen_q} Sk{s.seqlen_k}" for s in SIZES)
             + f" (BHSD, then BSHD); varlen: Hq{VARLEN_HEADS}, Sq {list(VARLEN_LENGTHS[0])}, "
             f"Sk {list(VARLEN_LENGTHS[1])}.",
             "", "## Commands", "", "```bash", *header.commands, "# each run, per tool (BUNDLE: DIR/ARCH/<variant>):",
             *header.children, "```", ""]
    lines += _coverage(variants, skipped)
    lines += ["## Results", "", f"| variant | body | dtype | mask | feature | {' | '.join(header.tools)} | gate |",
              "| --- " * (6 + len(header.tools)) + "|"]
    for v in variants:
        got = [by_cell.get((v.name, t)) for t in header.tools]
        gates = next((r["gates"] for r in got if r and r["gates"]), [])
        gate = " / ".join(g.rsplit(": ", 1)[-1].replace(" of the bound", "") for g in gates) or "-"
        lines.append(f"| {v.name} | {v.body} | {v.spec.dtype} | {v.spec.mask} | {v.feature} | "
                     + " | ".join(cell(r) if r else "not run" for r in got) + f" | {gate} |")
    lines += _findings(rows)
    write_report_files(path, lines, rows)


def _coverage(variants: list[Variant], skipped: list[Skipped]) -> list[str]:
    masks = defaultdict(set)
    for v in variants:
        masks[(v.body, v.spec.dtype, v.feature)].add(str(v.spec.mask))
    lines = ["## What the variants cover", "", "Each feature on the base spec (hdim 64, no GQA), with every mask kind "
             "that is listed; the body layer decides which body takes what.", "",
             "| body | dtype | features (masks) |", "| --- | --- | --- |"]
    for body, dtype in dict.fromkeys((v.body, v.spec.dtype) for v in variants):
        features = [f"{f} ({len(m)})" for (b, d, f), m in masks.items() if (b, d) == (body, dtype)]
        lines.append(f"| {body} | {dtype} | {', '.join(features)} |")
    refused = defaultdict(list)
    for s in skipped:
        refused[(s.body, s.reason)].append(f"{s.dtype} {s.feature}")
    lines += ["", "Not covered: what the bodies refuse (so no kernel of it exists), and the combinations left out: "
              "features crossed with each other (softcap with a bias, GQA with varlen, ...), head dims other "
              "than 64, 128 and 256, hdim_q != hdim_v other than 64 / 128, other window sizes, large shapes (grids "
              "of many blocks).", ""]
    lines += [f"- {body}: {', '.join(what)}: {reason}" for (body, reason), what in refused.items()]
    return lines + [""]


def _findings(rows: list[dict]) -> list[str]:
    bad = [r for r in rows if r["status"] != "clean"]
    if not bad:
        return []
    lines = ["", "## Findings", ""]
    for r in bad:
        lines += [f"### {r['variant']}, {r['tool']}: {cell(r)}", "", f"`{r['command']}`", "", "```",
                  *(r["first_lines"] or r["tail"]), "```", ""]
    return lines
