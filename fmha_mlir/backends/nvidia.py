"""sm_90 and sm_90a: NVVM, PTX; a cubin when the caller gave a ptxas inside a complete CUDA toolkit."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

from .base import Backend
from .pipeline import render_pass

# gpu-module-to-binary{format=bin toolkit=ROOT} runs ROOT/bin/ptxas and reports a missing libdevice as
# an error even when it needs none; such an error aborts the process in these bindings, so a toolkit
# is used only when both files are there.
_TOOLKIT_FILES = ("bin/ptxas", "nvvm/libdevice/libdevice.10.bc")


def cuda_toolkit(ptxas: str | None) -> Path | None:
    """The CUDA root of `ptxas` (symlinks resolved) if it is a complete toolkit, else None."""
    if ptxas is None:
        return None
    root = Path(ptxas).resolve().parent.parent
    return root if all((root / name).is_file() for name in _TOOLKIT_FILES) else None


@dataclasses.dataclass(frozen=True)
class NvidiaBackend(Backend):
    BACKEND: ClassVar[str] = "nvvm"
    VENDOR: ClassVar[str] = "nvidia"
    ISA_SUFFIX: ClassVar[str] = ".ptx"

    ptxas: str | None = None    # None, or not in a complete toolkit: the PTX is the binary (the driver JITs it)

    def kernel_passes(self) -> list[str]:
        return [render_pass("convert-fmha-to-nvvm", chip=self.target.arch)]

    def attach_target_pass(self) -> str:
        # PTX 8.1 for sm_90: the matrix and async-copy instructions and red.global.add.v2.f32.
        return render_pass("nvvm-attach-target", chip=self.target.arch, features="+ptx81")

    def module_passes(self) -> list[str]:
        # wgmma / setmaxnreg on a chip without them are refused first (a clear error, not ptxas's or the
        # driver's). Vector atomics and nvgpu ops (mma.sync, ldmatrix, cp.async, TMA, mbarrier) become
        # inline PTX and nvvm ops before the gpu conversion runs; in the kernels only: the host's tensor maps
        # (nvgpu.tma.create.descriptor) stay for the launch plan, which the runtime encodes. Semaphores become
        # acquire / release atomics on their addresses.
        return [render_pass("fmha-check-chip-features", target=self.target.arch), "fmha-vector-atomics-to-nvvm",
                render_pass("fmha-semaphores-to-llvm", target=self.VENDOR), "gpu.module(convert-nvgpu-to-nvvm)"]

    def gpu_to_llvm_passes(self) -> list[str]:
        return ["convert-nvvm-to-llvm", "convert-gpu-to-nvvm"]

    def fixup_passes(self) -> list[str]:
        return ["fmha-extern-dynamic-shared", "fmha-grid-constant-params"]

    def binary_options(self) -> dict | None:
        toolkit = cuda_toolkit(self.ptxas)
        return None if toolkit is None else {"format": "bin", "toolkit": toolkit}

    @property
    def binary_format(self) -> str:
        return "ptx" if cuda_toolkit(self.ptxas) is None else "cubin"
