"""fmha-compile: compile an attention-backward spec (or a stage's IR file) to a bundle or one artifact.

    fmha-compile --dtype bf16 --mask top_left --hdim 128 --target gfx942 -o out/       # bundle
    fmha-compile --dtype f16 --target sm_90 --emit isa                                 # PTX to stdout
    fmha-compile 02_gpu.mlir --from-stage gpu --target gfx950 --emit isa               # restart

--from-stage names the stage whose output the input file is (the NN_<stage>.mlir dumps); compilation
continues with the next stage. Exit status: 0 ok, 2 any error (a bad spec, option or input IR, a compile
that fails on it, MLIR crashing on it), as a bad option (fmha_mlir/errors.py).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from fmha_mlir.backends.amd import REDUCE_STRATEGIES
from fmha_mlir.bodies import BODIES
from fmha_mlir.backends.nvidia import cuda_toolkit
from fmha_mlir.compiler import RESTART_STAGES, CompiledKernels, Compiler
from fmha_mlir.errors import EXIT_ERROR, EXIT_OK, FmhaError, PipelineError, exit_status_epilog
from fmha_mlir.spec import GRAD_ACCUMS, AttentionBwdSpec, Mask
from fmha_mlir.target import TARGETS, get_target

from . import isolation

EMITS = ("fmha", "stages", "gpu", "kernel", "llvm", "isa", "metadata", "manifest")
STAGES_DIR = "stages"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fmha-compile", allow_abbrev=False,
                                     description="Compile the fused attention backward for gfx942, gfx950, sm_90.",
                                     epilog=exit_status_epilog())
    parser.add_argument("input", nargs="?", help="an IR file to restart from (with --from-stage); '-': stdin")
    parser.add_argument("--from-stage", choices=RESTART_STAGES, help="the stage whose output the input file is")
    spec = parser.add_argument_group("spec (the default when no input file is given)")
    spec.add_argument("--dtype", choices=("f16", "bf16", "f32"))
    spec.add_argument("--hdim", type=int, help="head dim of q and k (default 128)")
    spec.add_argument("--hdim-v", type=int, help="head dim of v (default: --hdim)")
    spec.add_argument("--gqa", type=int, help="query heads per key/value head (default 1)")
    spec.add_argument("--mask", help="none, top_left, bottom_right or window:LEFT,RIGHT (default none)")
    spec.add_argument("--scale", type=float, help="softmax scale (default 1/sqrt(hdim))")
    spec.add_argument("--softcap", type=float, help="scores through C tanh(s / C) (default 0: off)")
    spec.add_argument("--bias", choices=("none", "elementwise", "alibi"),
                      help="elementwise: a bias tensor operand; alibi: in-kernel ALiBi (default none)")
    spec.add_argument("--alibi-slopes", action="store_const", const=True,
                      help="ALiBi's slopes from an f32 [1 or B, H] operand (default: the standard slopes)")
    spec.add_argument("--dbias", action="store_const", const=True,
                      help="also the bias's gradient: dbias, or d(slopes) with --alibi-slopes")
    spec.add_argument("--deterministic", action="store_const", const=True,
                      help="no atomics whose order can change a result (tiled body: dQ partials per key block)")
    spec.add_argument("--grad-accum", choices=GRAD_ACCUMS,
                      help="dQ's atomics: f32 into a workspace (default), or bf16 packed atomics into dQ itself")
    spec.add_argument("--sinks", action="store_const", const=True,
                      help="learnable attention sinks: an f32 [H] sinks operand and its gradient dsinks")
    spec.add_argument("--dlse", action="store_const", const=True,
                      help="the lse's gradient: an f32 dlse operand shaped like lse (D becomes D - dlse)")
    parser.add_argument("--target", default="gfx942", choices=(*TARGETS, "all"))
    parser.add_argument("--body", default="auto", choices=("auto", *BODIES),
                        help="kernel body: auto takes the fastest one that supports the spec on the target")
    parser.add_argument("-o", dest="output", help="write the bundle (manifest.json, binary, interp IR, "
                                                  "assembly) here; with --target all, one folder per target")
    parser.add_argument("--dump-stages", action="store_true",
                        help=f"also write every stage under -o DIR/{STAGES_DIR}")
    parser.add_argument("--emit", choices=EMITS, help="print one artifact to stdout")
    parser.add_argument("--reduce", choices=REDUCE_STRATEGIES, default="dpp",
                        help="AMD wave reductions: DPP steps (default) or the xor-shuffle butterfly")
    parser.add_argument("--ptxas", default="auto",
                        help="ptxas for sm_90 cubins: a path, auto (look on PATH) or none (PTX is the binary)")
    isolation.add_in_process_option(parser)
    return parser


def _isolated(args, argv: list[str]) -> int:
    """An input file is IR we cannot fully validate: compile it in a child process, so that an LLVM
    assertion on it is an error here, not the end of this process (a spec's compile stays in-process)."""
    try:
        data = sys.stdin.buffer.read() if args.input == "-" else None
    except OSError as exc:
        print(f"fmha-compile: cannot read stdin: {exc.strerror}", file=sys.stderr)
        return EXIT_ERROR
    result = isolation.run_child("fmha_mlir.tools.fmha_compile", argv, data)
    if not result.crashed:
        return isolation.exit_status("fmha-compile", result)
    isolation.passthrough(result)
    print(f"fmha-compile: error: MLIR crashed compiling {args.input} ({result.why()}); reproduce with: "
          f"{isolation.repro('fmha-compile', argv)}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.input is None) != (args.from_stage is None):
        parser.error("an input file and --from-stage go together")
    if args.input is not None and not args.in_process:
        return _isolated(args, argv)
    if args.dump_stages and not args.output:
        parser.error("--dump-stages writes under -o DIR: give -o")
    if not args.output and not args.emit:
        parser.error("nothing to do: give -o DIR and/or --emit ARTIFACT")
    ptxas = _ptxas(args.ptxas)
    if args.ptxas not in ("auto", "none") and cuda_toolkit(ptxas) is None:
        # Without this the compiler would quietly ship PTX instead of the cubin asked for.
        parser.error(f"--ptxas {args.ptxas}: not a ptxas inside a complete CUDA toolkit (bin/ptxas and "
                     "nvvm/libdevice/libdevice.10.bc under one root); give such a ptxas, auto or none")
    compiler = Compiler(ptxas=ptxas, amd_reduce=args.reduce)
    targets = list(TARGETS) if args.target == "all" else [args.target]
    try:
        spec = _spec(args)
        text = _read_input(args.input) if args.input else None
        for arch in targets:
            out_dir = Path(args.output) / arch if args.output and len(targets) > 1 else args.output
            dump_dir = Path(out_dir) / STAGES_DIR if args.dump_stages else None
            if text is None:
                result = compiler.compile_spec(spec, get_target(arch), dump_dir, body=args.body)
            else:
                result = compiler.compile_module(text, args.from_stage, get_target(arch), dump_dir, spec,
                                                 source_name=args.input, body=args.body)
            if out_dir:
                _save_bundle(result, Path(out_dir))
            if args.emit:
                if len(targets) > 1:
                    print(f"// ----- target {arch}")
                sys.stdout.write(_artifact(result, args.emit))
    except (FmhaError, OSError) as exc:
        print(f"fmha-compile: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _spec(args) -> AttentionBwdSpec | None:
    """The spec from the flags; None for an input file without spec flags (the IR may carry one)."""
    flags = (args.dtype, args.hdim, args.hdim_v, args.gqa, args.mask, args.scale, args.softcap, args.bias,
             args.alibi_slopes, args.dbias, args.deterministic, args.grad_accum, args.sinks, args.dlse)
    if args.input and all(flag is None for flag in flags):
        return None
    return AttentionBwdSpec(
        dtype=_given(args.dtype, "f16"), hdim_q=_given(args.hdim, 128), hdim_v=_given(args.hdim_v, 0),
        gqa_ratio=_given(args.gqa, 1), mask=Mask.parse(_given(args.mask, "none")), scale=_given(args.scale, 0.0),
        softcap=_given(args.softcap, 0.0), bias=_given(args.bias, "none"),
        alibi_slopes=_given(args.alibi_slopes, False),
        dbias=_given(args.dbias, False), deterministic=_given(args.deterministic, False),
        grad_accum=_given(args.grad_accum, "f32"), sinks=_given(args.sinks, False), lse_grad=_given(args.dlse, False))


def _given(value, default):
    return default if value is None else value


def _ptxas(choice: str) -> str | None:
    if choice == "none":
        return None
    if choice == "auto":
        return shutil.which("ptxas")
    return choice


def _read_input(path: str) -> str:
    data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    try:
        return isolation.ir_text(data)
    except UnicodeDecodeError as exc:
        raise PipelineError(f"{path}: not MLIR text ({exc})") from None
    except ValueError as exc:
        raise PipelineError(f"{path}: {exc}") from None


def _artifact(result: CompiledKernels, emit: str) -> str:
    if emit == "isa":
        return result.isa
    if emit == "metadata":
        if result.binary_format != "hsaco":
            raise PipelineError(f"--emit metadata: {result.target.arch} binaries carry no code-object metadata")
        from fmha_mlir.runtime.hsaco_metadata import read_hsaco_metadata

        return json.dumps(read_hsaco_metadata(result.binary), indent=1, sort_keys=True) + "\n"
    if emit == "manifest":
        if result.manifest is None:
            raise PipelineError("--emit manifest: the input has no host function, so no launch plan")
        return json.dumps(result.manifest, indent=1) + "\n"
    if emit not in result.stages:
        raise PipelineError(f"stage {emit!r} did not run: the input starts after it")
    return result.stages[emit]


def _save_bundle(result: CompiledKernels, directory: Path) -> None:
    from fmha_mlir.runtime.bundle import Bundle

    if result.spec is None:
        raise PipelineError("the input carries no spec any more (it is past the stages stage): give the spec "
                            "flags (--dtype, --hdim, --mask, ...) so the bundle can record it")
    Bundle(result.manifest, result.bundle_files()).save(directory)


if __name__ == "__main__":
    sys.exit(main())
