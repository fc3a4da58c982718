"""fmha-opt's MLIR work, in the process that runs it (fmha_opt.py starts it in a child by default):
parse, check the fmha ops, run the pipeline, print the IR or the diagnostics."""
from __future__ import annotations

import sys

from fmha_mlir.diagnostics import Diagnostic, capture, error, from_mlir, position_of
from fmha_mlir.dialects.fmha import emit_verification_errors
from fmha_mlir.errors import EXIT_ERROR, FmhaError, PipelineError
from fmha_mlir.mlir import ir, make_context
from fmha_mlir.passes import registry
from fmha_mlir.passes.verify import abort_traps

from . import diagnostic_verifier
from .isolation import ir_text
from .fmha_opt import Chunk, finish, split_chunks


def run(args) -> int:
    """fmha-opt in this process; its exit status."""
    if args.list_passes:
        print(_pass_listing())
        return 0
    try:
        text, source_name = _read_input(args.input, args.input_name)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        print(f"fmha-opt: error: cannot read {args.input}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return EXIT_ERROR
    ctx = make_context()
    try:
        pass_manager = _pass_manager(args, ctx)
    except PipelineError as exc:
        print(f"fmha-opt: error: invalid --pass-pipeline: {exc}", file=sys.stderr)
        return EXIT_ERROR

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
    return finish(outputs, args.output, failed)


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


def _read_input(path: str, name: str | None) -> tuple[str, str]:
    """(text, the name diagnostics give it); UnicodeDecodeError / ValueError for what is not MLIR text."""
    if path == "-":
        data, name = sys.stdin.buffer.read(), name or "<stdin>"
    else:
        with open(path, "rb") as handle:
            data, name = handle.read(), name or path
    return ir_text(data), name


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


