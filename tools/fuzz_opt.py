"""fuzz-opt: many mutated lit inputs through fmha-opt; every outcome must be a result or a clean error.

    python -m fmha_mlir.tools.fuzz_opt --cases 2000 --minutes 10 --jobs 2 --report reports/fuzz_opt.md

test/python/test_fuzz.py runs a few of these mutations in CI; this runs as many as the time allows and
stacks several per case (a line dropped, then a number replaced, ...), plus byte-level garbage and deep
nesting. A case is bad when fmha-opt dies by a signal, prints a traceback, exits with a status other
than 0 or 2 (docs: fmha-opt --help), exits 0 after an "LLVM ERROR", or runs past --timeout. Each bad
case's input is kept under --keep DIR with the command that reproduces it.
"""
from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE_MUTATIONS = ("drop", "repeat", "truncate", "swap", "number")
NUMBERS = (0, 1, 3, 64, 65, 4096, 2**31, 2**63)
OK_STATUSES = (0, 2)


def lit_inputs(root: Path = ROOT) -> list[Path]:
    """The lit tests that run fmha-opt on their own file."""
    return sorted(p for p in (root / "test").rglob("*.mlir") if "Output" not in p.parts
                  and re.search(r"RUN: fmha-opt %s", p.read_text()))


def pipeline_args(text: str) -> list[str]:
    """The --pass-pipeline of the file's first fmha-opt RUN line, as an argument list."""
    found = re.search(r"RUN: fmha-opt %s[^\n]*?--pass-pipeline='([^']*)'", text)
    return [f"--pass-pipeline={found.group(1)}"] if found else []


