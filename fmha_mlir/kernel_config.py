"""How a backward is computed: the body and its tuning knobs (numpy only: importable without MLIR).

An AttentionBwdSpec says *what* (dtype, head dims, mask, ...); a KernelConfig says *how*: which body,
and that body's tile sizes, warps, pipeline depth, matrix instruction and warp layouts (one frozen class
per body). It travels in the IR as the `config` dictionary attribute of the problem and stage ops, names
the kernels (`tag`), and is recorded in the bundle manifest. `fmha_mlir.bodies` says which configs a body
accepts for a spec, holds each body's table of defaults, and makes the plan the passes build from.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from .errors import Reason, SpecError
from .matrix_layouts import MFMA_SHAPES
from .target import SETMAXNREG_BUDGETS, SETMAXNREG_RULE

# NVIDIA mma.sync (a warp's m16n8k16), NVIDIA wgmma (sm_90a: a warpgroup's m64n64k16), AMD MFMA (wave64;
# which chips have which: matrix_layouts.MFMA_SHAPES).
MMA_SYNC = "mma.m16n8k16"
WGMMA = "wgmma.m64n64k16"
WGMMA_SHAPE = (64, 64, 16)    # its m, n, k: one warpgroup's instruction tile
INSTRUCTIONS = (MMA_SYNC, WGMMA) + tuple(f"mfma.{name}" for name in MFMA_SHAPES)
# Warps that issue one instruction together: the unit the warp layouts count.
WARPS_PER_UNIT = {WGMMA: 4}
# Shared-memory tile layouts: "xor" (mma.sync: 16-byte chunks XOR-ed with the row), "pad" (MFMA: each row
# of a 2-byte tile padded by one operand fragment, 8 or 16 bytes, so that the rows one fragment read
# touches start in different banks), "sw128" (wgmma: the hardware's 128-byte swizzle over 64-column
# blocks, wgmma_layouts.OperandTile), "none".
SWIZZLES = ("xor", "none", "pad", "sw128")
# How dq_dk_dv's work-groups map to block ids; the hardware dispatches them in linear-id order (x fastest).
#   keys_inner: (key block, kv head, batch): one head's key blocks run together and share its Q / dO in L2.
#   keys_outer: (kv head, batch, key block): every head's first key block goes first; under a causal mask
#               those carry the most query blocks, so the longest work-groups start first (less tail).
#               Measured on the H200 (bench_notes.md v4): +10-29% causal, +0-1.5% without a mask.
GRID_ORDERS = ("keys_inner", "keys_outer")
# Deterministic dQ by turns (config.dq_bulk): the order in which a query block's key blocks reduce-add into
# dq_acc; the grid dispatches key blocks in that order, since a work-group may wait only for ones
# dispatched before it. first_to_last: the grid's own order (longest first under a causal mask, as
# keys_outer), a key block waiting for the ones below it to reach its diagonal. last_to_first: under a
# causal mask a query block's first turn is the key block that starts at it (no wait), but the shortest
# work-groups go first. Measured (H100, bench_notes.md "Deterministic turns and d160's dQ order,
# measured"): first_to_last 1.28-1.69x on causal rows, the same without a mask; the first is the default.
TURN_ORDERS = ("first_to_last", "last_to_first")
MAX_WARPS = 16
# A warp-specialised work-group's producer: one warpgroup that loads by TMA for the consumer warps.
PRODUCER_WARPS = 4


class KernelConfig:
    """What every body's config has: the body it is for (the discriminator that picks the class when a
    config is read from a manifest or an IR attribute) and the wave size it was built for. Each body has
    its own frozen subclass (CONFIG_CLASSES); `to_json` writes one flat dictionary, `body` included."""

    body: ClassVar[str]
    wave_size: int

    def reasons(self) -> list[Reason]:
        """Every structural reason this config is malformed (a body adds its own limits)."""
        return list(self._reasons)

    @cached_property
    def _reasons(self) -> tuple[Reason, ...]:
        # A frozen config's reasons are fixed: validated once per config, whoever asks.
        return tuple(self.structural_reasons())

    def structural_reasons(self) -> list[Reason]:
        if not _positive_int(self.wave_size):
            return [Reason("config.wave_size", f"must be a positive integer (got {self.wave_size!r})")]
        if self.wave_size not in (32, 64):
            return [Reason("config.wave_size", f"{self.wave_size} is no target's wave size", "use 32 or 64")]
        return []

    def check(self) -> None:
        reasons = self.reasons()
        if reasons:
            raise SpecError(reasons)

    @property
    def tag(self) -> str:
        """A readable, unique-per-config part of kernel symbols."""
        raise NotImplementedError

    def to_json(self) -> dict:
        return {"body": self.body, **{f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                                      for f in dataclasses.fields(self)}}

    @staticmethod
    def from_json(data) -> "KernelConfig":
        """The config a manifest or attribute holds (its `body` picks the class; absent: warp); SpecError
        naming what is wrong."""
        if not isinstance(data, dict):
            raise SpecError([Reason("config", f"must be an object, got {type(data).__name__}")])
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        body = fields.pop("body", "warp")
        if not isinstance(body, str) or body not in CONFIG_CLASSES:
            raise SpecError([Reason("config.body", f"unknown body {body!r}", f"use one of {', '.join(BODY_NAMES)}")])
        cls = CONFIG_CLASSES[body]
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - names)
        if unknown:
            raise SpecError([Reason("config", f"unknown field(s) {', '.join(unknown)} for the {body} body",
                                    f"known: body, {', '.join(sorted(names))}")])
        config = cls(**fields)
        config.check()
        return config


@dataclass(frozen=True)
class WarpConfig(KernelConfig):
    """The warp body has no tuning knobs: one wave per query row."""

    body: ClassVar[str] = "warp"
    wave_size: int = 32

    @property
    def tag(self) -> str:
        return f"warp{self.wave_size}"


@dataclass(frozen=True)
class TiledConfig(KernelConfig):
    """The tiled body's tiles, warps, pipeline depth, matrix instruction and warp layouts.

    sdp_warps: units along (keys, queries) of S^T and dP^T;  dkv_warps: along (keys, head dim) of dK, dV;
    dq_warps: along (queries, head dim) of dQ. A unit is the warps that issue one instruction together (a
    warp; a warpgroup of four for wgmma); each layout multiplies out to `units`.
    """

    body: ClassVar[str] = "tiled"
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
    # With a mask that hides nothing: the work-group whose key block crosses seqlen_k runs its own, masked
    # copy of the loop and the others an unmasked one (rows past seqlen_q get lse = +inf), instead of one
    # loop that tests every step. Faster where the unmasked loop then spills less (a table choice).
    split_tail_loop: bool = False
    # Warp specialisation (wgmma): `warps` consume (the products), one more warpgroup produces (TMA copies of
    # K, V, Q, dO and loads of LSE, D through an mbarrier pipeline), each role with its register budget.
    producer: bool = False
    # With a producer: dQ's step tiles go through shared memory, reduced into dq_acc by bulk reduce-adds
    # (cp.reduce.async.bulk) that one producer warp issues, instead of the consumers' per-element atomics.
    dq_bulk: bool = False
    # With a producer: dK and dV rounded into K's and V's shared tiles (stmatrix) once the last step has read
    # them, and stored by TMA boxes, instead of each thread's 4-byte stores of its accumulator pairs.
    dkv_tma_store: bool = False
    # Deterministic dQ by turns (with dq_bulk): the key blocks' order at a query block (TURN_ORDERS), and
    # whether the writer passes a turn on only after its next step's reduce-adds are issued, so that the
    # adds' completion (an L2 round trip) overlaps the next step instead of holding the turn; each key
    # block then trails the one before it by about a step.
    turn_order: str = "first_to_last"
    turn_overlap: bool = False
    # Where the consumers add dQ by f32 atomics on wgmma: dq_acc in wgmma's fragment order wherever the
    # lane places fit (bodies.dq_fragment_order; v4 runs of 512 contiguous bytes a warp), or, False, in
    # its logical order (v2 atomics, no places: fewer registers).
    dq_fragment: bool = True
    # With grid_order keys_outer: the work-groups go in sections of as many (batch, kv head) pairs as fit
    # this many bytes of Q, dO, dq_acc, LSE and D (bodies.tiled.section_heads), key block major within a
    # section, so that the heads being worked on at once stay in L2 (0: one section of every head).
    l2_section_bytes: int = 0
    # With a producer: its warpgroup's register budget a thread (setmaxnreg); the consumers share what the
    # work-group entered with less this (bodies.wgmma.register_budgets). A table choice by ptxas -v: too few
    # and the producer's addresses spill, too many and the consumers' accumulators do.
    producer_registers: int = 24
    # With dQ's bulk reduce-adds: dq_dk_dv converts dq_acc into dQ itself, in work-groups appended to its grid
    # (passes/dq_convert_tail.py), each taking this many query rows of one head once every key block of the
    # head counted its reduce-adds complete, instead of a convert kernel after it (0). The grid dispatches them
    # last, so they run on the SMs the last wave of key blocks leaves idle (bench_notes.md, "dQ converted in
    # the grid, one polling thread, measured": 128 taken on sm_90a's d128 row).
    dq_convert_rows: int = 0

    @property
    def mfma(self):
        """The MFMA shape (matrix_layouts.MfmaShape) of an AMD config; None for NVIDIA's."""
        return MFMA_SHAPES.get(self.instruction.removeprefix("mfma.")) if self.instruction.startswith("mfma.") else None

    @property
    def threads(self) -> int:
        return self.consumer_threads + (PRODUCER_WARPS * self.wave_size if self.producer else 0)

    @property
    def consumer_threads(self) -> int:
        """The threads that compute the products (all of them without a producer)."""
        return self.warps * self.wave_size

    @property
    def warps_per_unit(self) -> int:
        return WARPS_PER_UNIT.get(self.instruction, 1)

    @property
    def units(self) -> int:
        """What the warp layouts split the products over: warps, or warpgroups for wgmma."""
        return self.warps // self.warps_per_unit

    @property
    def tag(self) -> str:
        """e.g. tiled_m64n128w8s2_3fa9c1: the digest tells configs of the same tiles apart."""
        digest = hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:6]
        return f"tiled_m{self.block_m}n{self.block_n}w{self.warps}s{self.stages}_{digest}"

    def without_dq_bulk(self) -> "TiledConfig":
        """The same config with the consumers adding dQ (and so dQ's convert kernel)."""
        return dataclasses.replace(self, dq_bulk=False, dq_convert_rows=0)

    def without_producer(self) -> "TiledConfig":
        """The same tiles copied by every warp: no producer, nor what needs it."""
        return dataclasses.replace(self.without_dq_bulk(), producer=False, dkv_tma_store=False)

    def structural_reasons(self) -> list[Reason]:
        out = []
        for name in ("wave_size", "warps", "stages", "block_m", "block_n"):
            value = getattr(self, name)
            if not _positive_int(value):
                out.append(Reason(f"config.{name}", f"must be a positive integer (got {value!r})"))
        if out:
            return out
        out = super().structural_reasons()
        if self.warps > MAX_WARPS:
            out.append(Reason("config.warps", f"{self.warps} warps is more than {MAX_WARPS}"))
        if self.stages not in (1, 2):
            out.append(Reason("config.stages", f"{self.stages} Q/dO buffers", "use 1 or 2"))
        if not isinstance(self.producer, bool):
            out.append(Reason("config.producer", f"must be true or false (got {self.producer!r})"))
        elif self.producer and self.instruction != WGMMA:
            out.append(Reason("config.producer", f"a producer warpgroup feeds {WGMMA} consumers by TMA, not "
                                                 f"{self.instruction}", "use producer = false"))
        for name, why in (("dkv_tma_store", "dK's and dV's box stores use the tensor maps of a producer body"),
                          ("dq_bulk", "dQ's bulk reduce-adds are issued by the producer warpgroup")):
            value = getattr(self, name)
            if not isinstance(value, bool):
                out.append(Reason(f"config.{name}", f"must be true or false (got {value!r})"))
            elif value and self.producer is not True:
                out.append(Reason(f"config.{name}", why, f"use producer = true, or {name} = false"))
        if not isinstance(self.dq_fragment, bool):
            out.append(Reason("config.dq_fragment", f"must be true or false (got {self.dq_fragment!r})"))
        if not (isinstance(self.l2_section_bytes, int) and self.l2_section_bytes >= 0):
            out.append(Reason("config.l2_section_bytes",
                              f"must be a non-negative integer (got {self.l2_section_bytes!r})"))
        elif self.l2_section_bytes and self.grid_order != "keys_outer":
            out.append(Reason("config.l2_section_bytes", f"sections order the key blocks of grid_order keys_outer, "
                                                         f"not {self.grid_order}",
                              "use grid_order = keys_outer, or l2_section_bytes = 0"))
        rows = self.dq_convert_rows
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            out.append(Reason("config.dq_convert_rows", f"must be a non-negative integer (got {rows!r})"))
        elif self.dq_convert_rows and (self.dq_bulk is not True or self.grid_order != "keys_outer"):
            out.append(Reason("config.dq_convert_rows", "the appended work-groups wait for the writer of dQ's bulk "
                                                        "reduce-adds and follow keys_outer's block ids",
                              "use dq_bulk = true and grid_order = keys_outer, or dq_convert_rows = 0"))
        if not (isinstance(self.producer_registers, int) and self.producer_registers in SETMAXNREG_BUDGETS):
            out.append(Reason("config.producer_registers", f"{SETMAXNREG_RULE}, not {self.producer_registers!r}"))
        if not isinstance(self.turn_overlap, bool):
            out.append(Reason("config.turn_overlap", f"must be true or false (got {self.turn_overlap!r})"))
        elif (self.turn_overlap or self.turn_order != TURN_ORDERS[0]) and self.dq_bulk is not True:
            out.append(Reason("config.turn_order" if self.turn_order != TURN_ORDERS[0] else "config.turn_overlap",
                              "dQ's turns are taken by the writer of dQ's bulk reduce-adds",
                              f"use dq_bulk = true, or turn_order = {TURN_ORDERS[0]} and turn_overlap = false"))
        for name, known, what in (("instruction", INSTRUCTIONS, "matrix instruction"), ("swizzle", SWIZZLES, "swizzle"),
                                  ("grid_order", GRID_ORDERS, "grid order"), ("turn_order", TURN_ORDERS, "turn order")):
            value = getattr(self, name)
            if value not in known:
                out.append(Reason(f"config.{name}", f"unknown {what} {value!r}", f"use one of {', '.join(known)}"))
        if self.warps % self.warps_per_unit:
            out.append(Reason("config.warps", f"{self.instruction} is issued by {self.warps_per_unit} warps together, "
                                              f"and {self.warps} warps are not whole groups of them",
                              f"use a multiple of {self.warps_per_unit} warps"))
            return out
        units, unit = self.units, "warps" if self.warps_per_unit == 1 else "warpgroups"
        for name in ("sdp_warps", "dkv_warps", "dq_warps"):
            layout = getattr(self, name)
            if not (isinstance(layout, tuple) and len(layout) == 2 and all(_positive_int(n) for n in layout)):
                out.append(Reason(f"config.{name}", f"must be two positive integers (got {layout!r})"))
            elif layout[0] * layout[1] != units:
                out.append(Reason(f"config.{name}", f"{layout[0]} x {layout[1]} {unit}, but the work-group has "
                                                    f"{units}", f"make the two multiply to {units}"))
        if self.p_in_registers and (self.sdp_warps != (units, 1) or self.dkv_warps != (units, 1)):
            out.append(Reason("config.p_in_registers", "P^T and dS^T can feed dV and dK from registers only when "
                              f"S^T and dK/dV split the {unit} along the keys alone",
                              f"use sdp_warps = dkv_warps = ({units}, 1), or p_in_registers = false"))
        return out


CONFIG_CLASSES: dict[str, type[KernelConfig]] = {cls.body: cls for cls in (WarpConfig, TiledConfig)}
BODY_NAMES = tuple(CONFIG_CLASSES)


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
