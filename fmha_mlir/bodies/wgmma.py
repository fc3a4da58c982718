"""The tiled body on NVIDIA's wgmma (sm_90a): which configs it takes, and its table. The IR builder is
passes/flash_bwd.py on passes/wgmma_mma_atom.py (a warpgroup's m64n64k16 products, operands by
shared-memory descriptors or, for P^T and dS^T, from registers) with its copies (TMA from a producer
warpgroup on the table's rows, passes/warp_roles.py; cp.async otherwise) into tiles in wgmma's 128-byte swizzle.

Its table is sm_90a's for the head dims up to its largest row (bodies.tiled.tiled_table; the ones between
its rows on padded tiles): measured faster than the mma.sync body on every benchmark row it takes
(reports/bench_notes.md, "The wgmma body", "The Hopper body after this session"). sm_90 keeps mma.sync:
wgmma needs the arch-specific chip."""
from __future__ import annotations

from ..errors import Reason
from ..kernel_config import WGMMA, TiledConfig
from ..target import HOPPER_REGISTER_FILE
from .common import ACCUMULATE, WRITE, TensorMap

HOPPER_ARCH = "sm_90a"

# Two consumer warpgroups fed by a producer warpgroup (TMA, passes/warp_roles.py) whose last warp
# reduce-adds dQ's tiles (dq_bulk), P^T and dS^T from registers (RS), dQ's warpgroups side by side along
# the head dim: the shapes of FlashAttention-3's sm_90 backward (d64: 128 x 128; d128: 64 x 128).
# The work-groups go in L2 sections of 16 MiB of heads (config.l2_section_bytes): measured on the H100
# (bench_notes.md, "L2 sections of heads, measured") +6-8% at d64 and d128 S8192, +22% d128 causal S2048,
# +7% d256, +61-79% on d160 / d192 (whose rows were DRAM-bound), 32 MiB no better; causal GQA lost 7%
# (bodies.tiled.tiled_config drops them there).
# The producer keeps 40 registers and the consumers 232: ptxas -v finds no spills on any of their rows, where
# 24 / 240 spilled 40-192 bytes (the producer's addresses; bench_notes.md, "Register budgets").
_SM90A = dict(wave_size=32, warps=8, instruction=WGMMA, swizzle="sw128", stages=2, p_in_registers=True,
              sdp_warps=(2, 1), dkv_warps=(2, 1), producer=True, dq_bulk=True, l2_section_bytes=16 << 20,
              producer_registers=40)
# dK and dV by TMA box stores (dkv_tma_store) on the d128 and d256 rows, each thread's stores on the d64 row:
# measured in one H100 call (bench_notes.md, "dK and dV stored by TMA", measured) +1.0% geomean over every
# row, d128 causal S2048 +5.5%, d192 +3-4%, but d32 -3.2% and d64 -0.8%, where the tiles are narrow and the
# work-group waiting for the box stores' reads costs more than the stores saved.
# The d128 row converts dQ in its own grid, 128 query rows a work-group (dq_convert_rows): on the H200
# +0.1% to +4.8% on every d128 row against the convert kernel, 256 and 512 rows losing up to 6% at S16384
# (bench_notes.md, "dQ converted in the grid, one polling thread, measured"); the d64 row keeps the
# convert kernel (its consumers spill with the extra branch), and so do head dims the d128 row pads below
# DQ_CONVERT_SMALLEST_HDIM (d80 -0.6%, d96 -2.3% with it in the same H200 call).
WGMMA_TABLE: dict[int, TiledConfig] = {
    64: TiledConfig(**_SM90A, block_m=128, block_n=128, dq_warps=(2, 1)),
    128: TiledConfig(**_SM90A, block_m=64, block_n=128, dq_warps=(1, 2), dkv_tma_store=True, dq_convert_rows=128),
    # d256 (FlashAttention's DSL shape): dK and dV of 128 keys would be 256 f32 a thread, so 64 keys whose
    # head dim the warpgroups split; S^T's query columns split too (m64n32), so P^T and dS^T reach dV and
    # dK through shared memory (all-SS). Two Q / dO stages leave no room for dQ's f32 tile: atomics. Its
    # consumers need 240 registers (232 spill 68 bytes).
    256: TiledConfig(**{**_SM90A, "p_in_registers": False, "dq_bulk": False, "sdp_warps": (1, 2),
                        "dkv_warps": (1, 2), "producer_registers": 24}, block_m=64, block_n=64, dq_warps=(1, 2),
                  dkv_tma_store=True),
}
# The smallest head dim a row takes (default: every one of its bucket): below it the zero columns the tiles
# are padded with cost more than wgmma gains. The d256 row takes d145-d192 on 192-column tiles, 96 columns a
# warpgroup: with L2 sections and its producer d160 2.3x and d192 2.5x the mma.sync row on the H100
# (bench_notes.md, "Register budgets and the producer at d160 / d192, measured"). d136-d144 stay on mma.sync
# from an estimate made before sections (0.85-0.90x at d160's rate then); at today's d160 rate times 136 / 160
# they would be about 1.9x: not measured yet, so not taken.
SMALLEST_HDIM = {256: 145}
# The smallest head dim a row converts dQ in its grid for (config.dq_convert_rows; default: every one of its
# bucket), as SMALLEST_HDIM is for the row itself.
DQ_CONVERT_SMALLEST_HDIM = {128: 97}
# dQ in fragment order: the most places of a lane (classes of column blocks, wgmma_layouts.dq_run_period)
# the consumers keep, two registers each beside the accumulators: d160's 5 (no spills on the d256 row,
# ptxas -v), not d200's 25.
FRAGMENT_PLACES = 5
BLOCK_COLUMNS = 64     # columns of one 128-byte swizzled block: head dims and query blocks come in whole ones
NARROW_N_STEP = 8      # a warpgroup's S^T under 64 columns is one m64nN tile, N a multiple of 8 dividing 64
SWIZZLE = 128
# The tiles a producer loads by TMA, with the rows of one box: K and V once per work-group, Q and dO per step.
PRODUCED_TILES = {"k": "block_n", "v": "block_n", "q": "block_m", "do": "block_m"}
# With dkv_tma_store: each gradient, by its output operand, stored from the shared tile of the input it has
# the shape of (the last step has read it).
STORED_TILES = {"dk_out": "k", "dv_out": "v"}