def mutate_lines(lines: list[str], how: str, at: int, value: int) -> list[str]:
    """One line-level mutation of `lines` at line `at` (modulo their count)."""
    at %= max(len(lines), 1)
    if not lines:
        return lines
    if how == "drop":
        return lines[:at] + lines[at + 1:]
    if how == "repeat":
        return lines[:at + 1] + lines[at:]
    if how == "truncate":
        return lines[:at] + [lines[at][:len(lines[at]) // 2]]
    if how == "swap":
        other = (at * 7 + value) % len(lines)
        lines = list(lines)
        lines[at], lines[other] = lines[other], lines[at]
        return lines
    if how == "number":   # one integer literal of the line replaced
        return lines[:at] + [re.sub(r"\b\d+\b", str(value), lines[at], count=1)] + lines[at + 1:]
    raise ValueError(f"unknown mutation {how!r}; known: {', '.join(LINE_MUTATIONS)}")


@dataclass(frozen=True)
class Case:
    index: int
    source: Path
    mutations: tuple[str, ...]   # what was done, for the report
    data: bytes
    argv: tuple[str, ...]


def make_case(index: int, sources: list[Path], rng: random.Random) -> Case:
    """A mutated input: 1-3 line mutations, or (1 in 10) garbage bytes, or (1 in 20) deep nesting."""
    source = rng.choice(sources)
    text = source.read_text()
    argv = ("-", "--split-input-file", *pipeline_args(text))
    roll = rng.random()
    if roll < 0.05:
        depth = rng.choice((200, 2000, 20000))
        data = ("func.func @f() {\n" + "scf.execute_region {\n" * depth + "}\n" * depth + "return\n}\n").encode()
        return Case(index, source, (f"nesting {depth}",), data, argv)
    if roll < 0.15:
        raw = bytearray(text.encode())
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return Case(index, source, ("bytes",), bytes(raw), argv)
    lines, done = text.splitlines(), []
    for _ in range(rng.randint(1, 3)):
        how, at, value = rng.choice(LINE_MUTATIONS), rng.randrange(10**6), rng.choice(NUMBERS)
        lines = mutate_lines(lines, how, at, value)
        done.append(f"{how}@{at % max(len(lines), 1)}" + (f"={value}" if how in ("number", "swap") else ""))
    return Case(index, source, tuple(done), ("\n".join(lines) + "\n").encode(), argv)


@dataclass(frozen=True)
class Outcome:
    case: Case
    verdict: str          # "result", "error", or the kind of bad outcome
    detail: str = ""

    @property
    def bad(self) -> bool:
        return self.verdict not in ("result", "error")


def run_case(case: Case, timeout: float) -> Outcome:
    command = [sys.executable, "-m", "fmha_mlir.tools.fmha_opt", *case.argv]
    try:
        done = subprocess.run(command, input=case.data, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(case, "hang", f"no answer in {timeout:g} s")
    stderr = done.stderr.decode("utf-8", "replace")
    last = stderr.strip().splitlines()[-1][-300:] if stderr.strip() else ""
    if done.returncode < 0:
        return Outcome(case, "signal", f"signal {-done.returncode}: {last}")
    if "Traceback (most recent call last)" in stderr:
        return Outcome(case, "traceback", last)
    if done.returncode not in OK_STATUSES:
        return Outcome(case, "status", f"exit {done.returncode}: {last}")
    if done.returncode == 0 and "LLVM ERROR" in stderr:
        return Outcome(case, "llvm-error-exit-0", last)
    if done.returncode == 2 and "error" not in stderr:
        return Outcome(case, "silent-error", "exit 2 without an error message")
    return Outcome(case, "result" if done.returncode == 0 else "error")


def keep(outcome: Outcome, directory: Path) -> str:
    """Write the bad case's input; the command that reproduces it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"case{outcome.case.index:05d}_{outcome.case.source.stem}.mlir"
    path.write_bytes(outcome.case.data)
    return "fmha-opt " + " ".join([str(path), *outcome.case.argv[1:]])


def report(outcomes: list[Outcome], command: str, seconds: float, kept: dict[int, str]) -> str:
    verdicts = Counter(o.verdict for o in outcomes)
    sources = Counter(o.case.source.relative_to(ROOT).as_posix() for o in outcomes)
    lines = ["# fuzz-opt: mutated lit inputs through fmha-opt", "", f"Command: `{command}`", "",
             f"{len(outcomes)} cases from {len(sources)} lit inputs in {seconds / 60:.1f} minutes.", "",
             "| outcome | cases |", "| --- | --- |"]
    lines += [f"| {verdict} | {count} |" for verdict, count in sorted(verdicts.items())]
    bad = [o for o in outcomes if o.bad]
    lines += ["", f"Bad outcomes (signal, traceback, other status, exit 0 after an LLVM error, hang): {len(bad)}"]
    lines += [f"- case {o.case.index} ({o.case.source.name}: {', '.join(o.case.mutations)}): {o.verdict}: "
              f"{o.detail}; reproduce with `{kept.get(o.case.index, '')}`" for o in bad]
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fuzz-opt", description=__doc__.splitlines()[0],
                                     epilog="Exit status: 0 no bad outcome, 1 some (listed), 2 usage error.")
    parser.add_argument("--cases", type=_positive, default=2000, help="how many mutated inputs (default 2000)")
    parser.add_argument("--minutes", type=float, default=0.0, help="stop starting new cases after this (0: no limit)")
    parser.add_argument("--seed", type=int, default=0, help="random seed: the same seed gives the same cases")
    parser.add_argument("--jobs", type=_positive, default=2, help="cases run at once")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a case counts as a hang")
    parser.add_argument("--report", type=Path, help="also write the summary (markdown) here")
    parser.add_argument("--keep", type=Path, default=Path("fuzz_opt_cases"), help="where bad cases' inputs go")
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive integer")
    return value


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    sources = lit_inputs()
    rng = random.Random(args.seed)
    cases = (make_case(i, sources, rng) for i in range(args.cases))
    start = time.monotonic()
    deadline = start + args.minutes * 60 if args.minutes > 0 else float("inf")
    outcomes, kept = [], {}
    with ThreadPoolExecutor(args.jobs) as pool:
        pending = []
        for case in cases:
            if time.monotonic() > deadline:
                break
            pending.append(pool.submit(run_case, case, args.timeout))
            if len(pending) >= 4 * args.jobs:   # keep the queue short, so --minutes is honoured
                outcomes.append(pending.pop(0).result())
        outcomes += [future.result() for future in pending]
    for outcome in outcomes:
        if outcome.bad:
            kept[outcome.case.index] = keep(outcome, args.keep)
    command = "python -m fmha_mlir.tools.fuzz_opt " + " ".join(argv)
    text = report(outcomes, command, time.monotonic() - start, kept)
    sys.stdout.write(text)
    if args.report:
        args.report.write_text(text)
    return 1 if any(o.bad for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
