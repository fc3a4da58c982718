"""The row kernels: dot_do_o and convert_grad, memory-bound row passes every body shares (docs/ir.md
level 4), and the row geometry the warp body's dq_dk_dv uses.

A row is shared by L lanes (fmha_mlir.bodies.row_lanes: 16 bytes per lane where the head dim allows),
lane t owning head-dim elements [t * E, (t + 1) * E), E = hdim / L, computing in f32. Work-group
(x, y, z) of ROW_KERNEL_WAVES waves takes consecutive rows of head y, batch z: hundreds of thousands of
one-wave work-groups with 8-byte loads left the GPU scheduling blocks and waiting on latency instead
of moving bytes (measured: reports/bench_notes.md). The warp body's dq_dk_dv keeps one wave per
row and work-group.
"""
from __future__ import annotations

from dataclasses import dataclass

from fmha_mlir import mask_geometry
from fmha_mlir.bodies import dq_fragment_order
from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import arith, gpu, ir, memref, scf
from fmha_mlir.spec import AttentionBwdSpec

from .ir_builders import f32, index
from .ix import Ix, as_value
from .lane_slice import LaneSlice, copy_partial_sum, copy_slice, load_f32, read_fragments
from .score_mods import LOG2_E


@dataclass(frozen=True)
class Wave:
    """Where a group of `size` lanes works: the row (batch, head, seqlen index) it owns, and this lane's
    place in the group (a whole wave for the warp body; a part of one for the row kernels)."""

    batch: "ir.Value"
    head: "ir.Value"
    row: "ir.Value"
    lane: "ir.Value"
    size: int

    @staticmethod
    def current(size: int) -> "Wave":
        """The wave of a one-wave work-group: row = block id x."""
        block = [gpu.block_id(d) for d in (gpu.Dimension.x, gpu.Dimension.y, gpu.Dimension.z)]
        return Wave(batch=block[2], head=block[1], row=block[0], lane=gpu.thread_id(gpu.Dimension.x), size=size)

    @staticmethod
    def of_rows(threads: int, lanes: int) -> "Wave":
        """Group g of `lanes` lanes in a work-group of `threads`: row = block id x * threads / lanes + g."""
        block = [gpu.block_id(d) for d in (gpu.Dimension.x, gpu.Dimension.y, gpu.Dimension.z)]
        thread = gpu.thread_id(gpu.Dimension.x)
        row = arith.addi(arith.muli(block[0], index(threads // lanes)), arith.divui(thread, index(lanes)))
        return Wave(batch=block[2], head=block[1], row=row, lane=arith.remui(thread, index(lanes)), size=lanes)

    def clamped(self, seqlen: "ir.Value") -> "Wave":
        """The same lanes reading row min(row, seqlen - 1): a row past the end still takes part in its
        wave's reductions (no lane may sit one out), but must store nothing."""
        last = arith.subi(seqlen, index(1))
        return Wave(self.batch, self.head, arith.minui(self.row, last), self.lane, self.size)

    def slice_of(self, buffer: "ir.Value") -> LaneSlice:
        """This lane's slice of the head dim of a rank-4 `buffer`."""
        return LaneSlice.of_lane(self.lane, ir.MemRefType(buffer.type).shape[-1] // self.size)

    @property
    def indices(self) -> list["ir.Value"]:
        return [self.batch, self.head, self.row]


def dot_do_o(op: "ir.Operation", spec: AttentionBwdSpec, wave: Wave) -> None:
    """d[b, h, s] = sum(dO * O) over the row (minus dlse[b, h, s] with lse_grad): lane partials, a
    reduction over the row's lanes, its first lane stores (rows past the end compute on the last row and
    store nothing). With sinks, the row's term of dsinks[h] (sink_term) is stored per row in
    deterministic mode; else the wave sums its rows' terms and its first lane adds them by one atomic."""
    operands = fmha.DotDoOOp.named_operands(op, spec)
    o, do, d = operands["o"], operands["do"], operands["d"]
    seqlen = memref.dim(o, index(2))
    reading = wave.clamped(seqlen)
    row = reading.indices
    lanes = wave.slice_of(o)
    total = dot(load_f32(do, row, lanes), load_f32(o, row, lanes))
    if wave.size > 1:   # a row one lane holds whole (d8 in 16 bytes) has nothing to reduce
        total = fmha.WaveReduceOp.build(total, wave.size)
    if spec.lse_grad:   # dS gains P dLSE: D - dLSE carries it into every body unchanged
        total = arith.subf(total, memref.load(operands["dlse"], row))
    stores = arith.andi(arith.cmpi(arith.CmpIPredicate.eq, wave.lane, index(0)),
                        arith.cmpi(arith.CmpIPredicate.ult, wave.row, seqlen))
    term = None
    if spec.sinks:
        term = sink_term(memref.load(operands["sinks"], [wave.head]), memref.load(operands["lse"], row), total)
    if_first = scf.IfOp(stores)
    with ir.InsertionPoint(if_first.then_block):
        memref.store(total, d, wave.indices)
        if term is not None and spec.deterministic:
            memref.store(term, operands["dsinks_out"], wave.indices)
        scf.yield_([])
    if term is not None and not spec.deterministic:
        _add_wave_sum(arith.select(stores, term, f32(0.0)), operands["dsinks_out"], wave,
                      fmha.config_of(op).wave_size)


def sink_term(sink: "ir.Value", lse: "ir.Value", d: "ir.Value") -> "ir.Value":
    """A row's term of dsinks: -exp(sink - lse) D, the sink's probability in the row times -D (D minus
    dlse where the lse has a gradient). sink - lse is rounded once at the size of the difference. A row
    whose lse is -inf (no key, no sink: torch.logsumexp's convention) gives 0, not exp(+inf) x 0; lse
    = +inf or sink = -inf give exp2(-inf) = 0."""
    shifted = arith.mulf(arith.subf(sink, lse), f32(LOG2_E))
    probability = fmha.Exp2Op.build(shifted)
    empty = arith.cmpf(arith.CmpFPredicate.OEQ, lse, f32(float("-inf")))
    return arith.select(empty, f32(0.0), arith.negf(arith.mulf(probability, d)))


def _add_wave_sum(value: "ir.Value", buffer: "ir.Value", wave: Wave, wave_size: int) -> None:
    """buffer[head] += the sum of `value` over the hardware wave (its rows share the head), added by the
    wave's first lane: one atomic per wave, not per row."""
    thread = gpu.thread_id(gpu.Dimension.x)
    if wave.size < wave_size:
        value = fmha.WaveReduceOp.build(value, wave_size)
    first = scf.IfOp(arith.cmpi(arith.CmpIPredicate.eq, arith.remui(thread, index(wave_size)), index(0)))
    with ir.InsertionPoint(first.then_block):
        fmha.AtomicAddOp.build(value, buffer, [wave.head])
        scf.yield_([])


def sum_sink_terms(op: "ir.Operation", spec: AttentionBwdSpec, wave: Wave) -> None:
    """convert_grad {grad = "dsinks"}: out[h] = factor * the sum of acc[b, h, s] over b and s, one wave
    per head: lane t sums rows t, t + W, ... of each batch in order, then the wave's reduction; the
    same order on every run (deterministic mode)."""
    acc, out = list(op.operands)[:2]
    batches, rows = memref.dim(acc, index(0)), memref.dim(acc, index(2))
    over_batches = scf.ForOp(index(0), batches, index(1), [f32(0.0)])
    with ir.InsertionPoint(over_batches.body):
        over_rows = scf.ForOp(wave.lane, rows, index(wave.size), [over_batches.inner_iter_args[0]])
        with ir.InsertionPoint(over_rows.body):
            at = [over_batches.induction_variable, wave.head, over_rows.induction_variable]
            scf.yield_([arith.addf(over_rows.inner_iter_args[0], memref.load(acc, at))])
        scf.yield_(list(over_rows.results))
    total = fmha.WaveReduceOp.build(over_batches.results[0], wave.size)
    factor = fmha.ConvertGradOp.factor_of(op)
    if factor != 1.0:
        total = arith.mulf(total, f32(factor))
    first = scf.IfOp(arith.cmpi(arith.CmpIPredicate.eq, wave.lane, index(0)))
    with ir.InsertionPoint(first.then_block):
        memref.store(total, out, [wave.head])
        scf.yield_([])


def convert_grad(op: "ir.Operation", spec: AttentionBwdSpec, wave: Wave) -> None:
    """out[b, h, s, :] = factor * acc[b, h, s, :] rounded to T (acc may have more rows: never read); with
    partials, the sum of acc's partials of (b, h, s) in order (lane_slice.copy_partial_sum).
    dbias's rows are seqlen_k long (a dynamic size): the wave walks them, one element per lane a turn."""
    if fmha.ConvertGradOp.grad_of(op) == "dsinks":
        sum_sink_terms(op, spec, wave)
        return
    acc, out = list(op.operands)[:2]
    factor = fmha.ConvertGradOp.factor_of(op)
    with _inside_rows(wave, out):
        partials = fmha.ConvertGradOp.partials_of(op)
        if fmha.ConvertGradOp.grad_of(op) != "dbias":
            if not partials:
                fragments = fmha.ConvertGradOp.grad_of(op) == "dq" and dq_fragment_order(spec, fmha.config_of(op))
                read = read_fragments if fragments else None
                copy_slice(acc, out, wave.indices, wave.slice_of(acc), factor, read)
                return
            copy_partial_sum(acc, out, wave.indices, wave.slice_of(acc), factor,
                             _visiting_key_blocks(op, spec, wave.indices[2]))
            return
        copy = copy_partial_sum if partials else copy_slice
        columns = scf.ForOp(wave.lane, memref.dim(out, index(3)), index(wave.size))
        with ir.InsertionPoint(columns.body):
            copy(acc, out, wave.indices, LaneSlice(columns.induction_variable, 1), factor)
            scf.yield_([])


def _visiting_key_blocks(op: "ir.Operation", spec: AttentionBwdSpec, row: "ir.Value"):
    """The key blocks whose work-groups wrote row's dQ partial: those that visit its query block (the
    tiled body's schedule, block sizes from the op's config), so the others need no zero fill."""
    config = fmha.config_of(op)
    operands = fmha.ConvertGradOp.named_operands(op, spec)
    q0 = arith.muli(arith.divui(row, index(config.block_m)), index(config.block_m))
    seqlen_q, seqlen_k = memref.dim(operands["out"], index(2)), memref.dim(operands["k"], index(2))
    lo, hi = mask_geometry.key_block_range(spec.mask, Ix(q0), config.block_m, config.block_n, Ix(seqlen_q),
                                           Ix(seqlen_k))
    return as_value(lo), as_value(hi)


ROW_STAGES = {fmha.DotDoOOp.NAME: dot_do_o, fmha.ConvertGradOp.NAME: convert_grad}


def row_stage_builders() -> dict:
    """op name -> (op, spec, config) builder of the row stages, with the geometry the bodies launch:
    the entries every body expansion pass shares."""
    def with_geometry(builder):
        return lambda op, spec, config: builder(op, spec, row_wave(op, spec, config))

    return {name: with_geometry(builder) for name, builder in ROW_STAGES.items()}


class _inside_rows:
    """Build the body under `scf.if row < seqlen of rows`: the last work-group's waves past the end skip
    it (whole waves, so wave reductions stay complete)."""

    def __init__(self, wave: Wave, rows: "ir.Value"):
        self.wave, self.rows = wave, rows

    def __enter__(self):
        seqlen = memref.dim(self.rows, index(2))
        self.guard = scf.IfOp(arith.cmpi(arith.CmpIPredicate.slt, self.wave.row, seqlen))
        self.point = ir.InsertionPoint(self.guard.then_block)
        self.point.__enter__()

    def __exit__(self, *exc):
        if exc[0] is None:
            scf.yield_([])
        self.point.__exit__(*exc)


def dot(a: list["ir.Value"], b: list["ir.Value"]) -> "ir.Value":
    """sum(a * b) of one lane's elements, as an fma chain."""
    total = arith.mulf(a[0], b[0])
    for x, y in zip(a[1:], b[1:]):
        total = fma(x, y, total)
    return total


def fma(a: "ir.Value", b: "ir.Value", c: "ir.Value") -> "ir.Value":
    """a * b + c, contractible into one fma by every backend.

    Not math.fma: convert-gpu-to-nvvm turns it into a libdevice call (__nv_fmaf) that ptxas cannot link.
    """
    contract = ir.Attribute.parse("#arith.fastmath<contract>")
    return arith.addf(arith.mulf(a, b, fastmath=contract), c, fastmath=contract)


def row_wave(op: "ir.Operation", spec: AttentionBwdSpec, config) -> Wave:
    """The row geometry of a row stage op, as fmha_mlir.bodies launches it."""
    from fmha_mlir.bodies import ROW_KERNEL_WAVES, row_lanes, row_stage_hdim
    from fmha_mlir.dtypes import BYTES

    from .stages_to_gpu import stage_name

    stage = stage_name(op)
    if stage == "convert_dsinks":   # one wave per head (bodies' launch)
        return Wave.current(config.wave_size)
    lanes = row_lanes(row_stage_hdim(stage, spec), config.wave_size, BYTES[spec.dtype])
    return Wave.of_rows(config.wave_size * ROW_KERNEL_WAVES, lanes)
