"""How a backward is computed: the body and its tuning knobs (numpy only: importable without MLIR).

An AttentionBwdSpec says *what* (dtype, head dims, mask, ...); a KernelConfig says *how*: which body,
tile sizes, warps, pipeline depth, matrix instruction and warp layouts. It travels in the IR as the
`config` attribute of the problem and stage ops, names the kernels (`tag`), and is recorded in the
bundle manifest. `fmha_mlir.bodies` says which configs a body accepts for a spec and picks the default
from the tables below.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from .errors import Reason, SpecError
from .matrix_layouts import MFMA_SHAPES

BODY_NAMES = ("warp", "tiled")
# NVIDIA mma.sync, AMD MFMA (wave64; which chips have which: matrix_layouts.MFMA_SHAPES).
MMA_SYNC = "mma.m16n8k16"
INSTRUCTIONS = (MMA_SYNC,) + tuple(f"mfma.{name}" for name in MFMA_SHAPES)
# Shared-memory tile layouts: "xor" (mma.sync: 16-byte chunks XOR-ed with the row), "pad" (MFMA: each row
# of a 2-byte tile padded by one operand fragment, 8 or 16 bytes, so that the rows one fragment read
# touches start in different banks), "none".
SWIZZLES = ("xor", "none", "pad")
# How dq_dk_dv's work-groups map to block ids; the hardware dispatches them in linear-id order (x fastest).
#   keys_inner: (key block, kv head, batch): one head's key blocks run together and share its Q / dO in L2.
#   keys_outer: (kv head, batch, key block): every head's first key block goes first; under a causal mask
#               those carry the most query blocks, so the longest work-groups start first (less tail).
#               Measured on the H200 (bench_notes.md v4): +10-29% causal, +0-1.5% without a mask.
GRID_ORDERS = ("keys_inner", "keys_outer")
MAX_WARPS = 16


@dataclass(frozen=True)
class KernelConfig:
    """Fields of the tiled body are ignored (left at their defaults) by the warp body.

    sdp_warps: warps along (keys, queries) of S^T and dP^T;  dkv_warps: along (keys, head dim) of dK, dV;
    dq_warps: along (queries, head dim) of dQ. Each layout multiplies out to `warps`.
    """

    body: str = "warp"
    wave_size: int = 32
    block_m: int = 0               # Br: query rows per step of the inner loop
    block_n: int = 0               # Bc: key rows per work-group
    warps: int = 1                 # waves per work-group
    stages: int = 1                # Q / dO shared-memory buffers (2: cp.async double buffering)
    instruction: str = ""          # the matrix instruction
    sdp_warps: tuple[int, int] = (1, 1)
    dkv_warps: tuple[int, int] = (1, 1)
    dq_warps: tuple[int, int] = (1, 1)
    p_in_registers: bool = False   # P^T and dS^T feed dV and dK from the accumulators of S^T and dP^T
    swizzle: str = "none"          # shared-memory tile layout (SWIZZLES)
    grid_order: str = "keys_outer"  # block ids of the work-groups (GRID_ORDERS)

    @property
    def mfma(self):
        """The MFMA shape (matrix_layouts.MfmaShape) of an AMD config; None for NVIDIA's and the warp body's."""
        return MFMA_SHAPES.get(self.instruction.removeprefix("mfma.")) if self.instruction.startswith("mfma.") else None

    @property
    def threads(self) -> int:
        return self.warps * self.wave_size

    def reasons(self) -> list[Reason]:
        """Every structural reason this config is malformed (a body adds its own limits)."""
        out = []
        if self.body not in BODY_NAMES:
            return [Reason("config.body", f"unknown body {self.body!r}", f"use one of {', '.join(BODY_NAMES)}")]
        for name in ("wave_size", "warps", "stages"):
            value = getattr(self, name)
            if not _positive_int(value):
                out.append(Reason(f"config.{name}", f"must be a positive integer (got {value!r})"))
        if out:
            return out
        if self.wave_size not in (32, 64):
            out.append(Reason("config.wave_size", f"{self.wave_size} is no target's wave size", "use 32 or 64"))
        if self.body == "warp":
            defaults = KernelConfig(body="warp", wave_size=self.wave_size)
            if self != defaults:
                changed = [f.name for f in dataclasses.fields(self) if getattr(self, f.name) != getattr(defaults, f.name)]
                out.append(Reason("config", f"the warp body takes no tile options (got {', '.join(changed)})",
                                  "leave them at their defaults"))
            return out
        for name in ("block_m", "block_n"):
            if not _positive_int(getattr(self, name)):
                out.append(Reason(f"config.{name}", f"must be a positive integer (got {getattr(self, name)!r})"))
        if self.warps > MAX_WARPS:
            out.append(Reason("config.warps", f"{self.warps} warps is more than {MAX_WARPS}"))
        if self.stages not in (1, 2):
            out.append(Reason("config.stages", f"{self.stages} Q/dO buffers", "use 1 or 2"))
        if self.instruction not in INSTRUCTIONS:
            out.append(Reason("config.instruction", f"unknown matrix instruction {self.instruction!r}",
                              f"use one of {', '.join(INSTRUCTIONS)}"))
        if self.swizzle not in SWIZZLES:
            out.append(Reason("config.swizzle", f"unknown swizzle {self.swizzle!r}", f"use one of {', '.join(SWIZZLES)}"))
        if self.grid_order not in GRID_ORDERS:
            out.append(Reason("config.grid_order", f"unknown grid order {self.grid_order!r}",
                              f"use one of {', '.join(GRID_ORDERS)}"))
        for name in ("sdp_warps", "dkv_warps", "dq_warps"):
            layout = getattr(self, name)
            if not (isinstance(layout, tuple) and len(layout) == 2 and all(_positive_int(n) for n in layout)):
                out.append(Reason(f"config.{name}", f"must be two positive integers (got {layout!r})"))
            elif layout[0] * layout[1] != self.warps:
                out.append(Reason(f"config.{name}", f"{layout[0]} x {layout[1]} warps, but the work-group has "
                                                    f"{self.warps}", f"make the two multiply to {self.warps}"))
        if self.p_in_registers and (self.sdp_warps != (self.warps, 1) or self.dkv_warps != (self.warps, 1)):
            out.append(Reason("config.p_in_registers", "P^T and dS^T can feed dV and dK from registers only when "
                              "S^T and dK/dV split the warps along the keys alone",
                              f"use sdp_warps = dkv_warps = ({self.warps}, 1), or p_in_registers = false"))
        return out

    def check(self) -> None:
        reasons = self.reasons()
        if reasons:
            raise SpecError(reasons)

    @property
    def tag(self) -> str:
        """A readable, unique-per-config part of kernel symbols: e.g. tiled_m64n128w8s2_3fa9c1."""
        digest = hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:6]
        if self.body == "warp":
            return f"warp{self.wave_size}"
        return f"tiled_m{self.block_m}n{self.block_n}w{self.warps}s{self.stages}_{digest}"

    def to_json(self) -> dict:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, data) -> "KernelConfig":
        """The config a manifest or attribute holds; SpecError naming what is wrong."""
        if not isinstance(data, dict):
            raise SpecError([Reason("config", f"must be an object, got {type(data).__name__}")])
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise SpecError([Reason("config", f"unknown field(s) {', '.join(unknown)}", f"known: {', '.join(sorted(names))}")])
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        config = cls(**fields)
        config.check()
        return config


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
