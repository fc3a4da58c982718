"""Count, for one compile, how often the spec and the kernel config are read back from IR attributes,
validated, and how often the fmha op verifier and the body layer's launch / workspace answers run.

    python -m fmha_mlir.tools.count_spec_reads                       # bf16 d128 bottom-right causal, softcap 30, sm_90
    python -m fmha_mlir.tools.count_spec_reads --dtype f16 --mask none --target gfx942 --json

The counts come from a profile hook (sys.setprofile) that sees every Python call by its module and
qualified name, so nothing in the compiler is wrapped or replaced. A counter is a list of
`module:qualname` patterns (fnmatch); a renamed function is found by adding its pattern here.
reports/spec_config_reads.md keeps the numbers before and after the plans.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from collections import Counter

from fmha_mlir.dialects.fmha_attrs import clear_decoded
from fmha_mlir.compiler import Compiler
from fmha_mlir.spec import AttentionBwdSpec, Mask

# What each count means -> the functions that do it.
COUNTERS = {
    "spec reads (attributes -> spec)": ["fmha_mlir.dialects.fmha_attrs:read_spec"],
    "config reads (attribute -> config)": ["fmha_mlir.dialects.fmha_attrs:read_config"],
    # reasons() validated on every call before the plans; now it returns what _validate found once.
    "spec validations": ["fmha_mlir.spec:AttentionBwdSpec._validate"],
    "config validations": ["fmha_mlir.kernel_config:*Config.structural_reasons"],
    "  reasons() asked (spec, config)": ["fmha_mlir.spec:AttentionBwdSpec.reasons",
                                         "fmha_mlir.kernel_config:*Config.reasons"],
    "body limit checks": ["fmha_mlir.bodies*:*Body.reasons", "fmha_mlir.bodies*:*Body.spec_reasons"],
    "fmha op verifier runs": ["fmha_mlir.dialects.fmha:verify_op"],
    "  of which problem / stage ops": ["fmha_mlir.dialects.fmha:_SpecOp.problems"],
    "launch geometries computed": ["fmha_mlir.bodies*:*Body.launch"],
    "workspace lists computed": ["fmha_mlir.bodies*:*Body.workspaces"],
    "body plans made": ["fmha_mlir.bodies.plan:_plan"],
}


def count_calls(run) -> dict[str, int]:
    """Run `run()` under a call counter, from a cold attribute decode (as a fresh process would: the
    decode memo otherwise answers for values an earlier compile decoded); the count of each COUNTERS entry."""
    clear_decoded()
    calls: Counter = Counter()

    def profile(frame, event, arg):
        if event == "call":
            calls[frame.f_code] += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    named: Counter = Counter()
    for code, n in calls.items():
        named[f"{_module_of(code)}:{code.co_qualname}"] += n
    return {label: sum(n for name, n in named.items() if any(fnmatch.fnmatchcase(name, p) for p in patterns))
            for label, patterns in COUNTERS.items()}


def _module_of(code) -> str:
    """The module a code object belongs to, as its file sits in the package (dialects/ and passes/ import
    as fmha_mlir.dialects / fmha_mlir.passes)."""
    path = code.co_filename.replace("\\", "/")
    for package, dotted in (("/dialects/", "fmha_mlir.dialects."), ("/passes/", "fmha_mlir.passes."),
                            ("/fmha_mlir/", "fmha_mlir.")):
        if package in path:
            rest = path.rsplit(package, 1)[1].removesuffix(".py").replace("/", ".")
            return dotted + rest.removesuffix(".__init__")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--hdim", type=int, default=128)
    parser.add_argument("--mask", default="bottom_right")
    parser.add_argument("--softcap", type=float, default=30.0)
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--body", default="auto")
    parser.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    args = parser.parse_args(argv)
    spec = AttentionBwdSpec(dtype=args.dtype, hdim_q=args.hdim, mask=Mask.parse(args.mask), softcap=args.softcap)
    compiled = []
    counts = count_calls(lambda: compiled.append(Compiler().compile_spec(spec, args.target, body=args.body)))
    if args.json:
        print(json.dumps({"config": compiled[0].config.tag, **counts}))
    else:
        print(f"{spec.kernel_prefix} on {args.target}, config {compiled[0].config.tag}")
        for label, n in counts.items():
            print(f"  {n:5d}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
