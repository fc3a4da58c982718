"""gfx942 / gfx950: ROCDL, hsaco linked by ziglang's ld.lld."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from .base import Backend
from .pipeline import render_pass
from .toolkit import lld_toolkit

# Full-wave reductions on AMD (convert-fmha-to-rocdl's reduce option): DPP row ops or the xor-shuffle butterfly.
REDUCE_STRATEGIES = ("dpp", "shuffle")


@dataclasses.dataclass(frozen=True)
class AmdBackend(Backend):
    BACKEND: ClassVar[str] = "rocdl"
    VENDOR: ClassVar[str] = "amd"
    ISA_SUFFIX: ClassVar[str] = ".s"

    reduce: str = "dpp"     # full-wave reductions: DPP row ops, or the xor-shuffle butterfly

    def __post_init__(self):
        super().__post_init__()
        if self.reduce not in REDUCE_STRATEGIES:
            raise ValueError(f"unknown reduce strategy {self.reduce!r}; use {' or '.join(REDUCE_STRATEGIES)}")

    def kernel_passes(self) -> list[str]:
        return [render_pass("convert-fmha-to-rocdl", chipset=self.target.arch, reduce=self.reduce)]

    def attach_target_pass(self) -> str:
        return render_pass("rocdl-attach-target", chip=self.target.arch)

    def module_passes(self) -> list[str]:
        # Packed bf16 atomics and semaphores need the buffer's address, before the gpu conversion runs.
        return ["fmha-packed-atomics-to-rocdl", render_pass("fmha-semaphores-to-llvm", target=self.VENDOR)]

    def gpu_to_llvm_passes(self) -> list[str]:
        # amdgpu.dpp must become rocdl ops before the gpu conversion runs.
        return [render_pass("convert-amdgpu-to-rocdl", chipset=self.target.arch),
                render_pass("convert-gpu-to-rocdl", chipset=self.target.arch)]

    def fixup_passes(self) -> list[str]:
        return ["fmha-extern-dynamic-shared"]

    def binary_options(self) -> dict:
        return {"format": "bin", "toolkit": lld_toolkit()}

    @property
    def binary_format(self) -> str:
        return "hsaco"
