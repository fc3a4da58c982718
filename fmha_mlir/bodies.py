"""The body layer: what each kernel body needs, answered without MLIR (the runtime imports it too).

A body is one way of computing the dq_dk_dv stage (plus its row stages). The passes ask it, never the
dtype: fmha-decompose-bwd which gradients accumulate in f32 workspaces, fmha-stages-to-gpu each stage's
launch geometry, the gate which rounding to model. The IR builders live in passes/ (warp_body.py,
tiled_body.py); this module holds the facts both they and the runtime rely on.

  warp   one wave per query row, a key loop of wave reductions, f32 atomics for dK and dV (the seeds'
         reference design; every dtype, head dims that are multiples of the wave size up to 8 per lane)
  tiled  FlashAttention-2's shape on matrix instructions: one work-group per key block, dK and dV in
         registers, dQ by f32 atomics into a workspace (docs/design/tiled-body.md), or with
         grad_accum = "bf16" by packed bf16 atomics into dq itself (docs/design/accumulation.md)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from .dtypes import BYTES
from .errors import Reason, SpecError
from .kernel_config import MMA_SYNC, KernelConfig
from .matrix_layouts import MFMA_SHAPES, MMA_M16N8K16
from .numerics import MATRIX_K16, SCALAR_ROWS, Numerics
from .shape_expr import Dim, Expr, ceildiv, mul
from .spec import AttentionBwdSpec
from .target import Target

GRADS = ("dq", "dk", "dv")
# The warp body gives each lane hdim / wave_size contiguous elements; past 8 per lane the register cost
# of the loop-carried dQ slice outgrows what the body is built for.
MAX_ELEMENTS_PER_LANE = 8
ELEMENT_BYTES = 2    # the tiled body's operands: f16 / bf16
LSE_BYTES = 4
TILE_ALIGN = 128     # shared tiles start on a 128-byte boundary: the swizzle's bank arithmetic needs it
COPY_ELEMENTS = 8    # one 16-byte cp.async of f16/bf16
# Waves per work-group of the row kernels: one-wave work-groups by the hundred thousand cost more to
# schedule than their bytes take to move (measured on the H200: tools/reports/bench_notes.md).
ROW_KERNEL_WAVES = 8
ROW_BYTES = 16       # what one lane of a row kernel loads at once


@dataclass(frozen=True)
class Workspace:
    """A device buffer the plan allocates: `dims` over problem-operand names, f32."""

    name: str
    grad: str | None     # the gradient it accumulates and is converted into; None for d
    dims: tuple[Expr, ...]
    zero: bool           # zero-filled before the kernels
    factor: float = 1.0  # the convert multiplies by it (a scale the body leaves out of its atomics)
    # Deterministic mode: dims[0] holds batch x partials (one per key block, written, not added); the
    # convert sums them in order.
    partials: bool = False


@dataclass(frozen=True)
class Launch:
    grid: tuple[Expr, Expr, Expr]   # over the stage op's operand names
    block: tuple[int, int, int]
    shared_bytes: int = 0


@dataclass(frozen=True)
class SharedTile:
    """One buffer in the tiled body's dynamic shared memory: `copies` tiles of rows x cols, each row
    followed by `pad` unused elements."""

    name: str
    offset: int          # bytes from the start of dynamic shared memory
    rows: int
    cols: int
    element_bytes: int
    copies: int = 1
    pad: int = 0

    @property
    def pitch(self) -> int:
        """Elements from one row's start to the next's."""
        return self.cols + self.pad

    @property
    def copy_bytes(self) -> int:
        return self.rows * self.pitch * self.element_bytes

    @property
    def end(self) -> int:
        return self.offset + self.copies * self.copy_bytes


def _dims(operand: str, rank: int, last: Expr | None = None) -> tuple[Expr, ...]:
    dims = tuple(Dim(operand, i) for i in range(rank))
    return dims if last is None else dims[:-1] + (last,)


def partials_zeroed(spec: AttentionBwdSpec) -> bool:
    """Whether deterministic mode's stored dbias partials need a zero fill: under a mask a key block
    skips the query blocks it cannot see; without one every partial is written whole. (dQ's convert
    reads only the key blocks that visit a row's query block, so its partials never need one.)"""
    return spec.mask.kind != "none"


def key_blocks(config: KernelConfig) -> Expr:
    """The tiled body's key blocks: one work-group each (per kv head and batch)."""
    return ceildiv(Dim("k", 2), config.block_n)


def bias_accumulation(spec: AttentionBwdSpec) -> tuple[list[Workspace], tuple[str, ...]]:
    """(workspaces, zero-filled outputs) of the bias's gradient, the same for every body: dbias sums dS
    by f32 atomics (several query heads or batches meet where the bias broadcasts) into an f32 workspace
    of the bias's shape, converted to T (into dbias itself for f32); d(slopes) is f32: summed in place.
    Deterministic: dbias_acc is [B, Hq, Sq, Sk], stored (zeroed under a mask, as dQ's partials), and the
    convert sums the dims the bias broadcasts over in order."""
    grads = spec.bias_operands()[1]
    if "dbias" in grads and spec.deterministic:   # one stored partial per (batch, query head)
        dims = (Dim("q", 0), Dim("q", 1), Dim("dbias", 2), Dim("dbias", 3))
        return [Workspace("dbias_acc", "dbias", dims, zero=partials_zeroed(spec), partials=True)], ()
    if "dbias" in grads and spec.dtype != "f32":
        return [Workspace("dbias_acc", "dbias", _dims("dbias", 4), zero=True)], ()
    return [], grads


def sink_accumulation(spec: AttentionBwdSpec) -> tuple[list[Workspace], tuple[str, ...]]:
    """(workspaces, zero-filled outputs) of dsinks, the same for every body: the row stage adds each
    wave's sum of its rows' terms into dsinks by f32 atomics (zero-filled first); deterministic mode
    stores each row's term in `dsinks_acc` [B, Hq, Sq] (every row is written) and `convert_grad {grad =
    "dsinks", partials = true}` sums them per head in a fixed order."""
    if not spec.sinks:
        return [], ()
    if spec.deterministic:
        return [Workspace("dsinks_acc", "dsinks", _dims("lse", 3), zero=False, partials=True)], ()
    return [], ("dsinks",)


# How a kernel uses a buffer argument (the manifest's "access", checked by the runtime against the steps).
READ, WRITE, ACCUMULATE = "read", "write", "accumulate"
ACCESSES = (READ, WRITE, ACCUMULATE)


def stage_output_access(spec: AttentionBwdSpec, config: KernelConfig) -> dict[str, str]:
    """Per gradient, how dq_dk_dv treats its output (a workspace or the gradient itself): ACCUMULATE
    where the plan zero-fills it first (the kernel adds into it, or leaves parts unwritten that are read
    later), WRITE where the kernel stores every element that is read."""
    workspaces = body_of(config).workspaces(spec, config) + bias_accumulation(spec)[0]
    zeroed = {w.grad for w in workspaces if w.grad is not None and w.zero}
    zeroed |= set(body_of(config).zeroed_outputs(spec) + bias_accumulation(spec)[1])
    return {g: ACCUMULATE if g in zeroed else WRITE for g in GRADS + spec.bias_operands()[1]}


def row_stage_output_access(spec: AttentionBwdSpec) -> dict[str, str]:
    """How dot_do_o treats its outputs: d is written; dsinks accumulated (a workspace: written)."""
    return {"d": WRITE, **({"dsinks_out": WRITE if spec.deterministic else ACCUMULATE} if spec.sinks else {})}


def row_lanes(hdim: int | None, wave_size: int, element_bytes: int) -> int:
    """Lanes that share one row in the row kernels: each lane moves 16 bytes (a power-of-two number of
    lanes per row, at most a wave); else, and for rows of dynamic length (hdim None), the whole wave."""
    if hdim is None:
        return wave_size
    wide = ROW_BYTES // element_bytes
    lanes = hdim // wide if hdim % wide == 0 else 0
    if 1 <= lanes <= wave_size and lanes & (lanes - 1) == 0:
        return lanes
    return wave_size


def row_stage_hdim(stage: str, spec: AttentionBwdSpec) -> int | None:
    """The length of a row stage's rows; None for convert_dbias, whose rows are seqlen_k long, and
    convert_dsinks, which walks a head's rows of every batch."""
    if stage in ("convert_dbias", "convert_dsinks"):
        return None
    return spec.hdim_q if stage in ("convert_dq", "convert_dk") else spec.hdim_v


def _row_launch(stage: str, spec: AttentionBwdSpec, config: KernelConfig) -> Launch:
    """ROW_KERNEL_WAVES waves per work-group, row_lanes lanes per row: o's rows for dot_do_o, out's for a
    convert, threads / row_lanes rows per work-group."""
    if stage == "convert_dsinks":   # one wave per head sums its rows in a fixed order
        return Launch((1, Dim("out", 0), 1), (config.wave_size, 1, 1))
    rows = "o" if stage == "dot_do_o" else "out"
    threads = config.wave_size * ROW_KERNEL_WAVES
    per_block = threads // row_lanes(row_stage_hdim(stage, spec), config.wave_size, BYTES[spec.dtype])
    return Launch((ceildiv(Dim(rows, 2), per_block), Dim(rows, 1), Dim(rows, 0)), (threads, 1, 1))


def row_reasons(spec: AttentionBwdSpec, wave_size: int, where: str, body: str) -> list[Reason]:
    """Limits of the one-wave-per-row kernels (the warp body, and the row stages of every body)."""
    out = []
    on = f" on {where}" if where else ""
    for name in ("hdim_q", "hdim_v"):
        value = getattr(spec, name)
        if value % wave_size or value // wave_size > MAX_ELEMENTS_PER_LANE:
            out.append(Reason(name, f"{value} is not supported by the {body} body{on} (wave size {wave_size})",
                              f"use a multiple of {wave_size} from {wave_size} to {wave_size * MAX_ELEMENTS_PER_LANE}"))
    return out


def row_alignment(hdim: int, wave_size: int, element_bytes: int) -> int:
    """Elements a row kernel's per-lane vector claims: the largest power of two dividing its length."""
    per_lane = hdim // row_lanes(hdim, wave_size, element_bytes)
    return per_lane & -per_lane if per_lane else 1


class Body:
    name: ClassVar[str]
    numerics: ClassVar[Numerics]

    def reasons(self, spec: AttentionBwdSpec, target: Target, config: KernelConfig) -> list[Reason]:
        """Every reason this body cannot compute `spec` on `target` with `config`."""
        return (self._common_reasons(spec, target, config) or self.target_reasons(spec, target, config)
                or self.spec_reasons(spec, config))

    def spec_reasons(self, spec: AttentionBwdSpec, config: KernelConfig) -> list[Reason]:
        """What the body cannot do whatever the target (the IR verifier's check, which has no target)."""
        raise NotImplementedError

    def numerics_of(self, spec: AttentionBwdSpec, config: KernelConfig) -> Numerics:
        """How this body's kernels for `spec` round and sum (the gate's model; the manifest's numerics)."""
        return self.numerics

    def target_reasons(self, spec: AttentionBwdSpec, target: Target, config: KernelConfig) -> list[Reason]:
        return []

    def default_config(self, spec: AttentionBwdSpec, target: Target) -> KernelConfig:
        raise NotImplementedError

    def workspaces(self, spec: AttentionBwdSpec, config: KernelConfig) -> list[Workspace]:
        raise NotImplementedError

    def zeroed_outputs(self, spec: AttentionBwdSpec) -> tuple[str, ...]:
        """Outputs the dq_dk_dv kernel accumulates into directly (zero-filled first)."""
        return ()

    def launch(self, stage: str, spec: AttentionBwdSpec, config: KernelConfig) -> Launch:
        raise NotImplementedError

    def alignment(self, spec: AttentionBwdSpec, config: KernelConfig) -> dict[str, int]:
        """Per problem tensor, the element multiple its strides (and address) must be."""
        raise NotImplementedError

    def _common_reasons(self, spec, target, config) -> list[Reason]:
        reasons = list(config.reasons())
        if not reasons and config.body != self.name:
            reasons.append(Reason("config.body", f"the {self.name} body cannot run a {config.body} config"))
        if not reasons and config.wave_size != target.wave_size:
            reasons.append(Reason("config.wave_size", f"{config.wave_size}, but {target.arch} waves have "
                                                      f"{target.wave_size} lanes"))
        return reasons


class WarpBody(Body):
    name = "warp"
    numerics = SCALAR_ROWS

    def target_reasons(self, spec, target, config):
        return row_reasons(spec, config.wave_size, target.arch, self.name)

    def spec_reasons(self, spec, config):
        out = row_reasons(spec, config.wave_size, "", self.name)
        if spec.deterministic:
            out.append(Reason("deterministic", "the warp body sums dK and dV over query rows by f32 atomics, in "
                                               "any order", "use the tiled body (f16 / bf16), or deterministic=False"))
        if spec.grad_accum != "f32":
            out.append(Reason("grad_accum", "the warp body stores dQ (one wave owns a row) and adds dK / dV by f32 "
                                            "atomics: it has no dQ atomics to make bf16",
                              "use the tiled body, or grad_accum='f32'"))
        return out

    def default_config(self, spec, target):
        return KernelConfig(body="warp", wave_size=target.wave_size)

    def workspaces(self, spec, config):
        out = [Workspace("d", None, _dims("lse", 3), zero=False)]
        if spec.dtype != "f32":
            out += [Workspace(f"{g}_acc", g, _dims(g, 4, hdim), zero=True)
                    for g, hdim in (("dk", spec.hdim_q), ("dv", spec.hdim_v))]
        return out

    def zeroed_outputs(self, spec):
        return ("dk", "dv") if spec.dtype == "f32" else ()

    def launch(self, stage, spec, config):
        if stage == "dq_dk_dv":
            return Launch((Dim("q", 2), Dim("q", 1), Dim("q", 0)), (config.wave_size, 1, 1))
        return _row_launch(stage, spec, config)

    def alignment(self, spec, config):
        w, b = config.wave_size, BYTES[spec.dtype]
        q, v = spec.hdim_q // w, spec.hdim_v // w   # the dq_dk_dv kernel's per-lane slices
        q, v = (max(x & -x, 1) for x in (q, v))
        rq, rv = row_alignment(spec.hdim_q, w, b), row_alignment(spec.hdim_v, w, b)
        return {"q": q, "k": q, "dq": max(q, rq), "dk": max(q, rq), "v": v, "o": rv, "do": max(v, rv),
                "dv": max(v, rv)}


class TiledBody(Body):
    name = "tiled"
    numerics = MATRIX_K16

    def target_reasons(self, spec, target, config):
        out = self._instruction_reasons(target, config)
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

    @staticmethod
    def _instruction_reasons(target, config) -> list[Reason]:
        """The matrix instruction must be the target's, and MFMA configs take what the MFMA body builds:
        register-staged copies (one Q / dO buffer), P^T and dS^T through LDS, padded or plain tiles."""
        shape = config.mfma
        if target.vendor == "nvidia":
            if config.instruction != MMA_SYNC:
                return [Reason("config.instruction", f"{config.instruction} is not an {target.arch} instruction",
                               f"use {MMA_SYNC}")]
            return [] if config.swizzle != "pad" else [
                Reason("config.swizzle", "'pad' is the MFMA body's layout", "use swizzle='xor' or 'none'")]
        if shape is None or target.arch not in shape.chips:
            have = [f"mfma.{n}" for n, s in MFMA_SHAPES.items() if target.arch in s.chips]
            return [Reason("config.instruction", f"{config.instruction} is not an {target.arch} instruction",
                           f"use one of {', '.join(have)}")]
        wrong = [(name, value, want) for name, value, want in (("stages", config.stages, (1,)),
                                                                 ("p_in_registers", config.p_in_registers, (False,)),
                                                                 ("swizzle", config.swizzle, ("pad", "none")))
                 if value not in want]
        return [Reason(f"config.{name}", f"{value!r}: the MFMA body builds {' or '.join(map(repr, want))} only",
                       f"use {name}={want[0]!r}") for name, value, want in wrong]

    def spec_reasons(self, spec, config):
        if spec.dtype not in ("f16", "bf16"):
            return [Reason("dtype", f"the tiled body computes f16 and bf16 on matrix instructions, not {spec.dtype}",
                           "use body='warp' for f32")]
        return row_reasons(spec, config.wave_size, "", self.name) + self._tile_reasons(spec, config)

    @staticmethod
    def _tile_reasons(spec, config) -> list[Reason]:
        """The divisibility the fragment arithmetic relies on: each warp's part of a product is whole
        instruction tiles (rows m, columns n; S^T's columns in pairs of mma.sync n-tiles, one ldmatrix x4)
        and every contraction whole instruction k steps. Threads [0, 2 block_m) copy LSE and D."""
        m, n_sdp, n, k = instruction_tile(config)
        out = []
        for name in ("hdim_q", "hdim_v"):
            if getattr(spec, name) % k:
                out.append(Reason(name, f"{getattr(spec, name)} is not a multiple of {k} (the matrix instruction's K)",
                                  f"use a multiple of {k}, or body='warp'"))
        bm, bn = config.block_m, config.block_n
        checks = [
            ("sdp_warps", bn % (m * config.sdp_warps[0]) == 0 and bm % (n_sdp * config.sdp_warps[1]) == 0,
             f"block_n / keys must be a multiple of {m} and block_m / queries of {n_sdp}"),
            ("dkv_warps", bn % (m * config.dkv_warps[0]) == 0 and bm % k == 0
             and all(d % (n * config.dkv_warps[1]) == 0 for d in (spec.hdim_q, spec.hdim_v)),
             f"block_n / keys must be a multiple of {m}, each head dim / columns of {n} and block_m of {k}"),
            ("dq_warps", bm % (m * config.dq_warps[0]) == 0 and bn % k == 0
             and spec.hdim_q % (n * config.dq_warps[1]) == 0,
             f"block_m / rows must be a multiple of {m}, hdim_q / columns of {n} and block_n of {k}"),
        ]
        out += [Reason(f"config.{name}", f"{getattr(config, name)} does not tile block_m {bm} x block_n {bn} x "
                                         f"hdim {spec.hdim_q}/{spec.hdim_v}: {why}")
                for name, ok, why in checks if not ok]
        if config.threads < 2 * bm:
            out.append(Reason("config.warps", f"{config.threads} threads cannot copy the {bm} LSE and {bm} D values "
                                              "of a query block at once", "use more warps or a smaller block_m"))
        return out

    def default_config(self, spec, target):
        return tiled_config(spec, target)

    def numerics_of(self, spec, config):
        if spec.grad_accum == "bf16":   # one packed bf16 atomic per key block and element
            return replace(self.numerics, dq_add_block=config.block_n)
        return self.numerics

    def workspaces(self, spec, config):
        if spec.grad_accum == "bf16":   # dQ's atomics add into dq itself: no workspace, no convert
            return [Workspace("d", None, _dims("lse", 3), zero=False)]
        # dQ rows padded to whole query blocks: the atomics of the last block need no bounds checks.
        rows = mul(ceildiv(Dim("q", 2), config.block_m), config.block_m)
        # dQ partials are summed unscaled: the convert applies the softmax scale once per element.
        # Deterministic: each key block writes its own partial, batch-major: [B x key blocks, H, rows, D].
        batch = mul(Dim("q", 0), key_blocks(config)) if spec.deterministic else Dim("q", 0)
        zero = not spec.deterministic   # the convert reads only the partials written (key_block_range)
        return [Workspace("d", None, _dims("lse", 3), zero=False),
                Workspace("dq_acc", "dq", (batch, Dim("q", 1), rows, spec.hdim_q), zero=zero, factor=spec.scale,
                          partials=spec.deterministic)]

    def zeroed_outputs(self, spec):
        return ("dq",) if spec.grad_accum == "bf16" else ()

    def launch(self, stage, spec, config):
        if stage == "dq_dk_dv":
            return Launch(tiled_grid(config, key_blocks(config), Dim("k", 1), Dim("k", 0)),
                          (config.threads, 1, 1), self.shared_layout(spec, config)[-1].end)
        return _row_launch(stage, spec, config)

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

    @staticmethod
    def shared_layout(spec: AttentionBwdSpec, config: KernelConfig) -> list[SharedTile]:
        """The dynamic shared memory of dq_dk_dv, in order; the last tile's end is the size."""
        bm, bn, stages = config.block_m, config.block_n, config.stages
        wanted = [("k", bn, spec.hdim_q, ELEMENT_BYTES, 1), ("v", bn, spec.hdim_v, ELEMENT_BYTES, 1),
                  ("q", bm, spec.hdim_q, ELEMENT_BYTES, stages), ("do", bm, spec.hdim_v, ELEMENT_BYTES, stages),
                  ("ds", bn, bm, ELEMENT_BYTES, 1)]
        if not config.p_in_registers:
            wanted.append(("p", bn, bm, ELEMENT_BYTES, 1))
        wanted += [("lse", 1, bm, LSE_BYTES, stages), ("d", 1, bm, LSE_BYTES, stages)]
        pad = config.mfma.k_per_lane if config.swizzle == "pad" else 0
        tiles, offset = [], 0
        for name, rows, cols, element, copies in wanted:
            tiles.append(SharedTile(name, offset, rows, cols, element, copies, pad if element == ELEMENT_BYTES else 0))
            offset = -(-tiles[-1].end // TILE_ALIGN) * TILE_ALIGN
        return tiles


# Where (key block, kv head, batch) of a dq_dk_dv work-group sit among the block ids (x, y, z).
_GRID_POSITIONS = {"keys_inner": (0, 1, 2), "keys_outer": (2, 0, 1)}


def tiled_grid(config: KernelConfig, key_block, kv_head, batch) -> tuple:
    """The (x, y, z) of (key block, kv head, batch) in config.grid_order: counts to a grid."""
    out = [None] * 3
    for position, value in zip(_GRID_POSITIONS[config.grid_order], (key_block, kv_head, batch)):
        out[position] = value
    return tuple(out)


def tiled_block_ids(config: KernelConfig, ids) -> tuple:
    """(key block, kv head, batch) from the block ids (x, y, z): the inverse of tiled_grid."""
    return tuple(ids[position] for position in _GRID_POSITIONS[config.grid_order])


BODIES: dict[str, Body] = {body.name: body for body in (WarpBody(), TiledBody())}
# body="auto" takes the first body that supports the spec, fastest first.
AUTO_ORDER = ("tiled", "warp")


def instruction_tile(config: KernelConfig) -> tuple[int, int, int, int]:
    """(m, S^T column multiple, n, k) of a warp's instruction tile: mma.sync's S^T columns come in
    pairs of n-tiles (one ldmatrix x4 feeds two)."""
    shape = config.mfma
    if shape is None:
        return MMA_M16N8K16.m, 2 * MMA_M16N8K16.n, MMA_M16N8K16.n, MMA_M16N8K16.k
    return shape.m, shape.n, shape.n, shape.k


# The tiled body's configurations by target and head-dim bucket (the larger head dim, next bucket up).
# sm_90: chosen by measurement on the H200 (tools/reports/bench_notes.md says which run picked each row
# and what it beat).
_SM90 = dict(body="tiled", wave_size=32, warps=8, instruction=MMA_SYNC, swizzle="xor")
TILED_TABLE: dict[int, KernelConfig] = {
    64: KernelConfig(**_SM90, block_m=128, block_n=128, stages=2, sdp_warps=(4, 2), dkv_warps=(4, 2),
                     dq_warps=(4, 2), p_in_registers=False),
    128: KernelConfig(**_SM90, block_m=64, block_n=128, stages=2, sdp_warps=(4, 2), dkv_warps=(4, 2),
                      dq_warps=(2, 4), p_in_registers=False),
    256: KernelConfig(**_SM90, block_m=64, block_n=64, stages=2, sdp_warps=(2, 4), dkv_warps=(2, 4),
                      dq_warps=(2, 4), p_in_registers=False),
}

# gfx942 / gfx950: no AMD GPU is lent, so these are chosen from the code objects (tools/amd_static_report.py,
# tools/reports/amd_static.md), by three rules:
#   - occupancy >= 2 waves per SIMD: 8 waves per CU (4 SIMDs), i.e. one 8-wave work-group whose LDS
#     (K, V, Q, dO, P^T, dS^T, LSE, D: TiledBody.shared_layout) fits the CU's 64 KB (gfx942) / 160 KB
#     (gfx950); registers are not the limit (the report shows < 128 VGPRs + AGPRs per lane);
#   - every wave owns whole instruction tiles of S^T, dK / dV and dQ: 16x16 instructions, since with 8
#     waves the S^T tile of these blocks (bn x bm <= 8192) has too few 32x32 tiles to go round;
#   - within that, the largest key block (fewer key blocks: fewer dQ atomics per FLOP and more reuse of
#     Q / dO per load), then the largest query block;
#   - rows of the 2-byte tiles padded by one operand fragment (swizzle="pad": 8 or 16 bytes), so a
#     fragment read's 16 rows start in different banks (test_lds_banks.py: 16x fewer LDS passes).
# gfx942 has no d256 row: K, V, Q and dO of the smallest block that gives 8 waves whole S^T tiles
# (64 keys x 32 queries) need 96 KB of LDS; those specs take the warp body.
_AMD = dict(body="tiled", wave_size=64, warps=8, stages=1, swizzle="pad")
AMD_TILED_TABLE: dict[str, dict[int, KernelConfig]] = {
    "gfx942": {   # 64 KB LDS, 16x16x16
        64: KernelConfig(**_AMD, instruction="mfma.16x16x16", block_m=64, block_n=64, sdp_warps=(4, 2),
                         dkv_warps=(4, 2), dq_warps=(4, 2)),                        # 51.5 KB LDS
        128: KernelConfig(**_AMD, instruction="mfma.16x16x16", block_m=32, block_n=64, sdp_warps=(4, 2),
                          dkv_warps=(4, 2), dq_warps=(2, 4)),                       # 58.8 KB
    },
    "gfx950": {   # 160 KB LDS, the double-K 16x16x32
        64: KernelConfig(**_AMD, instruction="mfma.16x16x32", block_m=64, block_n=128, sdp_warps=(4, 2),
                         dkv_warps=(4, 2), dq_warps=(4, 2)),                        # 90.5 KB
        128: KernelConfig(**_AMD, instruction="mfma.16x16x32", block_m=32, block_n=128, sdp_warps=(4, 2),
                          dkv_warps=(4, 2), dq_warps=(2, 4)),                       # 105.3 KB
        256: KernelConfig(**_AMD, instruction="mfma.16x16x32", block_m=32, block_n=64, sdp_warps=(4, 2),
                          dkv_warps=(4, 2), dq_warps=(2, 4)),                       # 109.3 KB
    },
}


def _bucket(spec: AttentionBwdSpec) -> int:
    hdim = max(spec.hdim_q, spec.hdim_v)
    return next((b for b in sorted(TILED_TABLE) if hdim <= b), max(TILED_TABLE))


def tiled_table(arch: str) -> dict[int, KernelConfig]:
    return AMD_TILED_TABLE.get(arch, TILED_TABLE)


def tiled_config(spec: AttentionBwdSpec, target: Target) -> KernelConfig:
    """The target table's row for the larger head dim (the next bucket up); gfx942 d256 has none (the
    body then refuses with the reason) and takes the d128 row's shape to say so."""
    table = tiled_table(target.arch)
    return replace(table.get(_bucket(spec)) or table[max(table)], wave_size=target.wave_size)


def get_body(name: str) -> Body:
    if name not in BODIES:
        raise SpecError([Reason("body", f"unknown body {name!r}", f"use one of {', '.join(BODIES)} or auto")])
    return BODIES[name]


def body_of(config: KernelConfig) -> Body:
    return get_body(config.body)


def choose_config(spec: AttentionBwdSpec, target: Target, body: str = "auto") -> KernelConfig:
    """The config to compile `spec` for `target` with: `body` = warp | tiled | auto (the fastest body
    that supports the spec). SpecError with every reason when the requested body cannot."""
    reasons = spec.reasons()
    if reasons:
        raise SpecError(reasons)
    if body != "auto":
        chosen = get_body(body)
        config = chosen.default_config(spec, target)
        check_config(spec, target, config)
        return config
    refused = []
    for name in AUTO_ORDER:
        config = BODIES[name].default_config(spec, target)
        found = BODIES[name].reasons(spec, target, config)
        if not found:
            return config
        refused += found
    raise SpecError(refused)


def check_config(spec: AttentionBwdSpec, target: Target, config: KernelConfig) -> None:
    """SpecError unless `config`'s body can compute `spec` on `target` with it."""
    reasons = spec.reasons() or config.reasons() or body_of(config).reasons(spec, target, config)
    if reasons:
        raise SpecError(reasons)
