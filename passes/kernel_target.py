"""Kernels go only to the chip they were built for.

fmha-stages-to-gpu writes each kernel's spec and config on its gpu.func (fmha.spec / fmha.config; they
stay on the llvm.func after the gpu.module lowering). A kernel lowered for another chip (an sm_90 body,
wave 32 and mma.sync, through convert-fmha-to-rocdl; an MFMA body through convert-fmha-to-nvvm; a
gfx950-only MFMA in a gpu.module for gfx942) would convert without a word and leave the backend to
fail or LLVM to abort. The rule is the compiler's own: bodies.check_config.
"""
from __future__ import annotations

import re

from fmha_mlir.bodies import check_config
from fmha_mlir.dialects.fmha_attrs import describes_kernel, read_kernel_description
from fmha_mlir.errors import SpecError
from fmha_mlir.mlir import ir
from fmha_mlir.target import TARGETS, Target

from .base import PassFailure
from .ir_builders import collect_ops

_CHIP = re.compile(r'#(?:rocdl|nvvm)\.target<[^>]*chip = "([^"]+)"')


def check_kernels_for(op: "ir.Operation", target: Target) -> None:
    """PassFailure at the first kernel under `op` whose spec and config `target` cannot run."""
    for kernel in collect_ops(op, ["gpu.func", "llvm.func"]):
        if not describes_kernel(kernel):
            continue
        problems: list[str] = []
        spec, config = read_kernel_description(kernel, problems)
        if problems or spec is None or config is None:
            raise PassFailure("its fmha.spec / fmha.config is invalid: " + "; ".join(problems), kernel)
        try:
            check_config(spec, target, config)
        except SpecError as exc:
            instruction = getattr(config, "instruction", "")
            built = f"wave {config.wave_size}" + (f", {instruction}" if instruction else "")
            raise PassFailure(f"kernel {_name(kernel)} ({config.body} body, {built}) cannot run on {target.arch}: "
                              + "; ".join(map(str, exc.reasons))
                              + f" (compile it for {target.arch}, or lower it for the chip it was built for)",
                              kernel) from None


def check_attached_chips(module: "ir.Operation") -> None:
    """Each gpu.module's kernels against the chip its target attribute names (when it names a known one)."""
    for gpu_module in collect_ops(module, ["gpu.module"]):
        if "targets" not in gpu_module.attributes:
            continue
        for chip in _CHIP.findall(str(gpu_module.attributes["targets"])):
            if chip in TARGETS:
                check_kernels_for(gpu_module, TARGETS[chip])


def _name(kernel: "ir.Operation") -> str:
    return f"@{ir.StringAttr(kernel.attributes['sym_name']).value}"
