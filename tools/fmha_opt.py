"""fmha-opt: mlir-opt for fmha IR. Parses, checks the fmha ops, runs a pass pipeline, prints the result.

    fmha-opt in.mlir --pass-pipeline='builtin.module(fmha-decompose-bwd,canonicalize)' -o out.mlir
    fmha-opt in.mlir -split-input-file -verify-diagnostics

Our passes and upstream ones mix freely in one pipeline (passes/registry.py resolves the names).
Every failure is printed as `file:line:col: error: message` and exits 1.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

from fmha_mlir.diagnostics import Diagnostic, capture, error, from_mlir, position_of
from fmha_mlir.dialects.fmha import emit_verification_errors
from fmha_mlir.errors import FmhaError, PipelineError
from fmha_mlir.mlir import ir, make_context
from fmha_mlir.passes import registry
from fmha_mlir.passes.verify import abort_traps

from . import diagnostic_verifier

SPLIT_MARKER = "// -----"
_SPLIT_LINE = re.compile(r"^\s*// -----\s*$")


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
        description="Parse fmha / MLIR IR, verify the fmha ops, run a pass pipeline and print the result.")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.list_passes:
        print(_pass_listing())
        return 0
    try:
        text, source_name = _read_input(args.input)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"fmha-opt: error: cannot read {args.input}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 1
    ctx = make_context()
    try:
        pass_manager = _pass_manager(args, ctx)
    except PipelineError as exc:
        print(f"fmha-opt: error: invalid --pass-pipeline: {exc}", file=sys.stderr)
        return 1

    chunks = split_chunks(text) if args.split_input_file else [Chunk(1, text)]
    outputs: list[str] = []
    diagnostics: list[Diagnostic] = []
    failed = False
    for chunk in chunks:
        output = _process(chunk, ctx, pass_manager, args, source_name, diagnostics)
        failed |= output is None
        if output is not None:
            outputs.append(output)

    if args.verify_diagnostics:
        expectations, problems = diagnostic_verifier.parse_expectations(text, source_name)
        problems += diagnostic_verifier.verify(expectations, diagnostics, source_name)
        _print_diagnostics(problems)
        failed = bool(problems)
    else:
        _print_diagnostics(diagnostics)
    try:
        _write_output(f"{SPLIT_MARKER}\n".join(outputs), args.output)
    except OSError as exc:
        print(f"fmha-opt: error: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
        return 1
    return 1 if failed else 0


def _pass_manager(args, ctx):
    if not args.pass_pipeline:
        return None
    pass_manager = registry.build_pass_manager(args.pass_pipeline, ctx)
    if args.mlir_print_ir_after_all:
        pass_manager.enable_ir_printing(print_after_all=True, print_generic_op_form=args.mlir_print_op_generic,
                                        enable_debug_info=args.mlir_print_debuginfo)
    return pass_manager


def _process(chunk: Chunk, ctx, pass_manager, args, source_name: str, diagnostics: list[Diagnostic]) -> str | None:
    """Parse, verify and transform one chunk; its printed IR, or None (diagnostics say why)."""
    # Blank lines in front keep MLIR's line numbers those of the whole file. Module.parse (which wraps
    # top-level ops in an implicit module, as mlir-opt does) names the buffer "-": fmha_mlir.diagnostics
    # reports it under source_name.
    text = "\n" * (chunk.first_line - 1) + chunk.text
    with ctx, capture(ctx, source_name) as captured:
        try:
            module = ir.Module.parse(text)
            # The fmha ops are unregistered: MLIR's verifier checks nothing about them, ours does.
            if emit_verification_errors(module.operation) and pass_manager is not None \
                    and _emit_abort_traps(module.operation):
                if _run(pass_manager, module, source_name, captured):
                    emit_verification_errors(module.operation)
            ok = not any(d.severity == "error" for d in captured)
        except ir.MLIRError as exc:
            captured += [record for diag in exc.error_diagnostics for record in from_mlir(diag, source_name)]
            ok = False
    diagnostics += captured
    if not ok:
        return None
    return module.operation.get_asm(print_generic_op_form=args.mlir_print_op_generic,
                                    enable_debug_info=args.mlir_print_debuginfo)


def _emit_abort_traps(module_op) -> bool:
    """Emit an error at each op an upstream pass would abort the process on; True when there is none."""
    traps = abort_traps(module_op)
    for op, message in traps:
        op.location.emit_error(message)
    return not traps


def _run(pass_manager, module, source_name: str, captured: list[Diagnostic]) -> bool:
    """Run the pipeline; False (with an error in `captured`) when it fails.

    MLIRError carries the errors the passes emitted; a failure that said nothing, or a project error a
    pass let escape, still gets one. Other exceptions are bugs in a pass and keep their traceback.
    """
    where = position_of(module.operation.location, source_name)
    try:
        pass_manager.run(module.operation)
        return True
    except ir.MLIRError as exc:
        records = [r for diag in exc.error_diagnostics for r in from_mlir(diag, source_name)]
        if not records and not any(d.severity == "error" for d in captured):
            records = [error(f"pass pipeline failed: {exc}", where)]
        captured += records
    except FmhaError as exc:
        captured.append(error(f"pass pipeline failed: {type(exc).__name__}: {exc}", where))
    return False


def _read_input(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    with open(path, encoding="utf-8") as handle:
        return handle.read(), path


def _write_output(text: str, path: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _print_diagnostics(diagnostics: list[Diagnostic]) -> None:
    for diag in diagnostics:
        print(diag.format(), file=sys.stderr)
    sys.stderr.flush()


def _pass_listing() -> str:
    lines = ["fmha passes:"]
    for name in registry.pass_names():
        try:
            description = registry.get_pass_class(name).DESCRIPTION
        except ImportError:  # listed in the registry, module not written yet
            description = "(not available in this build)"
        lines.append(f"  {name:<28} {description}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
