"""What every body shares: workspaces, launches and shared tiles as values, the row kernels' limits and
launches, the bias gradient's and dsinks' accumulation, and the Body interface each body implements."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..dtypes import BYTES
from ..errors import Reason
from ..kernel_config import KernelConfig
from ..numerics import Numerics
from ..shape_expr import Dim, Expr, ceildiv
from ..spec import AttentionBwdSpec
from ..target import Target

GRADS = ("dq", "dk", "dv")
# The warp body gives each lane hdim / wave_size contiguous elements; past 8 per lane the register cost
# of the loop-carried dQ slice outgrows what the body is built for.
MAX_ELEMENTS_PER_LANE = 8
ELEMENT_BYTES = 2    # the tiled body's operands: f16 / bf16
LSE_BYTES = 4
TILE_ALIGN = 128     # shared tiles start on a 128-byte boundary: the swizzle's bank arithmetic needs it
COPY_ELEMENTS = 8    # one 16-byte cp.async of f16/bf16
# Waves per work-group of the row kernels: one-wave work-groups by the hundred thousand cost more to
# schedule than their bytes take to move (measured on the H200: reports/bench_notes.md).
ROW_KERNEL_WAVES = 8
ROW_BYTES = 16       # what one lane of a row kernel loads at once
# The stages a plan launches: the row kernels, the body's kernel, a convert per accumulated gradient.
STAGES = ("dot_do_o", "dq_dk_dv", "convert_dq", "convert_dk", "convert_dv", "convert_dbias", "convert_dsinks")


# The i32 workspace of deterministic dQ's turns: a counter per (batch, query head, query block).
DQ_SEMAPHORES = "dq_semaphores"
# The i32 workspace of dQ converted in dq_dk_dv's grid (config.dq_convert_rows): per (batch, kv head), how
# many of its key blocks' work-groups have their reduce-adds into dq_acc complete.
DQ_DONE = "dq_done"


@dataclass(frozen=True)
class Workspace:
    """A device buffer the plan allocates: `dims` over problem-operand names, of `element`."""

    name: str
    grad: str | None     # the gradient it accumulates and is converted into; None for d, the semaphores
    dims: tuple[Expr, ...]
    zero: bool           # zero-filled before the kernels
    factor: float = 1.0  # the convert multiplies by it (a scale the body leaves out of its atomics)
    # Deterministic mode: dims[0] holds batch x partials (one per key block, written, not added); the
    # convert sums them in order.
    partials: bool = False
    element: str = "f32"   # i32: deterministic dQ's semaphores, dq_done
    # dq_dk_dv converts it into its gradient itself (config.dq_convert_rows): no convert stage.
    converted_in_main: bool = False


@dataclass(frozen=True)
class Launch:
    grid: tuple[Expr, Expr, Expr]   # over the stage op's operand names
    block: tuple[int, int, int]
    shared_bytes: int = 0
    tensor_maps: tuple["TensorMap", ...] = ()   # extra kernel parameters, after the stage op's operands


@dataclass(frozen=True)
class TensorMap:
    """A TMA tensor map over a stage operand, passed to the kernel after the operands: boxes of `box`
    elements (outermost first, one size per dimension of the operand) in a `swizzle`-byte swizzle, zero
    outside the tensor."""

    operand: str
    box: tuple[int, ...]
    swizzle: int
    access: str = "read"      # how the kernel uses the tensor through it (ACCESSES)


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


def dims_of(operand: str, rank: int, last: Expr | None = None) -> tuple[Expr, ...]:
    dims = tuple(Dim(operand, i) for i in range(rank))
    return dims if last is None else dims[:-1] + (last,)


def partials_zeroed(spec: AttentionBwdSpec) -> bool:
    """Whether deterministic mode's stored dbias partials need a zero fill: under a mask a key block
    skips the query blocks it cannot see; without one every partial is written whole. (dQ's convert
    reads only the key blocks that visit a row's query block, so its partials never need one.)"""
    return spec.mask.kind != "none"


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
        return [Workspace("dbias_acc", "dbias", dims_of("dbias", 4), zero=True)], ()
    return [], grads


def sink_accumulation(spec: AttentionBwdSpec) -> tuple[list[Workspace], tuple[str, ...]]:
    """(workspaces, zero-filled outputs) of dsinks, the same for every body: the row stage adds each
    wave's sum of its rows' terms into dsinks by f32 atomics (zero-filled first); deterministic mode
    stores each row's term in `dsinks_acc` [B, Hq, Sq] (every row is written) and `convert_grad {grad =
    "dsinks", partials = true}` sums them per head in a fixed order."""
    if not spec.sinks:
        return [], ()
    if spec.deterministic:
        return [Workspace("dsinks_acc", "dsinks", dims_of("lse", 3), zero=False, partials=True)], ()
    return [], ("dsinks",)


# How a kernel uses a buffer argument (the manifest's "access", checked by the runtime against the steps).
READ, WRITE, ACCUMULATE = "read", "write", "accumulate"
ACCESSES = (READ, WRITE, ACCUMULATE)


def row_stage_output_access(spec: AttentionBwdSpec) -> dict[str, str]:
    """How dot_do_o treats its outputs: d is written; dsinks accumulated (a workspace: written)."""
    return {"d": WRITE, **({"dsinks_out": WRITE if spec.deterministic else ACCUMULATE} if spec.sinks else {})}


def row_lanes(hdim: int | None, wave_size: int, element_bytes: int) -> int:
    """Lanes that share one row in the row kernels: each lane moves 16 bytes (a power-of-two number of
    lanes per row, at most a wave); else, and for rows of dynamic length (hdim None), the whole wave where
    it divides the row, else the largest power of two that does."""
    if hdim is None:
        return wave_size
    wide = ROW_BYTES // element_bytes
    lanes = hdim // wide if hdim % wide == 0 else 0
    if 1 <= lanes <= wave_size and lanes & (lanes - 1) == 0:
        return lanes
    if hdim % wave_size == 0:
        return wave_size
    # A head dim the wave does not divide (the tiled bodies take any multiple of 8): the largest power of
    # two that divides it, so every lane of a row holds as many elements.
    return min(hdim & -hdim, wave_size)


def row_stage_hdim(stage: str, spec: AttentionBwdSpec) -> int | None:
    """The length of a row stage's rows; None for convert_dbias, whose rows are seqlen_k long, and
    convert_dsinks, which walks a head's rows of every batch."""
    if stage in ("convert_dbias", "convert_dsinks"):
        return None
    return spec.hdim_q if stage in ("convert_dq", "convert_dk") else spec.hdim_v


def row_launch(stage: str, spec: AttentionBwdSpec, config: KernelConfig) -> Launch:
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


def tiled_row_reasons(spec: AttentionBwdSpec, wave_size: int, body: str) -> list[Reason]:
    """Limits of the row kernels of a tiled body: head dims in whole 16-byte copies (multiples of 8),
    up to the row kernels' MAX_ELEMENTS_PER_LANE per lane of a wave."""
    out = []
    for name in ("hdim_q", "hdim_v"):
        value = getattr(spec, name)
        if value % COPY_ELEMENTS or value > wave_size * MAX_ELEMENTS_PER_LANE:
            out.append(Reason(name, f"{value} is not supported by the {body} body (wave size {wave_size})",
                              f"use a multiple of {COPY_ELEMENTS} up to {wave_size * MAX_ELEMENTS_PER_LANE}, "
                              "or let the torch op pad it"))
    return out


def row_alignment(hdim: int, wave_size: int, element_bytes: int) -> int:
    """Elements a row kernel's per-lane vector claims: the largest power of two dividing its length."""
    per_lane = hdim // row_lanes(hdim, wave_size, element_bytes)
    return per_lane & -per_lane if per_lane else 1


class Body:
    """One way of computing the dq_dk_dv stage (plus its row stages), answered without MLIR. The passes
    take its answers from its BodyPlan (bodies/plan.py, made once per (spec, config)) and its limits from
    choice.check_config."""

    name: ClassVar[str]
    config_class: ClassVar[type[KernelConfig]]
    numerics: ClassVar[Numerics]

    def reasons(self, spec: AttentionBwdSpec, target: Target, config: KernelConfig) -> list[Reason]:
        """Every reason this body cannot compute `spec` on `target` with `config`."""
        return (self._common_reasons(target, config) or self.target_reasons(spec, target, config)
                or self.spec_reasons(spec, config))

    def spec_reasons(self, spec: AttentionBwdSpec, config: KernelConfig) -> list[Reason]:
        """What the body cannot do whatever the target (checked again when a plan is made, which has no
        target)."""
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

    def shared_tiles(self, spec: AttentionBwdSpec, config: KernelConfig) -> tuple[SharedTile, ...]:
        """The dq_dk_dv kernel's dynamic shared memory, in order (none by default)."""
        return ()

    def _common_reasons(self, target: Target, config: KernelConfig) -> list[Reason]:
        if not isinstance(config, self.config_class):
            return [Reason("config.body", f"the {self.name} body cannot run a {config.body} config")]
        reasons = config.reasons()
        if not reasons and config.wave_size != target.wave_size:
            reasons.append(Reason("config.wave_size", f"{config.wave_size}, but {target.arch} waves have "
                                                      f"{target.wave_size} lanes"))
        return reasons
