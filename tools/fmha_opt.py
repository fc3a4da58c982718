"""fmha-opt: mlir-opt for fmha IR. Parses, checks the fmha ops, runs a pass pipeline, prints the result.

    fmha-opt in.mlir --pass-pipeline='builtin.module(fmha-decompose-bwd,canonicalize)' -o out.mlir
    fmha-opt in.mlir -split-input-file -verify-diagnostics

Our passes and upstream ones mix freely in one pipeline (passes/registry.py resolves the names).
Every failure is printed as `file:line:col: error: message` and exits 2, as a bad option does (the
statuses: fmha_mlir/errors.py). The MLIR work runs in a child process (tools/opt_driver.py;
`--in-process` runs it here): an LLVM assertion or a stack overflow on some input becomes an error at
that input (with -split-input-file, at the chunk that crashed, the other chunks still processed)
instead of killing fmha-opt.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

from fmha_mlir.errors import EXIT_ERROR, EXIT_OK, exit_status_epilog

from . import isolation

SPLIT_MARKER = "// -----"
_SPLIT_LINE = re.compile(r"^\s*// -----\s*$")
_MODULE = "fmha_mlir.tools.fmha_opt"


@dataclass(frozen=True)
class Chunk:
    first_line: int  # 1-based line of the input file where this chunk starts
    text: str


def split_chunks(text: str) -> list[Chunk]:
    """The parts of `text` between `// -----` lines."""
    chunks, start, lines = [], 1, []
    for line_no, line in enumerate(text.splitlines(keepends=True), start=1):
        if _SPLIT_LINE.match(line):
            chunks.append(Chunk(start, "".join(lines)))
            start, lines = line_no + 1, []
        else:
            lines.append(line)
    chunks.append(Chunk(start, "".join(lines)))
    return chunks


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fmha-opt", allow_abbrev=False,
        description="Parse fmha / MLIR IR, verify the fmha ops, run a pass pipeline and print the result.",
        epilog=exit_status_epilog())
    parser.add_argument("input", nargs="?", default="-", help="input .mlir file ('-' or none: stdin)")
    parser.add_argument("-o", dest="output", default="-", help="output file ('-': stdout)")
    parser.add_argument("--pass-pipeline", "-pass-pipeline", default="",
                        help="textual pipeline, e.g. 'builtin.module(fmha-decompose-bwd,cse)'")
    parser.add_argument("--split-input-file", "-split-input-file", action="store_true",
                        help=f"process each part between '{SPLIT_MARKER}' lines on its own")
    parser.add_argument("--verify-diagnostics", "-verify-diagnostics", action="store_true",
                        help="check diagnostics against // expected-error {{...}} comments instead of printing them")
    parser.add_argument("--mlir-print-ir-after-all", "-mlir-print-ir-after-all", action="store_true",
                        help="print the IR to stderr after every pass")
    parser.add_argument("--mlir-print-op-generic", "-mlir-print-op-generic", action="store_true",
                        help="print operations in their generic form")
    parser.add_argument("--mlir-print-debuginfo", "-mlir-print-debuginfo", action="store_true",
                        help="print locations")
    parser.add_argument("--list-passes", action="store_true", help="list the fmha passes and exit")
    parser.add_argument("--input-name", default=None,
                        help="the name diagnostics give the input (default: its path, or <stdin>)")
    isolation.add_in_process_option(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.in_process or args.list_passes:
        from .opt_driver import run

        return run(args)
    try:
        data = sys.stdin.buffer.read() if args.input == "-" else None
    except OSError as exc:
        print(f"fmha-opt: error: cannot read stdin: {exc.strerror}", file=sys.stderr)
        return EXIT_ERROR
    result = isolation.run_child(_MODULE, argv, data)
    if not result.crashed:
        return isolation.exit_status("fmha-opt", result)
    return _crashed(args, argv, data, result)


def _crashed(args, argv: list[str], data: bytes | None, result: isolation.ChildResult) -> int:
    """The child died: report where; with -split-input-file, redo each chunk in its own child so that the
    chunks that do not crash MLIR are still processed and only those that do are reported."""
    name = args.input_name or ("<stdin>" if args.input == "-" else args.input)
    try:
        text = isolation.ir_text(data if data is not None else open(args.input, "rb").read())
    except (OSError, ValueError):   # UnicodeDecodeError is a ValueError
        text = None
    if not args.split_input_file or text is None or len(split_chunks(text)) == 1:
        print(f"{name}:1:1: error: MLIR crashed on this input ({result.why()}); reproduce with: "
              f"{isolation.repro('fmha-opt', argv)}", file=sys.stderr)
        return EXIT_ERROR
    outputs, failed = [], False
    for chunk in split_chunks(text):
        padded = ("\n" * (chunk.first_line - 1) + chunk.text).encode()
        part = isolation.run_child(_MODULE, _chunk_argv(args, name), padded)
        if part.crashed:
            failed = True
            last = chunk.first_line + max(chunk.text.count("\n"), 1) - 1
            print(f"{name}:{chunk.first_line}:1: error: MLIR crashed on the chunk starting here ({part.why()}); "
                  f"reproduce with: sed -n '{chunk.first_line},{last}p' {name} | "
                  f"{isolation.repro('fmha-opt', _chunk_argv(args, name))}", file=sys.stderr)
            continue
        sys.stderr.buffer.write(part.stderr)
        failed |= part.returncode != 0
        if part.stdout:
            outputs.append(part.stdout.decode())
    return finish(outputs, args.output, failed)


def _chunk_argv(args, name: str) -> list[str]:
    """The options of this run for one chunk read from stdin, its IR printed to stdout."""
    flags = [flag for flag, on in (("--verify-diagnostics", args.verify_diagnostics),
                                   ("--mlir-print-ir-after-all", args.mlir_print_ir_after_all),
                                   ("--mlir-print-op-generic", args.mlir_print_op_generic),
                                   ("--mlir-print-debuginfo", args.mlir_print_debuginfo)) if on]
    pipeline = [f"--pass-pipeline={args.pass_pipeline}"] if args.pass_pipeline else []
    return ["-", "-o", "-", "--input-name", name, *pipeline, *flags]


def finish(outputs: list[str], path: str, failed: bool) -> int:
    """Write the chunks' IR (split markers between them) to `path`; the exit status."""
    try:
        _write_output(f"{SPLIT_MARKER}\n".join(outputs), path)
    except OSError as exc:
        print(f"fmha-opt: error: cannot write {path}: {exc.strerror}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_ERROR if failed else EXIT_OK


def _write_output(text: str, path: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


if __name__ == "__main__":
    sys.exit(main())
