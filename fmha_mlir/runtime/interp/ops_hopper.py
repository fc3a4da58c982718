"""Hopper (sm_90a) ops as the atoms of passes/wgmma_atom.py, tma_copy.py and hopper_sync.py emit them:
mbarriers (create / init / arrive / arrive.expect_tx / try_wait.parity), TMA box loads, TMA box
reduce-adds and stores with their bulk groups (commit / wait_group) and the shared-memory pointer they
take, wgmma SS (nvvm.wgmma.mma_async) and RS (its inline PTX), wgmma fence / commit / wait, named barriers,
fence.proxy.async and setmaxnreg, plus the llvm ops around an accumulator (!llvm.struct of f32: a
[lanes, N/2] array here).

The data path is hopper.py's (swizzled boxes with zero fill, operands read through their descriptors
from the work-group's dynamic shared memory); the happens-before rules are hopper_sync.py's. A TMA box
lands at once; its bytes count against the barrier's transaction bytes and are marked until a wait. A
reduce-add or box store lands at once too; its source box stays marked as read until its bulk group
is waited for, and the race detector takes the box's read as the issuing thread's load (other threads'
stores into it need a barrier or an mbarrier phase before it).
Under lockstep execution a wait that cannot pass can never pass (no other lane runs meanwhile), so it
is reported as a deadlock naming the barrier, its pending arrivals and transaction bytes: how a wrong
expect-tx byte count shows. wgmma products complete at issue; fence / commit / wait check that whole
warpgroups execute them.
"""
from __future__ import annotations

import re

import numpy as np

from ...dtypes import bf16_bits, from_storage
from ... import wgmma_layouts as layouts
from ...target import SETMAXNREG_BUDGETS, SETMAXNREG_RULE
from .compiler import KernelCompiler
from .errors import InterpreterError
from .hopper import (TensorMap, add_box, box_of, box_offsets, operand_offsets, place_box, store_box,
                     take_box, wgmma)
from .hopper_sync import UNIT, WARPGROUP, warpgroup_ids
from .parser import Operation
from .types import MemRefType, VectorType

TOKEN = np.int64(0)
_STRUCT = re.compile(r"^!llvm\.struct<\((f32(?:, f32)*)\)>$")
_RS = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.(bf16|f16)\.(bf16|f16) .*, p, 1, 1, ([01]);")
_DESCRIPTOR = re.compile(r"tensor = memref<([0-9x]+)x(\w+), 3>, swizzle = (none|swizzle_(\d+)b)")
STORAGE = {"bf16": np.uint16, "f16": np.float16}
# per warpgroup thread and accumulator register / A element: the (row, col) wgmma_layouts gives
_THREADS = np.arange(WARPGROUP)[:, None]


def _decode(element: str):
    return (lambda x: from_storage(x, "bf16").astype(np.float32)) if element == "bf16" else \
        (lambda x: x.astype(np.float32))


def _barrier_lanes(st, mask, group_slot: int, index_slot: int):
    """(barrier group, active lanes, each lane's work-group, each lane's barrier index); None when no lane
    is active."""
    lanes = st.grid.executing(mask)
    if lanes.size == 0:
        return None
    g = st.grid
    indices = _per_lane(st.env[index_slot], lanes, g.lanes).astype(np.int64)
    return st.env[group_slot], lanes, g.group_local[lanes], indices


def _per_lane(value, lanes: np.ndarray, count: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(value), (count,))[lanes] if np.ndim(value) else np.full(lanes.size, value)


def _hopper(st, what: str):
    sync = st.workgroup.hopper
    if sync is None:
        raise InterpreterError(f"{what}: the kernel's Hopper state is missing (run it through Interpreter.run_kernel)")
    return sync


def _warpgroups(st, mask, what: str) -> list[np.ndarray]:
    """The executing lanes by warpgroup, each all 128 threads of one warpgroup (else an error)."""
    g = st.grid
    lanes = st.grid.executing(mask)
    key = warpgroup_ids(g, lanes)
    out = []
    for k in np.unique(key):
        members = lanes[key == k]
        if members.size != WARPGROUP:
            raise InterpreterError(f"{what}: {g.describe(int(members[0]))} is in a warpgroup that does not execute "
                                   f"it whole ({members.size} of {WARPGROUP} threads): wgmma and setmaxnreg are "
                                   "warpgroup-collective")
        out.append(members[np.argsort(g.thread_linear[members] % WARPGROUP)])
    return out


# --- mbarriers ---------------------------------------------------------------------------------------

