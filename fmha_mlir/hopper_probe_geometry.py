"""The geometry of the sm_90a wgmma probe and its ladder (passes/hopper_probe.py,
passes/hopper_probe_ladder.py), without MLIR: the kernels are built from it here, and the run on the
GPU (tools/hopper_probe.py, where there is no MLIR) encodes its tensor maps, sizes its buffers and
makes its shared-memory images from it.

The rungs, one piece more each:

    mbarrier   init, arrive and parity waits over two phases of a 128-arrival barrier; out[t] = t + 1
    tma        boxes of the probe's A and B tensor maps (one past K: zero fill) completing on an
               mbarrier with expect-tx, the shared bytes copied out as words
    ss         the probe's first k-block (A, B tiles) written to shared memory by ordinary stores from a
               host-made image, fence.proxy.async, wgmma SS: C = A B^T over 64 columns of K
    rs         the same, then V's tile and wgmma RS: C2 = bf16(C) V
    pipeline   the full probe (TMA 2-stage pipeline, SS, RS)
    roles      the full probe warp-specialised: a producer warpgroup (setmaxnreg 24) issues every load
               after waiting for a free stage, a consumer warpgroup (setmaxnreg 240) computes
    dq_reduce  the dQ writer's piece: each of several work-groups writes an f32 partial tile to shared
               memory by ordinary stores (a host-made image, 128-byte swizzled), fences, and one thread
               reduce-adds it as one TMA box into the same rows of a dq tensor, partly past its end
               (dropped), commits and waits for the group's reads; then the tile's memory is reused
"""
from __future__ import annotations

from dataclasses import dataclass

from .wgmma_layouts import M, OperandTile

KERNEL = "wgmma_probe"
THREADS = 128
ROLE_THREADS = 2 * THREADS     # the warp-specialised variant: a producer and a consumer warpgroup
BLOCK_K = 64
STAGES = 2


@dataclass(frozen=True)
class ProbeShape:
    m: int = 128
    n: int = 128
    k: int = 200          # not a multiple of BLOCK_K: the last box reads past K (zero fill)
    n2: int = 64

    @property
    def k_blocks(self) -> int:
        return -(-self.k // BLOCK_K)

    @property
    def a_tile(self) -> OperandTile:
        return OperandTile(M, BLOCK_K, "K", 128)

    @property
    def b_tile(self) -> OperandTile:
        return OperandTile(self.n, BLOCK_K, "K", 128)

    @property
    def v_tile(self) -> OperandTile:
        return OperandTile(self.n2, self.n, "MN", 128)

    @property
    def boxes(self) -> dict[str, tuple[int, int]]:
        """The TMA box of each tensor map parameter (outer, contiguous): the host encodes the maps with
        these, the kernel's expect-tx byte counts assume them."""
        return {"a": self.a_tile.box, "b": self.b_tile.box, "v": self.v_tile.box, "dq": DqReduceRung().box}

    @property
    def stage_bytes(self) -> int:
        return self.a_tile.nbytes + self.b_tile.nbytes

    @property
    def shared_bytes(self) -> int:
        return STAGES * self.stage_bytes + self.v_tile.nbytes

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.m // M, 1, 1)


RUNGS = ("mbarrier", "tma", "ss", "rs", "pipeline", "roles", "dq_reduce")


@dataclass(frozen=True)
class DqReduceRung:
    """The dq_reduce rung: `groups` work-groups each add a rows x inner f32 box at row `row` of a dq
    tensor of dq_rows x inner (the rows past dq_rows are dropped)."""

    rows: int = 64
    inner: int = 32       # 128-byte rows: the 128-byte swizzle
    dq_rows: int = 80
    row: int = 48
    groups: int = 4

    @property
    def box(self) -> tuple[int, int]:
        return (self.rows, self.inner)

    @property
    def nbytes(self) -> int:
        return self.rows * self.inner * 4

    @property
    def words(self) -> int:
        return self.nbytes // 4


@dataclass(frozen=True)
class TmaRung:
    """Where the tma rung puts its boxes: (tensor map, shared byte offset, first column) per tile load;
    the A tile at K columns 0 and at the last k-block (past K: zero fill), the B tile at column 0."""

    shape: ProbeShape

    @property
    def loads(self) -> list[tuple[str, int, int]]:
        a, last = self.shape.a_tile.nbytes, (self.shape.k_blocks - 1) * BLOCK_K
        return [("a", 0, 0), ("a", a, last), ("b", 2 * a, 0)]

    @property
    def nbytes(self) -> int:
        return 2 * self.shape.a_tile.nbytes + self.shape.b_tile.nbytes


def image_layout(shape: ProbeShape) -> dict[str, int]:
    """Byte offsets of the A, B and V tiles in the ss / rs rungs' shared image (each 1024-aligned)."""
    b = shape.a_tile.nbytes
    v = b + shape.b_tile.nbytes
    return {"a": 0, "b": b, "v": v, "end": v + shape.v_tile.nbytes}


@dataclass(frozen=True)
class Rung:
    name: str
    kernel: str
    grid: tuple[int, int, int]
    shared_bytes: int
    maps: tuple[str, ...]        # tensor-map parameters, in order, named as ProbeShape.boxes
    threads: int = THREADS


def rung(name: str, shape: ProbeShape) -> Rung:
    """The kernel, grid, dynamic shared memory, tensor maps and block size of rung `name`."""
    if name not in RUNGS:
        raise ValueError(f"the probe's rungs are {', '.join(RUNGS)}, not {name!r}")
    one = (1, 1, 1)
    return {
        "mbarrier": Rung(name, "probe_mbarrier", one, 0, ()),
        "tma": Rung(name, "probe_tma", one, TmaRung(shape).nbytes, ("a", "b")),
        "ss": Rung(name, "probe_ss", one, image_layout(shape)["v"], ()),
        "rs": Rung(name, "probe_rs", one, image_layout(shape)["end"], ()),
        "pipeline": Rung(name, KERNEL, shape.grid, shape.shared_bytes, ("a", "b", "v")),
        "roles": Rung(name, KERNEL, shape.grid, shape.shared_bytes, ("a", "b", "v"), ROLE_THREADS),
        "dq_reduce": Rung(name, "probe_dq_reduce", (DqReduceRung().groups, 1, 1), DqReduceRung().nbytes, ("dq",)),
    }[name]
