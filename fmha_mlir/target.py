"""Compilation targets: frozen facts about each GPU architecture. Importable without MLIR."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import Reason


@dataclass(frozen=True)
class Target:
    """One GPU architecture the pipeline can emit code for."""

    arch: str                 # chip name as the backend spells it: gfx942, gfx950, sm_90
    backend: str              # "rocdl" (AMD) or "nvvm" (NVIDIA)
    wave_size: int            # lanes per wave/warp; the warp body's block size
    max_threads_per_block: int
    binary_format: str        # what gpu-module-to-binary{format=bin} yields: "hsaco" or "cubin"
    has_bf16_convert: bool    # a hardware f32->bf16 convert (gfx942 emulates it in software)

    @property
    def vendor(self) -> str:
        return "amd" if self.backend == "rocdl" else "nvidia"

    @property
    def isa_format(self) -> str:
        """What gpu-module-to-binary{format=isa} yields: AMDGPU assembly or PTX."""
        return "amdgcn" if self.backend == "rocdl" else "ptx"


TARGETS: dict[str, Target] = {
    t.arch: t
    for t in (
        Target("gfx942", "rocdl", 64, 1024, "hsaco", has_bf16_convert=False),
        Target("gfx950", "rocdl", 64, 1024, "hsaco", has_bf16_convert=True),
        Target("sm_90", "nvvm", 32, 1024, "cubin", has_bf16_convert=True),
    )
}


def target_reasons(arch: str) -> list[Reason]:
    if arch in TARGETS:
        return []
    return [Reason("target", f"unknown architecture {arch!r}", f"use one of {', '.join(TARGETS)}")]


def get_target(arch: str) -> Target:
    """The Target for `arch`; a SpecError naming the known ones otherwise."""
    from .errors import SpecError

    reasons = target_reasons(arch)
    if reasons:
        raise SpecError(reasons)
    return TARGETS[arch]