def compile_mbarrier_create(op: Operation, cc: KernelCompiler):
    found = re.search(r"num_barriers = (\d+)", str(op.result_types[0]))
    count = int(found.group(1)) if found else 1
    out, what, key = cc.result(op), cc.describe(op), id(op)

    def run(st, mask):
        st.env[out] = _hopper(st, what).group(key, count, what)

    return run


def _barrier_handler(kind: str):
    """init (count), arrive, arrive.expect_tx (bytes) on the barrier each executing lane names."""

    def compile_op(op: Operation, cc: KernelCompiler):
        slots = cc.operands(op)
        group_slot, index_slot = slots[0], slots[-1]
        value_slot = slots[1] if kind in ("init", "expect_tx") else None
        out = cc.result(op) if kind == "arrive" and op.results else None
        what = cc.describe(op)

        def run(st, mask):
            env, g = st.env, st.grid
            found = _barrier_lanes(st, mask, group_slot, index_slot)
            if found is None:
                return
            group, lanes, wg, b = found
            if ((b < 0) | (b >= group.count)).any():
                raise InterpreterError(f"{what}: barrier index {int(b.max())} of a group of {group.count}")
            if kind == "init":
                count = _per_lane(env[value_slot], lanes, g.lanes)
                group.expected[wg, b] = count
                group.pending[wg, b] = count
                group.tx[wg, b] = 0
                group.phase[wg, b] = 0
                group.initialised[wg, b] = True
                return
            if not group.initialised[wg, b].all():
                raise InterpreterError(f"{what}: arrives on {group.describe(int(b[0]))}, which no nvgpu.mbarrier.init "
                                       "initialised")
            if kind == "expect_tx":
                np.add.at(group.tx, (wg, b), _per_lane(env[value_slot], lanes, g.lanes).astype(np.int64))
            st.workgroup.barrier(mask, what, meeting=False)   # an arrival releases what the lane did before it
            np.maximum.at(group.release, (wg, b), st.workgroup.base[lanes].astype(np.int64))
            np.subtract.at(group.pending, (wg, b), 1)
            if (group.pending < 0).any():
                w, i = np.argwhere(group.pending < 0)[0]
                raise InterpreterError(f"{what}: more arrivals on {group.describe(int(i))} of work-group "
                                       f"{g.first_group + int(w)} in one phase than the {int(group.expected[w, i])} "
                                       "its init expects")
            group.complete()
            if out is not None:
                env[out] = TOKEN

        return run

    return compile_op


def compile_try_wait(op: Operation, cc: KernelCompiler):
    """try_wait.parity in a loop until the phase completes (what MbarrierGroup.wait lowers to)."""
    group_slot, parity_slot, _, index_slot = cc.operands(op)
    what = cc.describe(op)

    def run(st, mask):
        env, g = st.env, st.grid
        found = _barrier_lanes(st, mask, group_slot, index_slot)
        if found is None:
            return
        group, lanes, wg, b = found
        sync = _hopper(st, what)
        parity = _per_lane(env[parity_slot], lanes, g.lanes).astype(np.int64)
        blocked = lambda: group.phase[wg, b] % 2 == parity  # noqa: E731
        if blocked().any():
            scheduler = st.scheduler
            if scheduler is not None:
                scheduler.block(lambda: not blocked().any(), lambda: _stuck(group, wg, b, parity, blocked(), g, what))
            else:
                raise InterpreterError(_stuck(group, wg, b, parity, blocked(), g, what) + " (lockstep: no other lane "
                                       "runs while it waits, so the phase can never complete)")
        ids = group.first_id + b
        sync.observed[lanes, ids] = np.maximum(sync.observed[lanes, ids], group.phase[wg, b])
        st.workgroup.acquire(lanes, group.released[wg, b])

    return run


def _stuck(group, wg, b, parity, blocked, g, what: str) -> str:
    i = int(np.argmax(blocked))
    w, k = int(wg[i]), int(b[i])
    tx = int(group.tx[w, k])
    why = ("expect-tx announced more bytes than its TMA loads complete" if tx > 0 else
           "its TMA loads complete more bytes than expect-tx announced" if tx < 0 else "arrivals are missing")
    return (f"{what}: deadlock: waits for the phase of parity {int(parity[i])} of {group.describe(k)} "
            f"(work-group {g.first_group + w}), which has {int(group.pending[w, k])} of "
            f"{int(group.expected[w, k])} arrivals and {tx} transaction bytes outstanding ({why})")


# --- TMA ---------------------------------------------------------------------------------------------

