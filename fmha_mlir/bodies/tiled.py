"""The tiled body: FlashAttention-2's shape on matrix instructions. One work-group per key block, dK and
dV in registers, dQ by f32 atomics into a workspace (docs/design/tiled-body.md), or with grad_accum =
"bf16" by packed bf16 atomics into dq itself (docs/design/accumulation.md). What is common to its
instruction families lives here; each family's configs and table live in mma_sync.py and mfma.py."""
from __future__ import annotations

from dataclasses import replace
from math import lcm

from .. import mask_geometry
from ..dtypes import BYTES
from ..errors import Reason
from ..index_math import maximum, minimum
from ..kernel_config import WGMMA, WGMMA_SHAPE, TiledConfig
from ..matrix_layouts import MMA_M16N8K16
from ..numerics import MATRIX_K16
from ..shape_expr import Dim, Expr, add, ceildiv, mul
from ..spec import AttentionBwdSpec
from ..target import Target
from ..wgmma_layouts import SWIZZLE_ALIGNMENT, dq_run_period
from . import mfma, mma_sync, wgmma
from .common import (COPY_ELEMENTS, DQ_DONE, DQ_SEMAPHORES, ELEMENT_BYTES, LSE_BYTES, TILE_ALIGN, Body, Launch,
                     SharedTile, Workspace, dims_of, row_alignment, row_launch, tiled_row_reasons)
from .mfma import AMD_TILED_TABLE
from .mma_sync import TILED_TABLE
from .wgmma import HOPPER_ARCH, WGMMA_TABLE


def key_blocks(config: TiledConfig) -> Expr:
    """The tiled body's key blocks: one work-group each (per kv head and batch)."""
    return ceildiv(Dim("k", 2), config.block_n)


def convert_blocks(spec: AttentionBwdSpec, config: TiledConfig) -> Expr:
    """With config.dq_convert_rows: the grid's z-slices of convert work-groups appended after the key
    blocks, a slice per (query head of a group, dq_convert_rows rows) and each one a work-group per
    (batch, kv head) as the key blocks' slices have (passes/dq_convert_tail.py numbers them head by head)."""
    return mul(spec.gqa_ratio, ceildiv(Dim("q", 2), config.dq_convert_rows))


def main_grid_blocks(spec: AttentionBwdSpec, config: TiledConfig) -> Expr:
    """The grid's extent along the key blocks: theirs, plus the convert work-groups' slices."""
    if not config.dq_convert_rows:
        return key_blocks(config)
    return add(key_blocks(config), convert_blocks(spec, config))


def instruction_tile(config: TiledConfig) -> tuple[int, int, int, int]:
    """(m, S^T column multiple, column multiple, k) of a unit's instruction tiles: mma.sync's S^T columns
    come in pairs of n-tiles (one ldmatrix x4 feeds two); wgmma takes a narrower N where a unit's columns
    are not whole 64-column blocks (WgmmaMmaAtom.narrowed; wgmma.instruction_reasons for S^T), so its
    units' columns are multiples of the narrowest step."""
    if config.instruction == WGMMA:
        m, _, k = WGMMA_SHAPE
        return m, wgmma.NARROW_N_STEP, wgmma.NARROW_N_STEP, k
    shape = config.mfma
    if shape is None:
        return MMA_M16N8K16.m, 2 * MMA_M16N8K16.n, MMA_M16N8K16.n, MMA_M16N8K16.k
    return shape.m, shape.n, shape.n, shape.k


