"""compute-sanitizer (memcheck, racecheck, synccheck) on every kernel variant of each body: build the
bundles where MLIR is (here), run them under the sanitizer where the GPU is.

    python tools/sanitize.py build DIR --arch sm_90 [--ptxas /usr/local/cuda-13.0/bin/ptxas] [--only REGEX]
    PYTHONPATH=$PWD python3 tools/sanitize.py run DIR --tools memcheck,racecheck,synccheck --jobs 8 --report FILE
    python tools/sanitize.py run DIR --dry-run     # the commands, and the time they should take

(build needs MLIR; run needs numpy, cuda-bindings and compute-sanitizer, from PATH or /usr/local/cuda/bin.)

The variants are tools/sanitize_plan.py's: each body's dtypes x mask kinds x features. Every (variant, tool)
is one child process (tools/sanitize_child.py under the sanitizer), `--jobs` at once, the slowest kinds
first, each killed after `--timeout` seconds. The report (Markdown + JSON rows) is rewritten every few
runs, so a device call cut short keeps what it did; `--resume` runs only the rows its JSON lacks, and
`--budget S` starts no run after S seconds (the rest is left for --resume).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from build_run import build_bundles, build_run_parser, earlier_rows   # run as a script: tools/ is on sys.path
from sanitize_child import GATE_PREFIX
from sanitize_plan import Variant, plan, problem_count
from sanitize_report import Header, write_report
from sanitizer import TOOLS, judge, sanitizer_command

CHILD = Path(__file__).with_name("sanitize_child.py")
BUILD_RECORD = "sanitize_build.json"    # in DIR: how build made the bundles, for the report
SANITIZER_FALLBACK = Path("/usr/local/cuda/bin/compute-sanitizer")
REPORT_EVERY = 8
# Seconds per child, assumed before any device run measured them (the dry run prefers a report's measured
# ones): interpreter start, cuda init and module load under the tool ~3-5 s; racecheck tracks every
# shared-memory access, which only the tiled body makes many of.
ASSUMED_SECONDS = {("tiled", "memcheck"): 8, ("tiled", "racecheck"): 20, ("tiled", "synccheck"): 6,
                   ("warp", "memcheck"): 6, ("warp", "racecheck"): 6, ("warp", "synccheck"): 5}


@dataclass(frozen=True)
class RunOptions:
    directory: Path
    arch: str
    tools: tuple[str, ...]
    jobs: int
    timeout: float            # seconds per child
    report: Path
    sanitizer: str
    python: str               # the interpreter the children run
    resume: bool = False
    budget: float | None = None   # start no child after this many seconds
    only: str | None = None       # a regex on the variant names
    logs: Path | None = None      # the whole output of each run that was not clean, one file per run


def bundle_dir(options: RunOptions, variant: Variant) -> Path:
    return options.directory / options.arch / variant.name


def run_command(options: RunOptions, variant: Variant, tool: str) -> list[str]:
    return sanitizer_command(options.sanitizer, tool, [options.python, str(CHILD), str(bundle_dir(options, variant))])


def selected(options: RunOptions) -> tuple[list[Variant], list]:
    variants, skipped = plan(options.arch)
    if options.only:
        variants = [v for v in variants if re.search(options.only, v.name)]
    return variants, skipped


def todo(options: RunOptions, variants: list[Variant], rows: list[dict]) -> list[tuple[Variant, str]]:
    """The (variant, tool) runs the rows lack, the slowest kind first: the last ones to finish are short."""
    done = {(r["variant"], r["tool"]) for r in rows}
    runs = [(v, t) for v in variants for t in options.tools if (v.name, t) not in done]
    return sorted(runs, key=lambda run: -ASSUMED_SECONDS[(run[0].body, run[1])])


def run_one(options: RunOptions, variant: Variant, tool: str, deadline: float | None) -> dict | None:
    """One child under the sanitizer; its report row, or None when the budget had run out."""
    if deadline is not None and time.monotonic() > deadline:
        return None
    command, started = run_command(options, variant, tool), time.monotonic()
    # Its own session: a timeout kills the sanitizer and the child it started, and nothing else.
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = child.communicate(timeout=options.timeout)
        status = child.returncode
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        output, _ = child.communicate()
        status = None
    text = output.decode(errors="replace")
    verdict = judge(text, status, GATE_PREFIX, problem_count(variant.spec))
    if options.logs and verdict.status != "clean":
        (options.logs / f"{variant.name}.{tool}.log").write_text(text)
    return {"variant": variant.name, "body": variant.body, "dtype": variant.spec.dtype, "mask": str(variant.spec.mask),
            "feature": variant.feature, "tool": tool, "status": verdict.status, "exit": status,
            "errors": verdict.findings.errors, "warnings": verdict.findings.warnings,
            "first_lines": list(verdict.findings.first_lines), "gates": list(verdict.gates),
            "tail": list(verdict.tail), "seconds": round(time.monotonic() - started, 1),
            "command": shlex.join(command)}


def run(options: RunOptions, header: Header) -> int:
    variants, skipped = selected(options)
    missing = [v.name for v in variants if not (bundle_dir(options, v) / "manifest.json").is_file()]
    if missing:
        print(f"error: {len(missing)} of {len(variants)} bundles are missing under {options.directory / options.arch} "
              f"(first: {missing[0]}): build them with `python tools/sanitize.py build {options.directory} --arch "
              f"{options.arch}`", file=sys.stderr)
        return 2
    if options.logs:
        options.logs.mkdir(parents=True, exist_ok=True)
    rows = earlier_rows(options.report, options.resume)
    earlier, runs, started = len(rows), todo(options, variants, rows), time.monotonic()
    deadline = started + options.budget if options.budget is not None else None

    def write() -> None:
        header_now = Header(**{**header.__dict__, "seconds": time.monotonic() - started, "earlier": earlier})
        write_report(options.report, header_now, variants, skipped, rows)

    print(f"{len(runs)} runs to go ({earlier} from {options.report.with_suffix('.json')}), {options.jobs} at once",
          flush=True)
    with ThreadPoolExecutor(options.jobs) as pool:
        futures = [pool.submit(run_one, options, v, t, deadline) for v, t in runs]
        for future in as_completed(futures):
            row = future.result()
            if row is None:
                continue
            rows.append(row)
            print(f"[{len(rows) - earlier}/{len(runs)}] {row['variant']} {row['tool']}: {row['status']} "
                  f"({row['seconds']:.0f} s)", flush=True)
            if (len(rows) - earlier) % REPORT_EVERY == 0:
                write()
    write()
    clean = sum(r["status"] == "clean" for r in rows)
    planned = len(variants) * len(options.tools)
    print(f"{clean} of {planned} runs clean, {len(rows) - clean} not, {planned - len(rows)} not run; "
          f"report: {options.report}")
    return 0 if clean == planned else 1


def estimate(runs: list[tuple[Variant, str]], jobs: int, measured: list[dict]) -> tuple[float, float, dict]:
    """(child seconds in all, wall seconds with `jobs` at once, seconds per (body, tool)): measured means
    from an earlier report's rows where it has them, else ASSUMED_SECONDS."""
    sums: dict = {}
    for r in measured:
        if r["status"] != "timeout":
            total, n = sums.get((r["body"], r["tool"]), (0.0, 0))
            sums[(r["body"], r["tool"])] = (total + r["seconds"], n + 1)
    per = {**ASSUMED_SECONDS, **{key: total / n for key, (total, n) in sums.items()}}
    workers = [0.0] * jobs
    for variant, tool in runs:   # in the order they start: each to the first free worker
        workers[workers.index(min(workers))] += per[(variant.body, tool)]
    return sum(workers), max(workers, default=0.0), per