def compile_tma_load(op: Operation, cc: KernelCompiler):
    """nvgpu.tma.async.load(dst, barriers, map, coordinates (innermost first), barrier)."""
    slots = cc.operands(op)
    dst_slot, group_slot, map_slot, *coord_slots = slots[:len(slots) - 1]
    index_slot = slots[-1]
    sizes = op.attributes.get("operandSegmentSizes")
    if sizes is not None and (tuple(sizes)[5:] != (0, 0) or tuple(sizes)[4] != 1):
        raise cc.error(op, "multicast and L2 cache hints are not supported")
    found = _DESCRIPTOR.search(str(op.operand_types[2]))
    if found is None:
        raise cc.error(op, f"cannot read the box and swizzle of {op.operand_types[2]}")
    box = tuple(int(n) for n in found.group(1).split("x"))
    swizzle = int(found.group(4) or 0)
    dst_t = op.operand_types[0]
    what = cc.describe(op)

    def run(st, mask):
        env, g = st.env, st.grid
        lanes = st.grid.executing(mask)
        sync = _hopper(st, what)
        dst, group, tensor_map = env[dst_slot], env[group_slot], env[map_slot]
        if not isinstance(tensor_map, TensorMap):
            raise InterpreterError(f"{what}: the tensor map operand is not a tensor-map kernel argument")
        if tuple(tensor_map.box) != box or tensor_map.swizzle != swizzle:
            raise InterpreterError(f"{what}: the kernel reads boxes {box} with a {swizzle}-byte swizzle through a "
                                   f"tensor map encoded with box {tuple(tensor_map.box)} and a {tensor_map.swizzle}"
                                   "-byte swizzle")
        buffer = dst.shared
        itemsize = dst.storage.itemsize
        for lane in lanes:
            w = int(g.group_local[lane])
            coords = [int(_per_lane(env[c], np.array([lane]), g.lanes)[0]) for c in coord_slots]
            start = tuple(reversed(coords))
            barrier = int(_per_lane(env[index_slot], np.array([lane]), g.lanes)[0])
            data = box_of(tensor_map.tensor, start, box)
            local = int(np.broadcast_to(dst.offset, (g.lanes,))[lane]) * itemsize - w * buffer.stride
            image = buffer.data[w * buffer.stride:(w + 1) * buffer.stride]
            written = place_box(image, local, data, swizzle)
            sync.tma_write(buffer, (w * buffer.stride + written).reshape(-1), group, w, barrier, what)
            group.tx[w, barrier] -= data.nbytes
        group.complete()

    if not isinstance(dst_t, MemRefType):
        raise cc.error(op, f"the destination must be a shared-memory memref, not {dst_t}")
    return run


def compile_tma_reduce(op: Operation, cc: KernelCompiler):
    """nvvm.cp.async.bulk.tensor.reduce (map, shared pointer, coordinates (innermost first)), add, tile
    mode: the box the map describes, read from dynamic shared memory as a load would have placed it, added
    into the map's tensor (elements outside it dropped)."""
    kind, mode = cc.enum_attr(op, "redKind"), cc.attr_text(op, "mode")
    if kind != "add" or (mode and "tile" not in mode):
        raise cc.error(op, f"the interpreter runs tile-mode reduce-adds, not {kind}")
    return _compile_box_write(op, cc, reduce=True)


def compile_tma_store(op: Operation, cc: KernelCompiler):
    """nvvm.cp.async.bulk.tensor.global.shared.cta (map, shared pointer, coordinates (innermost first)),
    tile mode: the box read as compile_tma_reduce reads it, stored into the map's tensor (elements outside
    it dropped)."""
    mode = cc.attr_text(op, "mode")
    if mode and "tile" not in mode:
        raise cc.error(op, f"the interpreter runs tile-mode box stores, not {mode}")
    return _compile_box_write(op, cc, reduce=False)


