"""Compilation targets: frozen hardware facts about each GPU architecture. Importable without MLIR.

Body choices (block sizes, tiles) live in fmha_mlir.kernel_config; only what the chip *is* is here.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import Reason

# Hopper's register file (32-bit registers an SM) and the per-thread budgets setmaxnreg can set: what a
# warp-specialised kernel's budgets (bodies.wgmma.register_budgets) and the interpreter's checks rest on.
HOPPER_REGISTER_FILE = 64 * 1024
SETMAXNREG_BUDGETS = range(24, 257, 8)
SETMAXNREG_RULE = (f"setmaxnreg takes {SETMAXNREG_BUDGETS[0]}..{SETMAXNREG_BUDGETS[-1]} registers in steps of "
                   f"{SETMAXNREG_BUDGETS.step}")


@dataclass(frozen=True)
class Target:
    """One GPU architecture the pipeline can emit code for."""

    arch: str                 # chip name as the backend spells it: gfx942, gfx950, sm_90, sm_90a
    backend: str              # "rocdl" (AMD) or "nvvm" (NVIDIA)
    wave_size: int            # lanes per wave (AMD) / warp (NVIDIA)
    max_threads_per_block: int
    max_shared_bytes: int     # shared memory (LDS) one work-group may use, dynamic opt-in included
    # Arch-specific features ("a" chips: wgmma, setmaxnreg): the code runs on exactly this chip, no later one.
    arch_specific: bool = False

    @property
    def max_grid(self) -> tuple[int, int, int]:
        """Work-groups per grid dimension: CUDA's (2^31 - 1, 65535, 65535); HIP's grid is counted in
        threads, at most 2^32 - 1 per dimension (checked with the block size by grid_problem)."""
        return (2**31 - 1, 65535, 65535) if self.backend == "nvvm" else (2**32 - 1,) * 3

    def grid_problem(self, grid, block) -> str | None:
        """Why `grid` work-groups of `block` threads cannot launch on this target (None: they can)."""
        for axis, (n, threads, limit) in enumerate(zip(grid, block, self.max_grid)):
            count = n if self.backend == "nvvm" else n * threads
            if count > limit:
                what = "work-groups" if self.backend == "nvvm" else "threads"
                return (f"grid dimension {'xyz'[axis]} needs {count} {what}; {self.arch} launches at most {limit}")
        return None

    @property
    def vendor(self) -> str:
        return "amd" if self.backend == "rocdl" else "nvidia"


TARGETS: dict[str, Target] = {
    t.arch: t
    for t in (
        # LDS: 64 KB per work-group on CDNA3, 160 KB on CDNA4 (the ISA guides).
        Target("gfx942", "rocdl", 64, 1024, 64 * 1024),
        Target("gfx950", "rocdl", 64, 1024, 160 * 1024),
        # sm_90: 227 KB per block after cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) (CUDA guide).
        Target("sm_90", "nvvm", 32, 1024, 227 * 1024),
        # sm_90a: sm_90 plus wgmma and setmaxnreg (PTX ISA, "Architecture-specific features").
        Target("sm_90a", "nvvm", 32, 1024, 227 * 1024, arch_specific=True),
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


def nvidia_arch(capability: tuple[int, int]) -> str:
    """The NVIDIA target to compile for a GPU of compute capability `capability`: sm_90a (its wgmma body)
    on exactly a 9.0 chip (H100 / H200), whose arch-specific binaries run nowhere else; sm_90 otherwise
    (PTX the driver JIT-compiles for later chips)."""
    return "sm_90a" if tuple(capability) == (9, 0) else "sm_90"


def prebuilt_archs(arch: str) -> tuple[str, ...]:
    """The targets whose prebuilt bundles a GPU compiled for `arch` runs, best first: an arch-specific
    target's chip also runs its generic target's binaries (sm_90a: then sm_90's)."""
    return (arch, "sm_90") if arch == "sm_90a" else (arch,)
