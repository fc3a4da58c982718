"""Offsets past 2^31 elements on the GPU: a problem whose q, k and dq_acc pass 2^31 elements, checked.

    python tools/lab/large_offsets.py build DIR                   # where MLIR is: the sm_90 bundle
    python3 tools/lab/large_offsets.py run DIR --report FILE      # on the H200 (numpy, cuda-bindings, torch)
    python tools/lab/large_offsets.py run DIR --smoke             # a dry run of the same code on the CPU interpreter

The kernels index each dimension in i32 but form element offsets in 64-bit `index` arithmetic
(docs/ir.md, "Addressing"); the interpreter computes in int64 whatever the IR says, so only the GPU
shows whether an offset past 2^31 elements lands where it should. Default problem: bf16, d128,
B4100 Hq64 Hkv64 S64, [B, H, S, D] contiguous: q, k, v, o, dO, dq, dk, dv 4.0 GiB each and dQ's f32
workspace 8.0 GiB; the last batch starts at element 2.147e9 > 2^31. The batches checked (first,
middle, last) each have their own random data, the others one filler problem, so a wrapped offset
reads or writes another batch's rows and fails the gate. Each checked batch goes to the gate against
the float64 oracle (fmha_mlir.tolerance). Exit status 1 if any fails.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from fmha_mlir.api import AttentionBackward
from fmha_mlir.bodies import choose_config
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import get_target
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/: the modules the tools share
from build_run import build_bundles, build_run_parser, write_report_files  # noqa: E402

ARCH = "sm_90"
HEADS, SEQLEN, HDIM = 64, 64, 128
BATCH = 4100        # 4100 x 64 x 64 x 128 = 2.1496e9 elements per tensor > 2^31 = 2.1475e9
SMOKE_BATCH, SMOKE_HEADS = 4, 2   # --smoke: the interpreter, seconds
NAMES = ("q", "k", "v", "o", "do", "lse")


def spec_of(mask: str) -> AttentionBwdSpec:
    return AttentionBwdSpec("bf16", HDIM, mask=Mask.parse(mask))


def build(directory: Path, mask: str) -> None:
    spec = spec_of(mask)
    build_bundles(directory, ARCH, [(spec, choose_config(spec, get_target(ARCH)))])


def checked_batches(batch: int) -> tuple[int, ...]:
    return tuple(sorted({0, batch // 2, batch - 1}))


def run(directory: Path, report: Path, mask: str, batch: int, smoke: bool) -> int:
    spec = spec_of(mask)
    heads = SMOKE_HEADS if smoke else HEADS
    size = ProblemSize(1, heads, SEQLEN, SEQLEN)
    filler = make_problem(spec, size, seed=0)
    checked = {b: make_problem(spec, size, seed=1 + i) for i, b in enumerate(checked_batches(batch))}
    runner = AttentionBackward(executor="cpu" if smoke else "cuda", arch=ARCH, bundle_dir=str(directory))
    tensors = (_numpy_tensors if smoke else _torch_tensors)(filler, checked, batch)
    grads = runner.run(spec, *(tensors[n] for n in NAMES))
    bundle = runner.bundle(spec)
    rows, failed = [], False
    for b, problem in checked.items():
        outputs = {name: _batch(grad, b) for name, grad in zip(("dq", "dk", "dv"), grads)}
        for check in problem.check(outputs, bundle.numerics):
            failed |= not check.passed
            rows.append({"batch": b, "first_element": b * heads * SEQLEN * HDIM, "grad": check.name,
                         "max_abs_err": check.max_abs_err, "allowed": check.allowed, "ratio": check.ratio,
                         "passed": check.passed})
    elements = batch * heads * SEQLEN * HDIM
    lines = [f"# Offsets past 2^31 elements: B{batch} H{heads} S{SEQLEN} D{HDIM} bf16, mask {spec.mask}", "",
             f"`python3 tools/lab/large_offsets.py run DIR --batch {batch} --mask {mask}` on the "
             f"{'CPU interpreter (smoke)' if smoke else runner.device().name + ' executor'}; bundle "
             f"{spec.kernel_prefix}_{bundle.config.tag}.", "",
             f"q, k, v, o, dO, dq, dk, dv: {elements} elements each ({elements / 2**31:.4f} x 2^31; the last "
             f"element of q is at {elements - 1}); dQ's f32 workspace the same count, {4 * elements / 2**30:.2f} "
             "GiB. Checked batches have their own data, the others a filler problem.", "",
             "| batch | first element | grad | max abs err | allowed | ratio | status |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['batch']} | {r['first_element']} | {r['grad']} | {r['max_abs_err']:.3e} | {r['allowed']:.3e} | "
              f"{r['ratio']:.2f} | {'PASS' if r['passed'] else 'FAIL'} |" for r in rows]
    write_report_files(report, lines, {"batch": batch, "elements_per_tensor": elements, "mask": str(spec.mask),
                                       "smoke": smoke, "rows": rows})
    print("\n".join(lines))
    return 1 if failed else 0


def _numpy_tensors(filler, checked: dict, batch: int) -> dict:
    out = {}
    for name in NAMES:
        array = np.repeat(filler.tensors[name], batch, axis=0)
        for b, problem in checked.items():
            array[b] = problem.tensors[name][0]
        out[name] = array
    return out


def _torch_tensors(filler, checked: dict, batch: int) -> dict:
    import torch

    def on_gpu(array: np.ndarray):
        if array.dtype == np.uint16:   # bf16 bits
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16).cuda()
        return torch.from_numpy(array).cuda()

    out = {}
    for name in NAMES:
        one = on_gpu(filler.tensors[name])
        tensor = one.expand(batch, *one.shape[1:]).contiguous()
        for b, problem in checked.items():
            tensor[b] = on_gpu(problem.tensors[name])[0]
        out[name] = tensor
    return out


def _batch(grad, b: int) -> np.ndarray:
    """Batch b of a gradient as the problem's storage (bf16 as uint16 bits), [1, H, S, D]."""
    if isinstance(grad, np.ndarray):
        return grad[b:b + 1]
    import torch

    return grad[b:b + 1].detach().cpu().view(torch.int16).numpy().view(np.uint16)


def main(argv=None) -> int:
    p = build_run_parser(__doc__, "large_offsets.md")
    p.add_argument("--mask", default="none", help="none, top_left, bottom_right or window:L,R (build and run alike)")
    p.add_argument("--batch", type=int, default=None, help=f"batches (default {BATCH}; --smoke: {SMOKE_BATCH})")
    p.add_argument("--smoke", action="store_true", help=f"the CPU interpreter, {SMOKE_HEADS} heads (no GPU)")
    args = p.parse_args(argv)
    if args.action == "build":
        build(args.directory, args.mask)
        return 0
    batch = args.batch or (SMOKE_BATCH if args.smoke else BATCH)
    return run(args.directory, args.report, args.mask, batch, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