def _compile_box_write(op: Operation, cc: KernelCompiler, reduce: bool):
    """A box reduce-add (f32 tensors) or store: its source box must be published to the async proxy and
    stays marked as read until its bulk group is waited for."""
    map_slot, src_slot, *coord_slots = cc.operands(op)
    sizes = tuple(op.attributes.get("operandSegmentSizes"))
    if any(sizes[3:]):
        raise cc.error(op, "L2 cache hints and predicates are not supported")
    what = cc.describe(op)
    noun = "a reduce-add's box" if reduce else "a box store's box"

    def run(st, mask):
        env, g = st.env, st.grid
        sync = _hopper(st, what)
        buffer = st.workgroup.dynamic().shared
        tensor_map = env[map_slot]
        if not isinstance(tensor_map, TensorMap) or (reduce and tensor_map.tensor.dtype != np.float32):
            raise InterpreterError(f"{what}: the tensor map operand must be a tensor-map kernel argument"
                                   + (" over f32" if reduce else ""))
        box, element_bytes = tuple(tensor_map.box), tensor_map.tensor.itemsize
        for lane in st.grid.executing(mask):
            one = np.array([lane])
            w = int(g.group_local[lane])
            source = int(_per_lane(env[src_slot], one, g.lanes)[0])
            start = tuple(reversed([int(_per_lane(env[c], one, g.lanes)[0]) for c in coord_slots]))
            offsets = box_offsets(source, box, element_bytes, tensor_map.swizzle)[..., None] + np.arange(element_bytes)
            if source < 0 or offsets.max() >= st.workgroup.dynamic_bytes:
                raise InterpreterError(f"{what}: the box at byte {source} reaches byte {int(offsets.max()) + 1} of "
                                       f"the {st.workgroup.dynamic_bytes} bytes of dynamic shared memory")
            _check_async_read(sync, buffer, w, offsets.reshape(-1), one, what, noun)
            units = np.unique((w * buffer.stride + offsets.reshape(-1)) // UNIT)
            # One thread reads what others stored: the race detector orders it as that thread's load.
            reader = np.zeros(g.lanes, bool)
            reader[lane] = True
            buffer.access("read", units[None, :], reader, units.size, UNIT, what,
                          lambda _lane, position, units=units: (int(units[position]) * UNIT,))
            image = buffer.data[w * buffer.stride:(w + 1) * buffer.stride]
            values = take_box(image, source, box, tensor_map.tensor.dtype, tensor_map.swizzle)
            region = (add_box if reduce else store_box)(tensor_map.tensor, start, values)
            baton = st.scheduler and st.scheduler.baton
            if baton and region is not None:
                if reduce and baton.reduce_order is not None:
                    baton.reduce_order.reduce(tensor_map.tensor, region, sync, lane, g.work_group(lane), what)
                if baton.bulk_reads is not None:
                    baton.bulk_reads.wrote(tensor_map.tensor, region, sync, lane, g.work_group(lane))
            sync.bulk_read(buffer, units, lane)

    return run


def compile_bulk_commit(op: Operation, cc: KernelCompiler):
    what = cc.describe(op)

    def run(st, mask):
        _hopper(st, what).bulk_commit(st.grid.executing(mask))

    return run


def compile_bulk_wait(op: Operation, cc: KernelCompiler):
    """wait_group N: reduce-adds land at issue, so with or without read it retires the groups' reads;
    without read it also completes their writes (HopperSync.bulk_publish, reduce_order.py)."""
    group = op.attributes["group"]
    pending = int(getattr(group, "value", group))
    read = "read" in op.attributes
    what = cc.describe(op)

    def run(st, mask):
        _hopper(st, what).bulk_wait(st.grid.executing(mask), pending, read)

    return run


def compile_int_to_pointer(op: Operation, cc: KernelCompiler):
    """llvm.inttoptr to a shared-memory pointer (!llvm.ptr<3>): the byte offset in the work-group's shared
    window, as memref.extract_aligned_pointer_as_index gives it."""
    if str(op.result_types[0]) != "!llvm.ptr<3>":
        raise cc.error(op, "the interpreter takes shared-memory pointers (!llvm.ptr<3>) only, "
                           f"not {op.result_types[0]}")
    (src,) = cc.operands(op)
    out = cc.result(op)

    def run(st, mask):
        st.env[out] = st.env[src]

    return run


# --- wgmma -------------------------------------------------------------------------------------------

def _struct_registers(t, cc, op) -> int:
    found = _STRUCT.match(str(t))
    if found is None:
        raise cc.error(op, f"an accumulator is an !llvm.struct of f32, not {t}")
    return found.group(1).count("f32")


def compile_zero(op: Operation, cc: KernelCompiler):
    registers = _struct_registers(op.result_types[0], cc, op)
    out = cc.result(op)

    def run(st, mask):
        st.env[out] = np.zeros(registers, np.float32)
        _written(st, out)

    return run


def _written(st, slot: int) -> None:
    """A value a wgmma may read as registers was written here (the fence rule: HopperSync.register_written)."""
    if st.workgroup.hopper is not None:
        st.workgroup.hopper.register_written(slot)


def _warpgroup_keys(st, mask, what: str) -> list[tuple]:
    """(work-group, warpgroup) of each warpgroup executing (whole, else an error)."""
    return [_key(st.grid, m) for m in _warpgroups(st, mask, what)]


def _key(g, members: np.ndarray) -> tuple:
    """(work-group, warpgroup) of a warpgroup's lanes."""
    return int(g.group_local[members[0]]), int(g.thread_linear[members[0]]) // WARPGROUP


def compile_extractvalue(op: Operation, cc: KernelCompiler):
    """A register of an accumulator: an error while the product that wrote it is in flight (its group not
    committed and waited for: nvvm.wgmma.wait.group.sync.aligned)."""
    (src,) = cc.operands(op)
    _struct_registers(op.operand_types[0], cc, op)
    (position,) = tuple(op.attributes["position"])
    out, what = cc.result(op), cc.describe(op)

    def run(st, mask):
        sync = st.workgroup.hopper
        if sync is not None and sync.wgmma_in_flight_any(src):
            for key in _warpgroup_keys(st, mask, what):
                if sync.wgmma_in_flight(key, src):
                    raise InterpreterError(f"{what}: reads an accumulator of work-group {key[0]}'s warpgroup {key[1]} "
                                           "whose wgmma is still in flight (commit its group and wait for it: "
                                           "nvvm.wgmma.wait.group.sync.aligned)")
        st.env[out] = st.env[src][..., position]

    return run


def compile_bitcast(op: Operation, cc: KernelCompiler):
    """vector<2xbf16 | 2xf16> -> i32: element 0 in the low half (a register-A pair)."""
    (src,) = cc.operands(op)
    t = op.operand_types[0]
    pair = isinstance(t, VectorType) and t.shape == (2,) and t.elem.name in STORAGE
    if not (pair and str(op.result_types[0]) == "i32"):
        raise cc.error(op, f"only vector<2xbf16> / vector<2xf16> -> i32 bitcasts are supported, not {t}")
    out = cc.result(op)
    element = t.elem.name

    def run(st, mask):
        x = st.env[src]
        bits = bf16_bits(x) if element == "bf16" else np.asarray(x, np.float16).view(np.uint16)
        st.env[out] = (bits[..., 0].astype(np.uint32) | (bits[..., 1].astype(np.uint32) << 16)).view(np.int32)
        _written(st, out)

    return run


ACC_ROWS, ACC_COLS = (np.asarray(a) for a in layouts.accumulator(_THREADS, np.arange(128)[None, :]))


def _product(st, mask, what: str, acc, a, b_descriptor, n: int, element: str, a_major: str, b_major: str,
             first):
    """One m64nNk16 per executing warpgroup; `a` is [lanes] descriptors or [lanes, 4] A registers."""
    g = st.grid
    sync = _hopper(st, what)
    buffer = st.workgroup.dynamic().shared
    registers = n // 2
    acc = np.broadcast_to(acc, (g.lanes, registers))
    out = np.array(acc, np.float32)
    decode, dtype = _decode(element), STORAGE[element]
    rows, cols = ACC_ROWS[:, :registers], ACC_COLS[:, :registers]
    issued = []   # per warpgroup: (its key, its lanes, the (buffer, global units) its product reads)
    for members in _warpgroups(st, mask, what):
        w = int(g.group_local[members[0]])
        reads = []
        issued.append((_key(g, members), members, reads))
        image = buffer.data[w * buffer.stride:(w + 1) * buffer.stride]
        descriptors = [_uniform(b_descriptor, members, g, what, "B")]
        if a.ndim == 1:
            descriptors.append(_uniform(a, members, g, what, "A"))
            a_matrix = descriptors[-1]
        else:
            a_matrix = _register_a(a[members], element)
        for descriptor, mn, major, name in zip(descriptors, (n, 64), (b_major, a_major), "BA"):
            offsets = operand_offsets(descriptor, mn, major, 2)
            if offsets.max() + 2 > st.workgroup.dynamic_bytes:
                raise InterpreterError(f"{what}: the {name} descriptor {descriptor:#x} reads up to byte "
                                       f"{int(offsets.max()) + 1} of the {st.workgroup.dynamic_bytes} bytes of "
                                       "dynamic shared memory")
            _check_async_read(sync, buffer, w, offsets, members, what)
            reads.append((buffer, np.unique((w * buffer.stride + offsets) // UNIT)))
        c = np.zeros((64, n), np.float32)
        c[rows, cols] = acc[members]
        first_lane = bool(np.broadcast_to(first, (g.lanes,))[members[0]])
        a_operand = a_matrix if isinstance(a_matrix, np.ndarray) else int(a_matrix)
        product = wgmma(image, c, a_operand, int(descriptors[0]), n, b_major, dtype, first_lane, a_major, decode)
        out[members] = product[rows, cols]
    return out, issued


def _uniform(values, members, g, what: str, operand: str) -> int:
    values = np.broadcast_to(values, (g.lanes,))[members]
    if (values != values[0]).any():
        raise InterpreterError(f"{what}: the threads of a warpgroup give different {operand} descriptors "
                               f"({g.describe(int(members[0]))} and others): a descriptor is warpgroup-uniform")
    return int(values[0]) & ((1 << 64) - 1)


def _register_a(registers: np.ndarray, element: str) -> np.ndarray:
    """The [64, 16] A operand from each thread's four .b32 registers of 16-bit pairs."""
    bits = registers.astype(np.int64) & 0xFFFFFFFF
    halves = np.stack([bits & 0xFFFF, bits >> 16], axis=-1).reshape(WARPGROUP, 8).astype(np.uint16)
    values = _decode(element)(halves if element == "bf16" else halves.view(np.float16))
    a = np.zeros((64, 16), np.float32)
    a[ACC_ROWS[:, :8], ACC_COLS[:, :8]] = values
    return a


def _check_async_read(sync, buffer, w: int, offsets: np.ndarray, members, what: str,
                      operand: str = "a wgmma operand") -> None:
    """An async-proxy read of `operand` at the bytes `offsets` of work-group w's image, by the lanes `members`."""
    units = np.unique((w * buffer.stride + offsets) // UNIT)
    missing = sync.unwritten(buffer, units)
    if missing is not None:
        raise InterpreterError(f"{what}: reads {operand} at byte {missing - w * buffer.stride} of {buffer.name} "
                               f"of work-group {sync.grid.first_group + w}, which nothing has written yet (a load "
                               "not waited for: nvgpu.mbarrier.try_wait.parity)")
    found = sync.unobserved(buffer, np.broadcast_to(units, (members.size, units.size)), members)
    if found is not None:
        row, _, barrier, phase = found
        raise InterpreterError(f"{what}: reads {operand} in {buffer.name} that a TMA load wrote completing on "
                               f"{sync.describe(barrier)} (phase {phase}), and {sync.grid.describe(int(members[row]))} "
                               "has not waited for that phase (nvgpu.mbarrier.try_wait.parity)")
    writer = sync.unfenced(buffer, units)
    if writer is not None:
        raise InterpreterError(f"{what}: reads {operand} in {buffer.name} that {sync.grid.describe(writer)} "
                               "wrote by an ordinary store with no fence.proxy.async since: the async proxy may not "
                               "see it")


def compile_wgmma(op: Operation, cc: KernelCompiler):
    acc_slot, a_slot, b_slot = cc.operands(op)
    attrs = {k: cc.enum_attr(op, k) for k in ("layoutA", "layoutB", "scaleD", "typeA", "typeB", "typeD", "scaleA",
                                                "scaleB")}
    n = int(re.search(r"n = (\d+)", op.attributes["shape"].text).group(1))
    if attrs["typeD"] != "f32" or attrs["typeA"] != attrs["typeB"] or attrs["typeA"] not in STORAGE \
            or attrs["scaleA"] != "one" or attrs["scaleB"] != "one":
        raise cc.error(op, "the interpreter runs f32 += bf16 / f16 products with unit input scales")
    a_major = "K" if attrs["layoutA"] == "row" else "MN"
    b_major = "K" if attrs["layoutB"] == "col" else "MN"
    first = attrs["scaleD"] == "zero"
    out, what, element = cc.result(op), cc.describe(op), attrs["typeA"]

    def run(st, mask):
        env = st.env
        descriptors = np.broadcast_to(env[a_slot], (st.grid.lanes,))
        env[out], issued = _product(st, mask, what, env[acc_slot], descriptors, env[b_slot], n, element, a_major,
                                    b_major, first)
        _issued(st, what, out, issued, (acc_slot,))

    return run


def _issued(st, what: str, slot: int, issued: list, registers=()) -> None:
    """Each warpgroup's product (_product's `issued`) is in flight, reading its shared-memory operands and
    the value slots `registers` (its accumulator, its A fragments), which must be fenced since written."""
    sync, g, meetings = _hopper(st, what), st.grid, st.workgroup.meetings
    for key, members, reads in issued:
        if sync.unfenced_registers(key, registers):
            raise InterpreterError(f"{what}: registers it reads (its accumulator or A fragments) were written after "
                                   f"the last wgmma.fence of {g.describe(int(members[0]))}'s warpgroup "
                                   "(nvvm.wgmma.fence.aligned must come between the write and the product)")
        sync.wgmma_issue(key, slot, reads, int(members[0]), int(meetings[members].max()))


def compile_inline_asm(op: Operation, cc: KernelCompiler):
    """The inline PTX the wgmma body emits: a descriptor plus a constant (wgmma_atom.offset_descriptor), or
    wgmma RS (WgmmaAtom.mma_rs: accumulator registers, four A registers, the B descriptor and scale-d, 0:
    D = A B)."""
    text = op.attributes.get("asm_string", "")
    if text == layouts.DESCRIPTOR_OFFSET_PTX:
        return _compile_descriptor_offset(op, cc)
    found = _RS.search(text)
    if found is None:
        raise cc.error(op, "the interpreter runs the inline PTX of wgmma RS (WgmmaAtom.mma_rs) and of a "
                           "descriptor's offset (wgmma_atom.offset_descriptor) only")
    n, element, b_major = int(found.group(1)), found.group(2), "K" if found.group(4) == "0" else "MN"
    slots = cc.operands(op)
    registers = n // 2
    if len(slots) != registers + 6:
        raise cc.error(op, f"wgmma RS m64n{n} takes {registers} accumulators, 4 A registers, a descriptor and "
                           f"scale-d; it has {len(slots)} operands")
    acc_slots, a_slots, b_slot, scale_slot = slots[:registers], slots[registers:registers + 4], slots[-2], slots[-1]
    out, what = cc.result(op), cc.describe(op)

    def run(st, mask):
        env, lanes = st.env, st.grid.lanes
        acc = np.stack([np.broadcast_to(env[s], (lanes,)) for s in acc_slots], axis=1)
        a = np.stack([np.broadcast_to(env[s], (lanes,)) for s in a_slots], axis=1)
        first = np.broadcast_to(env[scale_slot], (lanes,)) == 0
        env[out], issued = _product(st, mask, what, acc, a, env[b_slot], n, element, "K", b_major, first)
        _issued(st, what, out, issued, a_slots)

    return run


def _compile_descriptor_offset(op: Operation, cc: KernelCompiler):
    """add.s64 of a descriptor and a constant: arith.addi's i64 sum."""
    base_slot, constant_slot = cc.operands(op)
    out = cc.result(op)

    def run(st, mask):
        st.env[out] = np.add(st.env[base_slot], st.env[constant_slot])

    return run


def compile_warpgroup_sync(op: Operation, cc: KernelCompiler):
    """wgmma fence / commit / wait: products complete at issue (their values are computed then), but a
    result is readable only once its group is committed and waited for; all three are warpgroup-collective."""
    what = cc.describe(op)
    kind = op.name.split(".")[2]    # fence, commit, wait
    pending = int(op.attributes["group"].value) if kind == "wait" else 0

    def run(st, mask):
        keys = _warpgroup_keys(st, mask, what)
        sync = st.workgroup.hopper
        for key in keys if sync is not None else ():
            if kind == "fence":
                sync.wgmma_fence(key)
            elif kind == "commit":
                sync.wgmma_commit(key)
            elif kind == "wait":
                sync.wgmma_wait(key, pending)

    return run


# --- barriers, fences, budgets -----------------------------------------------------------------------

def compile_named_barrier(op: Operation, cc: KernelCompiler):
    """bar.sync id, threads: under lockstep the threads that meet are those executing it together."""
    slots = cc.operands(op)
    what = cc.describe(op)

    def run(st, mask):
        env, g = st.env, st.grid
        lanes = st.grid.executing(mask)
        threads = int(np.max(env[slots[1]])) if len(slots) > 1 else g.group_threads
        scheduler = st.scheduler
        if scheduler is not None:
            scheduler.named_barrier(int(np.max(env[slots[0]])) if slots else 0, threads, lanes, what)
        else:
            counts = np.bincount(g.group_local[lanes], minlength=g.groups)
            if ((counts != 0) & (counts != threads)).any():
                w = int(np.argmax((counts != 0) & (counts != threads)))
                raise InterpreterError(f"{what}: {int(counts[w])} threads of work-group {g.first_group + w} reach "
                                       f"a named barrier that expects {threads}")
        st.workgroup.barrier(mask, what)

    return run


def compile_fence_proxy(op: Operation, cc: KernelCompiler):
    kind = getattr(op.attributes.get("kind"), "text", "")
    if "async" not in kind:
        raise cc.error(op, f"only fence.proxy.async is supported (kind {kind or 'absent'})")
    what = cc.describe(op)

    def run(st, mask):
        _hopper(st, what).fence_proxy(st.grid.executing(mask))

    return run


def compile_setmaxregister(op: Operation, cc: KernelCompiler):
    """setmaxnreg: no effect on the emulation; the budget's rules are checked."""
    count = int(getattr(op.attributes["regCount"], "value", op.attributes["regCount"]))
    increase = "increase" in getattr(op.attributes["action"], "text", str(op.attributes["action"]))
    what = cc.describe(op)
    if count not in SETMAXNREG_BUDGETS:
        raise cc.error(op, f"{SETMAXNREG_RULE}, not {count}")

    key = id(op)

    def run(st, mask):
        g, sync = st.grid, _hopper(st, what)
        if st.scheduler is None:
            lanes = np.concatenate(_warpgroups(st, mask, what))
        else:   # roles may split a warpgroup: its budget moves once every part has executed the op
            lanes = sync.collective(key, st.grid.executing(mask), what)
            if not lanes.size:
                return
        sync.set_budget(g.group_local[lanes], g.thread_linear[lanes] // WARPGROUP, count, increase, what)

    return run


def compile_aligned_pointer(op: Operation, cc: KernelCompiler):
    """memref.extract_aligned_pointer_as_index of workgroup memory: the byte offset of its first element
    in the work-group's shared window (what a descriptor's address field encodes; dynamic shared memory
    starts at 0)."""
    (src,) = cc.operands(op)
    out, what = cc.result(op), cc.describe(op)

    def run(st, mask):
        m = st.env[src]
        if m.shared is None:
            raise InterpreterError(f"{what}: the interpreter takes the address of workgroup memory only")
        st.env[out] = (m.offset * m.storage.itemsize - st.grid.group_local * m.shared.stride).astype(np.int64)

    return run


def compile_cast(op: Operation, cc: KernelCompiler):
    """builtin.unrealized_conversion_cast of one value: the value itself (a tensor map's pointer)."""
    (src,) = cc.operands(op)
    out = cc.result(op)

    def run(st, mask):
        st.env[out] = st.env[src]

    return run


HANDLERS = {
    "nvgpu.mbarrier.create": compile_mbarrier_create,
    "nvgpu.mbarrier.init": _barrier_handler("init"),
    "nvgpu.mbarrier.arrive": _barrier_handler("arrive"),
    "nvgpu.mbarrier.arrive.expect_tx": _barrier_handler("expect_tx"),
    "nvgpu.mbarrier.try_wait.parity": compile_try_wait,
    "nvgpu.tma.async.load": compile_tma_load,
    "nvvm.cp.async.bulk.tensor.reduce": compile_tma_reduce,
    "nvvm.cp.async.bulk.tensor.global.shared.cta": compile_tma_store,
    "nvvm.cp.async.bulk.commit.group": compile_bulk_commit,
    "nvvm.cp.async.bulk.wait_group": compile_bulk_wait,
    "llvm.inttoptr": compile_int_to_pointer,
    "nvvm.wgmma.mma_async": compile_wgmma,
    "nvvm.wgmma.fence.aligned": compile_warpgroup_sync,
    "nvvm.wgmma.commit.group.sync.aligned": compile_warpgroup_sync,
    "nvvm.wgmma.wait.group.sync.aligned": compile_warpgroup_sync,
    "nvvm.barrier": compile_named_barrier,
    "nvvm.fence.proxy": compile_fence_proxy,
    "nvvm.setmaxregister": compile_setmaxregister,
    "llvm.mlir.zero": compile_zero,
    "llvm.extractvalue": compile_extractvalue,
    "llvm.bitcast": compile_bitcast,
    "llvm.inline_asm": compile_inline_asm,
    "memref.extract_aligned_pointer_as_index": compile_aligned_pointer,
    "builtin.unrealized_conversion_cast": compile_cast,
}
# Ops whose presence gives a kernel its Hopper state (hopper_sync.HopperSync).
HOPPER_OPS = frozenset(name for name in HANDLERS if name.startswith(("nvgpu.mbarrier", "nvgpu.tma", "nvvm.wgmma",
                                                                      "nvvm.cp.async.bulk",
                                                                      "nvvm.fence.proxy", "nvvm.setmaxregister",
                                                                      "nvvm.barrier")))