def dry_run(options: RunOptions) -> int:
    variants, _ = selected(options)
    rows = earlier_rows(options.report, options.resume)
    runs = todo(options, variants, rows)
    for variant, tool in runs:
        print(shlex.join(run_command(options, variant, tool)))
    measured = earlier_rows(options.report, True)
    total, wall, per = estimate(runs, options.jobs, measured)
    source = "measured in " + str(options.report.with_suffix(".json")) if measured else "assumed (ASSUMED_SECONDS)"
    missing = sum(not (bundle_dir(options, v) / "manifest.json").is_file() for v in variants)
    print(f"# {len(runs)} runs of {len(variants)} variants; {total:.0f} s of child time, about {wall:.0f} s "
          f"({wall / 60:.1f} min) with --jobs {options.jobs}; seconds per run {source}: "
          + ", ".join(f"{b} {t} {s:.1f}" for (b, t), s in sorted(per.items()))
          + (f"; {missing} bundles not built yet" if missing else ""))
    return 0


def build(directory: Path, arch: str, ptxas: str | None, command: str, only: str | None = None) -> None:
    variants, skipped = plan(arch)
    if only:   # as `run --only` selects: build only what that run needs
        names = [v.name for v in variants]
        variants = [v for v in variants if re.search(only, v.name)]
        if not variants:
            raise SystemExit(f"no {arch} variant's name matches --only {only!r}; they read like {names[0]} "
                             f"(deterministic ones carry _det_)")
    built = build_bundles(directory, arch, [(v.spec, v.config) for v in variants], ptxas)
    binary = "cubin" if ptxas else "PTX"
    (directory / BUILD_RECORD).write_text(json.dumps({"command": command, "bundles": built, "binary": binary}) + "\n")
    print(f"built {built} bundles ({binary}) for {arch} under {directory / arch}; {len(skipped)} (body, dtype, "
          "feature) the bodies refuse")