def tile_hdims(spec: AttentionBwdSpec, config: TiledConfig) -> tuple[int, int]:
    """(hdim_q, hdim_v) of the tiles: each head dim rounded up to the next width whose products the warp
    layouts split into whole instruction tiles (k steps of the contractions, n columns per warp of dK /
    dV and dQ). On wgmma: whole 64-column swizzled blocks (the TMA boxes) and at least one a unit; a unit
    holding more than one block but not whole ones takes narrow products at their ends (d192 over two
    warpgroups: 96 columns each; WgmmaMmaAtom.narrowed). The columns past the head dim are zeros: the
    copies (cp.async or TMA boxes) fill them without reading, the products add nothing from them, and
    dK / dV / dQ skip them (passes/flash_bwd.py)."""
    _, _, n, k = instruction_tile(config)
    block = wgmma.BLOCK_COLUMNS if config.instruction == WGMMA else 1
    splits = ((config.dkv_warps[1], config.dq_warps[1]), (config.dkv_warps[1],))   # units across each head dim
    out = []
    for hdim, units in zip((spec.hdim_q, spec.hdim_v), splits):
        step = lcm(k, block, *(n * u for u in units))
        least = block * max(units) if block > 1 else 0
        out.append(max(-(-hdim // step) * step, least))
    return tuple(out)


def dq_fragment_order(spec: AttentionBwdSpec, config: TiledConfig) -> bool:
    """Whether dq_acc is kept in wgmma's fragment order (wgmma_layouts.dq_fragment_position): where the
    consumers add dQ by f32 atomics, each thread's four values in a block of 16 rows x 8 columns become one
    v4 atomic, a warp's 512 contiguous bytes; the convert gathers them back (lane_slice.read_fragments).
    A thread keeps a place per class of blocks (wgmma_layouts.dq_run_period; flash_bwd.add_dq_runs): one
    where rows hold whole blocks (hdim_q a multiple of 128), else up to wgmma.FRAGMENT_PLACES on rows
    whose P^T and dS^T are not held in registers (the d256 row's d160 / d192). With P^T in registers there
    is no room for them: ptxas -v, varlen on sm_90a's table, spill bytes 112 -> 220 at d64, 20 -> 64 at d96.
    config.dq_fragment = False keeps the logical order everywhere."""
    if getattr(config, "instruction", "") != WGMMA or config.dq_bulk or spec.deterministic or spec.grad_accum != "f32" \
            or not config.dq_fragment:
        return False
    places = dq_run_period(spec.hdim_q)
    return spec.hdim_q % 128 == 0 or (not config.p_in_registers and places <= wgmma.FRAGMENT_PLACES)


def dq_in_turns(spec: AttentionBwdSpec, config: TiledConfig) -> bool:
    """Whether deterministic mode adds dQ into one dq_acc, the key blocks of a query block taking turns
    (docs/design/accumulation.md): where a writer warp reduces dQ's tiles (config.dq_bulk), it waits for
    its key block's turn on the query block's semaphore before its reduce-adds and signals once they
    completed (config.turn_overlap: once its next reduce-adds are issued too); the key blocks go in
    config.turn_order, and the grid dispatches them in that order. Elsewhere deterministic mode stores one
    partial per key block (the consumers' atomics have no turns yet)."""
    return spec.deterministic and getattr(config, "dq_bulk", False)


def convert_tail_reasons(spec: AttentionBwdSpec) -> list[Reason]:
    """Why config.dq_convert_rows cannot take this spec (the refusal, and the table's reason to drop it)."""
    if spec.deterministic or spec.varlen:
        return [Reason("config.dq_convert_rows", "the appended work-groups convert the rows of whole heads of "
                                                 "fixed-length sequences, added in any order",
                       "use dq_convert_rows = 0 (deterministic mode and varlen keep the convert kernel)")]
    return []


def l2_section_reasons(spec: AttentionBwdSpec) -> list[Reason]:
    """Why config.l2_section_bytes cannot take this spec (the refusal, and the table's reason to drop it)."""
    if spec.varlen:
        return [Reason("config.l2_section_bytes", "sections count the heads of fixed-length sequences; varlen "
                                                  "sequences are packed", "use l2_section_bytes = 0")]
    return []


class TiledBody(Body):
    name = "tiled"
    config_class = TiledConfig
    numerics = MATRIX_K16

    def target_reasons(self, spec, target, config):
        if config.instruction == WGMMA and target.vendor == "nvidia":
            out = wgmma.instruction_reasons(target, config)
        else:
            out = (mma_sync if target.vendor == "nvidia" else mfma).instruction_reasons(target, config)
        if not out and not self.spec_reasons(spec, config):
            need = self.shared_layout(spec, config)[-1].end
            if need > target.max_shared_bytes:
                out.append(Reason("config", f"the tiles need {need} bytes of shared memory, {target.arch} has "
                                            f"{target.max_shared_bytes}", "use smaller block_m / block_n or stages=1"))
        if config.threads > target.max_threads_per_block:
            out.append(Reason("config.warps", f"{config.threads} threads per work-group, {target.arch} allows "
                                              f"{target.max_threads_per_block}"))
        if not out and target.vendor == "amd" and not tiled_table(target.arch).get(_bucket(spec)):
            out.append(Reason("hdim_q", f"the tiled body has no {target.arch} tile for head dim {_bucket(spec)}: "
                                        "AMD_TILED_TABLE says why", "use body='warp'"))
        return out

    def spec_reasons(self, spec, config):
        if spec.dtype not in ("f16", "bf16"):
            return [Reason("dtype", f"the tiled body computes f16 and bf16 on matrix instructions, not {spec.dtype}",
                           "use body='warp' for f32")]
        return tiled_row_reasons(spec, config.wave_size, self.name) + self._tile_reasons(spec, config)

    @staticmethod
    def _tile_reasons(spec, config) -> list[Reason]:
        """The divisibility the fragment arithmetic relies on: each warp's part of a product is whole
        instruction tiles (rows m, columns n; S^T's columns in pairs of mma.sync n-tiles, one ldmatrix x4)
        and every contraction whole instruction k steps, on the tile head dims (tile_hdims). Threads
        [0, 2 block_m) copy LSE and D."""
        m, n_sdp, n, k = instruction_tile(config)
        out = []
        hdim_q, hdim_v = tile_hdims(spec, config)
        bm, bn = config.block_m, config.block_n
        checks = [
            ("sdp_warps", bn % (m * config.sdp_warps[0]) == 0 and bm % (n_sdp * config.sdp_warps[1]) == 0,
             f"block_n / keys must be a multiple of {m} and block_m / queries of {n_sdp}"),
            ("dkv_warps", bn % (m * config.dkv_warps[0]) == 0 and bm % k == 0
             and all(d % (n * config.dkv_warps[1]) == 0 for d in (hdim_q, hdim_v)),
             f"block_n / keys must be a multiple of {m}, each head dim / columns of {n} and block_m of {k}"),
            ("dq_warps", bm % (m * config.dq_warps[0]) == 0 and bn % k == 0
             and hdim_q % (n * config.dq_warps[1]) == 0,
             f"block_m / rows must be a multiple of {m}, hdim_q / columns of {n} and block_n of {k}"),
        ]
        out += [Reason(f"config.{name}", f"{getattr(config, name)} does not tile block_m {bm} x block_n {bn} x "
                                         f"hdim {spec.hdim_q}/{spec.hdim_v}: {why}")
                for name, ok, why in checks if not ok]
        copiers = config.threads - config.consumer_threads if config.producer else config.threads // 2
        if copiers < bm:
            out.append(Reason("config.warps", f"{config.threads} threads cannot copy the {bm} LSE and {bm} D values "
                                              "of a query block at once", "use more warps or a smaller block_m"))
        if config.producer and spec.varlen:
            out.append(Reason("config.producer", "the producer's tensor maps span whole sequences of one batch "
                                                 "entry; varlen sequences are packed", "use producer = false"))
        if config.l2_section_bytes:
            out += l2_section_reasons(spec)
        if config.dq_convert_rows:
            out += convert_tail_reasons(spec)
        if config.dq_bulk and spec.grad_accum != "f32":
            out.append(Reason("config.dq_bulk", "dQ's bulk writes move f32 tiles into dq_acc; bf16 dQ atomics "
                                                "add into dq itself", "use dq_bulk = false"))
        return out

    def default_config(self, spec, target):
        return tiled_config(spec, target)

    def numerics_of(self, spec, config):
        if spec.grad_accum == "bf16":   # one packed bf16 atomic per key block and element
            return replace(self.numerics, dq_add_block=config.block_n)
        return self.numerics

    def workspaces(self, spec, config):
        if spec.grad_accum == "bf16":   # dQ's atomics add into dq itself: no workspace, no convert
            return [Workspace("d", None, dims_of("lse", 3), zero=False)]
        # dQ rows padded to whole query blocks: the atomics of the last block need no bounds checks.
        rows = mul(ceildiv(Dim("q", 2), config.block_m), config.block_m)
        # dQ partials are summed unscaled: the convert applies the softmax scale once per element.
        # Deterministic: each key block writes its own partial, batch-major: [B x key blocks, H, rows, D],
        # unless the key blocks take turns adding into one (dq_in_turns: a semaphore per query block).
        in_turns = dq_in_turns(spec, config)
        partials = spec.deterministic and not in_turns
        batch = mul(Dim("q", 0), key_blocks(config)) if partials else Dim("q", 0)
        zero = not partials   # the convert reads only the partials written (key_block_range)
        semaphores = [Workspace(DQ_SEMAPHORES, None, (Dim("q", 0), Dim("q", 1), ceildiv(
            Dim("q", 2), config.block_m)), zero=True, element="i32")] if in_turns else []
        in_main = bool(config.dq_convert_rows)
        done = [Workspace(DQ_DONE, None, (Dim("k", 0), Dim("k", 1)), zero=True, element="i32")] if in_main else []
        return [Workspace("d", None, dims_of("lse", 3), zero=False),
                Workspace("dq_acc", "dq", (batch, Dim("q", 1), rows, spec.hdim_q), zero=zero, factor=spec.scale,
                          partials=partials, converted_in_main=in_main)] + semaphores + done

    def zeroed_outputs(self, spec):
        return ("dq",) if spec.grad_accum == "bf16" else ()

    def launch(self, stage, spec, config):
        if stage == "dq_dk_dv":
            return Launch(tiled_grid(config, main_grid_blocks(spec, config), Dim("k", 1), Dim("k", 0)),
                          (config.threads, 1, 1), self.shared_layout(spec, config)[-1].end,
                          wgmma.tensor_maps(config) if config.producer else ())
        return row_launch(stage, spec, config)

    def alignment(self, spec, config):
        b = BYTES[spec.dtype]
        rows_q, rows_v = (row_alignment(h, config.wave_size, b) for h in (spec.hdim_q, spec.hdim_v))
        # 16-byte copies of Q, K, V, dO rows; dK, dV stored as pairs (mma.sync) or single elements (MFMA: a
        # lane's accumulators lie along a column); the row kernels' vectors.
        copies = {"q": max(COPY_ELEMENTS, rows_q), "k": max(COPY_ELEMENTS, rows_q), "v": max(COPY_ELEMENTS, rows_v),
                  "do": max(COPY_ELEMENTS, rows_v)}
        stores = 1 if config.mfma else 2
        # bf16 dQ atomics add element pairs (4 bytes) into dq itself.
        dq = max(rows_q, 2) if spec.grad_accum == "bf16" else rows_q
        return {**copies, "o": rows_v, "dq": dq, "dk": stores, "dv": stores}

    def shared_tiles(self, spec, config):
        return tuple(self.shared_layout(spec, config))

    @staticmethod
    def shared_layout(spec: AttentionBwdSpec, config: TiledConfig) -> list[SharedTile]:
        """The dynamic shared memory of dq_dk_dv, in order; the last tile's end is the size."""
        bm, bn, stages = config.block_m, config.block_n, config.stages
        hdim_q, hdim_v = tile_hdims(spec, config)
        wanted = [("k", bn, hdim_q, ELEMENT_BYTES, 1), ("v", bn, hdim_v, ELEMENT_BYTES, 1),
                  ("q", bm, hdim_q, ELEMENT_BYTES, stages), ("do", bm, hdim_v, ELEMENT_BYTES, stages),
                  ("ds", bn, bm, ELEMENT_BYTES, 1)]
        if not config.p_in_registers:
            wanted.append(("p", bn, bm, ELEMENT_BYTES, 1))
        wanted += [("lse", 1, bm, LSE_BYTES, stages), ("d", 1, bm, LSE_BYTES, stages)]
        if config.dq_bulk:   # one step's dQ tile, f32, in 128-byte swizzled blocks of 32 columns
            wanted.append(("dq", bm, hdim_q, LSE_BYTES, 1))
        pad = config.mfma.k_per_lane if config.swizzle == "pad" else 0
        align = SWIZZLE_ALIGNMENT[128] if config.swizzle == "sw128" else TILE_ALIGN   # the swizzle's period
        tiles, offset = [], 0
        for name, rows, cols, element, copies in wanted:
            tiles.append(SharedTile(name, offset, rows, cols, element, copies, pad if element == ELEMENT_BYTES else 0))
            offset = -(-tiles[-1].end // align) * align
        return tiles


# Where (key block, kv head, batch) of a dq_dk_dv work-group sit among the block ids (x, y, z).
_GRID_POSITIONS = {"keys_inner": (0, 1, 2), "keys_outer": (2, 0, 1)}


def tiled_grid(config: TiledConfig, key_block, kv_head, batch) -> tuple:
    """The (x, y, z) of (key block, kv head, batch) in config.grid_order: counts to a grid."""
    out = [None] * 3
    for position, value in zip(_GRID_POSITIONS[config.grid_order], (key_block, kv_head, batch)):
        out[position] = value
    return tuple(out)


def tiled_block_ids(config: TiledConfig, ids) -> tuple:
    """(key block, kv head, batch) from the block ids (x, y, z): the inverse of tiled_grid."""
    return tuple(ids[position] for position in _GRID_POSITIONS[config.grid_order])


def section_heads(spec: AttentionBwdSpec, config: TiledConfig, seqlen_q):
    """How many (batch, kv head) pairs one L2 section takes (config.l2_section_bytes): each pair's rows
    that every key block reads or adds again (its query heads' Q, dO, dq_acc, LSE and D), at least one.
    Number-generic in seqlen_q (an int, or the kernel's index)."""
    row = spec.gqa_ratio * (BYTES[spec.dtype] * (spec.hdim_q + spec.hdim_v) + LSE_BYTES * (spec.hdim_q + 2))
    return maximum(1, config.l2_section_bytes // (seqlen_q * row))


def dispatch_index(kv_head, batch, key_block, kv_heads, batches):
    """The linear id the GPU dispatches the work-group of keys_outer's block ids (kv head, batch, key block)
    in: x fastest (bodies.tiled_grid). Number-generic."""
    return kv_head + kv_heads * (batch + batches * key_block)


def section_block_ids(linear, heads, key_blocks, section) -> tuple:
    """(key block, head) of the work-group dispatched `linear`-th, the heads (batch x kv head, flattened) in
    sections of `section` (the last may hold fewer), each section key block major: the work-groups
    running at once share a section's heads, and a head's key blocks go in their order, as under
    keys_outer (deterministic turns rely on it). Number-generic."""
    first = linear // (section * key_blocks) * section
    width = minimum(section, heads - first)
    rest = linear - first * key_blocks
    return rest // width, first + rest % width


def _bucket(spec: AttentionBwdSpec) -> int:
    hdim = max(spec.hdim_q, spec.hdim_v)
    return next((b for b in sorted(TILED_TABLE) if hdim <= b), max(TILED_TABLE))


def tiled_table(arch: str) -> dict[int, TiledConfig]:
    """The rows by head-dim bucket: AMD's per chip; sm_90a's wgmma rows where it has them (measured faster
    than mma.sync's: reports/bench_notes.md), mma.sync's elsewhere."""
    if arch in AMD_TILED_TABLE:
        return AMD_TILED_TABLE[arch]
    return {**TILED_TABLE, **WGMMA_TABLE} if arch == HOPPER_ARCH else TILED_TABLE


def tiled_config(spec: AttentionBwdSpec, target: Target) -> TiledConfig:
    """The target table's row for the larger head dim (the next bucket up); gfx942 d256 has none (the
    body then refuses with the reason) and takes the d128 row's shape to say so. A wgmma row that does not
    take the spec (a head dim that is not whole 64-column blocks) gives way to mma.sync's; a producer
    row runs without its producer where that is measured faster or the producer cannot take the spec, and
    without L2 sections of heads where they cannot count heads or lost (a mask that cuts tiles, with GQA)."""
    table, bucket, hdim = tiled_table(target.arch), _bucket(spec), max(spec.hdim_q, spec.hdim_v)
    row = replace(table.get(bucket) or table[max(table)], wave_size=target.wave_size)
    if row.l2_section_bytes and (l2_section_reasons(spec)
                                 or (spec.gqa_ratio > 1 and not mask_geometry.hides_nothing(spec.mask))):
        # Packed sequences have no fixed heads to count. Under a mask that cuts tiles with GQA, a work-group
        # walks gqa_ratio heads, so the longest ones are long against an SM's share and keys_outer's
        # longest-first over the whole grid is worth more than L2: measured -7% with sections at
        # B1 H32 Hkv8 S8192 causal (bench_notes.md, "L2 sections of heads, measured").
        row = replace(row, l2_section_bytes=0)
    if row.dq_convert_rows and (convert_tail_reasons(spec)
                                or hdim < wgmma.DQ_CONVERT_SMALLEST_HDIM.get(bucket, 0)):
        # Deterministic mode's turns and partials, and packed sequences, keep the convert kernel; so do the
        # head dims the row pads, where it was measured slower (wgmma.DQ_CONVERT_SMALLEST_HDIM).
        row = replace(row, dq_convert_rows=0)
    lost_bulk = row.dq_bulk and bool(TiledBody().reasons(spec, target, row))
    if lost_bulk:
        # bf16 dQ atomics: the consumers write dQ. (Deterministic mode keeps the writer, its key blocks taking
        # turns at the reduce-adds: dq_in_turns.)
        row = row.without_dq_bulk()
    if row.producer and ((lost_bulk and mask_geometry.hides_nothing(spec.mask))
                         or TiledBody().reasons(spec, target, row)):
        # Measured (bench_notes.md, "Warp specialisation"): on the rows made for dQ's bulk reduce-adds, the
        # producer with the consumers' atomics instead pays only where the mask cuts tiles (+5-8% causal,
        # -4% without a mask); the d256 row, made for atomics, keeps it (+9.7% without a mask, "A wgmma row
        # for d256"), on its 192-column tiles too since they go in L2 sections (d160 +25%, d192 +13% on the
        # H100: "Register budgets and the producer at d160 / d192, measured"; without sections it lost 10-13%
        # there). Varlen cannot take it. The same tiles, copied by every warp, serve the rest.
        row = row.without_producer()
    if row.instruction == WGMMA and (TiledBody().reasons(spec, target, row)
                                     or hdim < wgmma.SMALLEST_HDIM.get(bucket, 0)):
        # (Head dims padded to whole 64-column blocks stay on wgmma down to the row's SMALLEST_HDIM: d80 1.42x
        # and d96 1.39x the mma.sync row, bench_notes.md "wgmma on padded head dims"; d160 on 192-column
        # tiles 1.12x, "d192 and d160 on the d256 row, measured".)
        row = TILED_TABLE[bucket]
    if row.split_tail_loop and (spec.softcap or spec.bias != "none"):
        # Measured on plain scores only; a score modification's unmasked loop spills more once split
        # (ptxas, d128: ALiBi 48 -> 124 bytes, bias + dbias 0 -> 312), so it keeps the per-step test.
        row = replace(row, split_tail_loop=False)
    return row
