"""Synchronisation for Hopper (sm_90) bodies, as IR builders at the current insertion point: an mbarrier
pipeline (the `Pipeline` of a producer / consumer schedule), named barriers over warp subsets, the
generic-to-async proxy fence, and per-role register budgets.

MbarrierPipeline keeps, per stage, a *full* barrier (the producer's TMA completes its transaction bytes
on it; consumers wait) and an *empty* one (consumers arrive when done with the stage; the producer waits
before refilling). A wait names the phase parity it waits for: the k-th use of a stage (k = 0, 1, ...)
completes phase k, so its waiters pass parity k % 2 (PTX ISA, "mbarrier.try_wait.parity").
"""
from __future__ import annotations

from fmha_mlir.mlir import arith, ir
from fmha_mlir.target import SETMAXNREG_BUDGETS, SETMAXNREG_RULE

from .ir_builders import i32, index
from .ix import as_value

WAIT_TICKS = 10_000_000       # the try_wait suspend-time hint; the lowering loops until the phase completes


def _op(name: str, operands: list, attributes: dict | None = None, results: list | None = None):
    return ir.Operation.create(name, results=results or [], operands=operands, attributes=attributes or {})


class MbarrierGroup:
    """`count` mbarriers in static shared memory (one nvgpu.mbarrier.group)."""

    def __init__(self, count: int):
        self.count = count
        self.type = ir.Type.parse(f"!nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, "
                                  f"num_barriers = {count}>")
        self.value = _op("nvgpu.mbarrier.create", [], results=[self.type]).result

    def init(self, barrier, arrivals: int) -> None:
        """Expect `arrivals` arrivals per phase (one thread initialises; a barrier follows before use)."""
        _op("nvgpu.mbarrier.init", [self.value, index(arrivals), as_value(barrier)])

    def arrive(self, barrier) -> None:
        _op("nvgpu.mbarrier.arrive", [self.value, as_value(barrier)], results=[ir.Type.parse("!nvgpu.mbarrier.token")])

    def arrive_expect_tx(self, barrier, nbytes) -> None:
        """Arrive and add `nbytes` to the transaction count the phase waits for (the TMA loads' bytes)."""
        _op("nvgpu.mbarrier.arrive.expect_tx", [self.value, as_value(nbytes), as_value(barrier)],
            {"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 1, 0])})

    def wait(self, barrier, parity) -> None:
        """Block until the barrier's phase of `parity` (an i1 value, an Ix or a Python bool) completes."""
        if isinstance(parity, int):
            parity = bool(parity)
        parity = as_value(parity)
        _op("nvgpu.mbarrier.try_wait.parity", [self.value, parity, index(WAIT_TICKS), as_value(barrier)])


class MbarrierPipeline:
    """`stages` buffers handed from producer to consumers: full[s] = barrier s, empty[s] = stages + s.

    commit(s, nbytes): the producer's arrive with the stage's TMA byte count (one producer thread; the full
    barrier expects `producers` arrivals: more where producer threads also store into the stage);
    wait(s, parity): consumers wait for the stage's bytes; release(s): each consumer arrives (the empty
    barrier expects `consumers` arrivals); acquire(s, parity): the producer waits for the stage to be free.
    """

    def __init__(self, stages: int, consumers: int, producers: int = 1):
        self.stages, self.consumers, self.producers = stages, consumers, producers
        self.barriers = MbarrierGroup(2 * stages)

    def init(self) -> None:
        """Initialise every barrier (call from one thread, then a barrier of the whole work-group)."""
        for s in range(self.stages):
            self.barriers.init(s, self.producers)
            self.barriers.init(self.stages + s, self.consumers)

    def commit(self, stage, nbytes) -> None:
        self.barriers.arrive_expect_tx(stage, nbytes)

    def wait(self, stage, parity) -> None:
        self.barriers.wait(stage, parity)

    def release(self, stage) -> None:
        self.barriers.arrive(self._empty(stage))

    def acquire(self, stage, parity) -> None:
        self.barriers.wait(self._empty(stage), parity)

    def _empty(self, stage):
        return stage + self.stages if isinstance(stage, int) else arith.addi(as_value(stage), index(self.stages))


def fence_proxy_async() -> None:
    """Order this thread's generic-proxy shared-memory writes before later async-proxy accesses (wgmma
    operands, TMA stores) of the same work-group."""
    _op("nvvm.fence.proxy", [], {"kind": ir.Attribute.parse("#nvvm.proxy_kind<async.shared>"),
                                 "space": ir.Attribute.parse("#nvvm.shared_space<cta>")})


def named_barrier(barrier_id: int, threads: int) -> None:
    """bar.sync id, threads: the `threads` threads (whole warps) that use barrier `barrier_id` (1-15; 0 is
    the work-group's own __syncthreads) meet here."""
    if not 0 < barrier_id < 16 or threads % 32:
        raise ValueError(f"named barrier {barrier_id} over {threads} threads: ids are 1..15, threads whole warps")
    _op("nvvm.barrier", [i32(barrier_id), i32(threads)],
        {"aligned": ir.BoolAttr.get(True), "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1])})


def set_max_registers(count: int, increase: bool) -> None:
    """setmaxnreg: this warpgroup's per-thread register budget becomes `count` (24..256, a multiple of 8):
    producers give registers back, consumers take them (sm_90a)."""
    if count not in SETMAXNREG_BUDGETS:
        raise ValueError(f"{SETMAXNREG_RULE}, not {count}")
    action = "increase" if increase else "decrease"
    _op("nvvm.setmaxregister", [], {"action": ir.Attribute.parse(f"#nvvm<action {action}>"),
                                    "regCount": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), count)})


def fix_entry_registers(function: "ir.Operation") -> None:
    """Mark a gpu.func that moves register budgets with set_max_registers as one block per SM
    (.minnctapersm 1): with its known block size that fixes the register count at entry, without which
    ptxas ignores every setmaxnreg (C7508)."""
    function.attributes["nvvm.minctasm"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1)


ROLES_ATTRIBUTE = "fmha.roles"   # read by the interpreter (runtime/interp/roles.py)
ORDERED_REDUCES_ATTRIBUTE = "fmha.ordered_reduces"   # read by the interpreter (runtime/interp/reduce_order.py)


def declare_roles(function: "ir.Operation", ranges: list[tuple[int, int]]) -> None:
    """Record on a gpu.func the thread ranges (first, end) of its roles (producer, consumers, ...): the
    interpreter runs each as its own coroutine, since one role waits for what another, later in
    program order, does."""
    function.attributes[ROLES_ATTRIBUTE] = ir.DenseI32ArrayAttr.get([t for pair in ranges for t in pair])


def declare_ordered_reduces(function: "ir.Operation") -> None:
    """Record on a gpu.func that its work-groups' bulk reduce-adds into an element go in one order (their
    semaphores' turns: deterministic dQ): the interpreter checks that the GPU could not add them in
    another (reduce_order.py). Kernels without it may add in any order (dQ converted in the grid waits on
    semaphores too, but only to read the sums)."""
    function.attributes[ORDERED_REDUCES_ATTRIBUTE] = ir.UnitAttr.get()