def find_sanitizer(given: str | None) -> str | None:
    if given:
        return given
    return shutil.which("compute-sanitizer") or (str(SANITIZER_FALLBACK) if SANITIZER_FALLBACK.is_file() else None)


def describe(command: list[str], what: str) -> str:
    """The last line a command prints (a version, the GPU's name), or why there is none."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{what} unknown ({exc})"
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[-1] if done.returncode == 0 and lines else f"{what} unknown (`{shlex.join(command)}` failed)"


def parse_tools(text: str) -> tuple[str, ...]:
    tools = tuple(t.strip() for t in text.split(",") if t.strip())
    wrong = [t for t in tools if t not in TOOLS]
    if wrong or not tools:
        raise ValueError(f"unknown sanitizer tool(s) {', '.join(wrong) or '(none given)'}: use a comma-separated "
                         f"list of {', '.join(TOOLS)}")
    return tools


def make_header(options: RunOptions, command: str) -> Header:
    """The device, the sanitizer's version and the commands, for the report."""
    record = options.directory / BUILD_RECORD
    built = json.loads(record.read_text())["command"] if record.is_file() else f"# (no {BUILD_RECORD}: built elsewhere)"
    children = tuple(shlex.join(sanitizer_command(options.sanitizer, tool, [options.python, str(CHILD), "BUNDLE"]))
                     for tool in options.tools)
    return Header(options.arch, describe(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                          "--format=csv,noheader"], "GPU"),
                  describe([options.sanitizer, "--version"], "compute-sanitizer version"), (built, command), children,
                  options.tools, 0.0)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = build_run_parser(__doc__, "sanitize_report.md")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--ptxas", help="build: ptxas of a CUDA toolkit, for cubins (no JIT under the sanitizer)")
    p.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, of {', '.join(TOOLS)}")
    p.add_argument("--jobs", type=int, default=8, help="children at once")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds before a child is killed")
    p.add_argument("--budget", type=float, help="start no child after this many seconds (the rest: --resume)")
    p.add_argument("--resume", action="store_true", help="skip the runs already in the report's .json")
    p.add_argument("--only", help="only the variants whose name matches this regular expression")
    p.add_argument("--logs", type=Path, help="write the whole output of each run that is not clean into this folder")
    p.add_argument("--sanitizer", help="the compute-sanitizer executable (default: PATH, then /usr/local/cuda/bin)")
    p.add_argument("--dry-run", action="store_true", help="run: print the commands and the time estimate only")
    args = p.parse_args(argv)
    command = shlex.join(["python3", "tools/sanitize.py", *argv])
    try:
        tools = parse_tools(args.tools)
        if args.only:
            re.compile(args.only)
    except (ValueError, re.error) as exc:
        p.error(f"--tools / --only: {exc}")
    if args.action == "build":
        build(args.directory, args.arch, args.ptxas, command, args.only)
        return 0
    if args.jobs < 1 or args.timeout <= 0:
        p.error("--jobs must be at least 1 and --timeout positive")
    sanitizer = find_sanitizer(args.sanitizer)
    if sanitizer is None and not args.dry_run:
        print(f"error: compute-sanitizer is not on PATH nor at {SANITIZER_FALLBACK}: pass --sanitizer PATH",
              file=sys.stderr)
        return 2
    options = RunOptions(args.directory, args.arch, tools, args.jobs, args.timeout, args.report,
                         sanitizer or "compute-sanitizer", sys.executable, args.resume, args.budget, args.only,
                         args.logs)
    if args.dry_run:
        return dry_run(options)
    return run(options, make_header(options, command))


if __name__ == "__main__":
    sys.exit(main())
