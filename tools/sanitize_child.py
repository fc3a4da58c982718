"""What tools/sanitize.py runs under compute-sanitizer: one bundle on the problems of its spec, each run
once and put to the gate against the float64 oracle.

    python3 tools/sanitize_child.py BUNDLE [--executor cuda|cpu]

Prints one `gate LABEL: PASS|FAIL (worst R of the bound)` line per problem. Exit status: 0 every gate
passed, 1 a gate failed, 2 the bundle or a launch was refused (the message says why). The executor is
closed at the end, so the sanitizer's leak check sees the context released with every buffer freed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fmha_mlir.errors import FmhaError
from fmha_mlir.runtime.bundle import Bundle
from fmha_mlir.runtime.executor import get_executor
from fmha_mlir.runtime.runner import run_bundle
from sanitize_plan import problems   # run as a script: tools/ is on sys.path

GATE_PREFIX = "gate "
EXIT_GATE_FAILED, EXIT_REFUSED = 1, 2


def run_child(bundle_dir: Path, executor: str) -> int:
    bundle = Bundle.load(bundle_dir)
    device = get_executor(executor)
    failed = 0
    try:
        for label, problem, scalars in problems(bundle.spec):
            checks = problem.check(run_bundle(bundle, device, problem.tensors, scalars), bundle.numerics)
            ok = all(c.passed for c in checks)
            failed += not ok
            print(f"{GATE_PREFIX}{label}: {'PASS' if ok else 'FAIL'} (worst {max(c.ratio for c in checks):.2f} of "
                  "the bound)", flush=True)
    finally:
        device.close()
    return EXIT_GATE_FAILED if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("--executor", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: the same problems in the interpreter (a check of this script without a GPU)")
    args = p.parse_args(argv)
    try:
        return run_child(args.bundle, args.executor)
    except FmhaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