DQ_BOX_COLUMNS = SWIZZLE // 4   # f32 columns of one swizzled row of dQ's shared tile
CONSUMER_REGISTERS = 240        # the consumers' budget where the file has room for more (FlashAttention-3's)


def entry_registers(config: TiledConfig) -> int:
    """The registers a thread of a producer body's work-group enters with: it runs one an SM
    (hopper_sync.fix_entry_registers), the register file / threads in ptxas's steps of 8."""
    return HOPPER_REGISTER_FILE // config.threads // 8 * 8


def register_budgets(config: TiledConfig) -> tuple[int, int]:
    """(producer, consumers) registers a thread under setmaxnreg: the producer gives back all but
    config.producer_registers of its entry_registers, and the consumers share what that frees, at most
    CONSUMER_REGISTERS."""
    producers = config.threads - config.consumer_threads
    shared = (entry_registers(config) * config.threads - config.producer_registers * producers) \
        // config.consumer_threads
    return config.producer_registers, min(CONSUMER_REGISTERS, shared // 8 * 8)


def tensor_maps(config: TiledConfig) -> tuple[TensorMap, ...]:
    """The producer's tensor maps, in PRODUCED_TILES' order: boxes of one (batch, head)'s rows x one
    swizzled 64-column block, so a box that crosses a sequence end is zero-filled there; then, with
    dq_bulk, dQ's accumulator (dq_acc) in boxes of a query block x 32 f32 columns, reduced into; then, with
    dkv_tma_store, dK and dV in the boxes of K and V, stored into."""
    maps = tuple(TensorMap(name, (1, 1, getattr(config, rows), BLOCK_COLUMNS), SWIZZLE)
                 for name, rows in PRODUCED_TILES.items())
    if config.dq_bulk:
        maps += (TensorMap("dq_out", (1, 1, config.block_m, DQ_BOX_COLUMNS), SWIZZLE, ACCUMULATE),)
    if config.dkv_tma_store:
        maps += tuple(TensorMap(name, (1, 1, config.block_n, BLOCK_COLUMNS), SWIZZLE, WRITE) for name in STORED_TILES)
    return maps


def instruction_reasons(target, config: TiledConfig) -> list[Reason]:
    """wgmma needs the arch-specific chip and tiles in its own swizzle; every tile is whole 64-column blocks
    (the head dims' tiles are padded to them: bodies.tile_hdims)."""
    if not target.arch_specific:
        return [Reason("config.instruction", f"{WGMMA} needs an arch-specific chip (sm_90a), not {target.arch}",
                       "compile with --target sm_90a, or use instruction mma.m16n8k16")]
    out = []
    if config.swizzle != "sw128":
        out.append(Reason("config.swizzle", f"wgmma reads tiles in the hardware's 128-byte swizzle, not "
                                            f"{config.swizzle!r}", "use swizzle='sw128'"))
    entry = entry_registers(config)
    if config.producer and config.producer_registers > entry:
        out.append(Reason("config.producer_registers", f"the producer gives registers back (setmaxnreg.dec) from "
                                                       f"the {entry} a thread of {config.threads} enters with, "
                                                       f"so it cannot keep {config.producer_registers}",
                          f"use at most {entry}"))
    sdp_columns = config.block_m // config.sdp_warps[1]
    if sdp_columns % BLOCK_COLUMNS and BLOCK_COLUMNS % sdp_columns:
        out.append(Reason("config.sdp_warps", f"a warpgroup's {sdp_columns} S^T columns are neither whole "
                                              f"{BLOCK_COLUMNS}-column tiles nor one narrower tile inside a "
                                              "swizzled block", f"give each warpgroup a multiple or a divisor of "
                                                                f"{BLOCK_COLUMNS} query columns"))
    if config.block_m % BLOCK_COLUMNS:
        out.append(Reason("config.block_m", f"{config.block_m} query rows are not a whole number of "
                                            f"{BLOCK_COLUMNS}-column swizzled blocks (dS^T's columns)",
                          f"use a multiple of {BLOCK_COLUMNS}"))
    return out
