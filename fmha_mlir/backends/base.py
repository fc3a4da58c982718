"""What a vendor backend is: the pass pipelines that take fmha kernels to target code.

The compiler runs the target-neutral stages (fmha, stages, gpu) itself; a backend supplies the rest:

  kernel  fmha kernel-level ops -> target kernel IR (docs/ir.md level 5; the CPU interpreter runs it)
  llvm    attach the target, lower gpu.module contents to the LLVM dialect, relax float atomics
  isa     gpu-module-to-binary{format=isa}: AMDGPU assembly or PTX
  binary  gpu-module-to-binary{format=bin}: what the runtime loads (None: the isa text is the binary)

Both isa and binary start from the llvm stage's module.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..target import Target
from .pipeline import nested, render_pass, render_pipeline

BACKEND_STAGES = ("kernel", "llvm", "isa", "binary")


@dataclasses.dataclass(frozen=True)
class Backend:
    target: Target

    BACKEND: ClassVar[str] = ""          # the Target.backend this class compiles for
    VENDOR: ClassVar[str] = ""           # fmha-hardware-atomics' target option
    ISA_SUFFIX: ClassVar[str] = ""       # file suffix of the isa text

    def __post_init__(self):
        if self.target.backend != self.BACKEND:
            raise ValueError(f"{type(self).__name__} compiles for {self.BACKEND} targets, not "
                             f"{self.target.arch} ({self.target.backend})")

    # -- what each vendor fills in -------------------------------------------------------------------

    def kernel_passes(self) -> list[str]:
        raise NotImplementedError

    def attach_target_pass(self) -> str:
        raise NotImplementedError

    def gpu_to_llvm_passes(self) -> list[str]:
        """The conversions to the LLVM dialect that run inside gpu.module, after scf and memref lowering."""
        raise NotImplementedError

    def binary_options(self) -> dict | None:
        """gpu-module-to-binary options for format=bin; None when the isa text is the binary."""
        raise NotImplementedError

    @property
    def binary_format(self) -> str:
        """What `binary` yields: 'hsaco', 'cubin' or 'ptx'."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------------------

    def llvm_passes(self) -> list[str]:
        inside = ["convert-scf-to-cf", "expand-strided-metadata", "lower-affine", *self.gpu_to_llvm_passes()]
        return [self.attach_target_pass(), *self.module_passes(), nested("gpu.module", inside),
                "reconcile-unrealized-casts", render_pass("fmha-hardware-atomics", target=self.VENDOR),
                *self.fixup_passes()]

    def module_passes(self) -> list[str]:
        """Passes on the whole module between attaching the target and the gpu.module lowering."""
        return []

    def fixup_passes(self) -> list[str]:
        """Passes on the lowered LLVM dialect, after the hardware-atomics rewrite."""
        return []

    def stage_pipeline(self, stage: str) -> str | None:
        """The textual pipeline of backend stage `stage`; None for a binary that is the isa text."""
        if stage == "kernel":
            return render_pipeline(self.kernel_passes())
        if stage == "llvm":
            return render_pipeline(self.llvm_passes())
        if stage == "isa":
            return render_pipeline([render_pass("gpu-module-to-binary", format="isa")])
        if stage == "binary":
            options = self.binary_options()
            return None if options is None else render_pipeline([render_pass("gpu-module-to-binary", **options)])
        raise ValueError(f"unknown backend stage {stage!r}; the backend stages are {', '.join(BACKEND_STAGES)}")
