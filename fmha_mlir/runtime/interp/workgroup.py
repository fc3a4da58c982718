"""Workgroup memory (shared memory / LDS) and the race detector that watches every access to it.

Storage. Each kind of workgroup memory of a launch chunk (a workgroup attribution, or the launch's
dynamic shared memory) is one byte buffer holding one copy per work-group, `stride` bytes apart (a
multiple of 16, so every element type and every cp.async size stays aligned). Memrefs over it are
typed NumPy views of those bytes, so memref.view's views of different element types alias exactly
as on the GPU. Bytes start as 0xFF: f16, bf16, f32 and f64 read that as NaN (integers as -1), since
real shared memory starts undefined and NaN makes a read of an element no lane wrote show up in the
results.

Races. Lockstep execution makes a kernel with a missing gpu.barrier compute the right numbers anyway
(every lane finishes an op before any lane starts the next), so the barrier discipline is checked
instead. Each work-group's *epoch* advances at every gpu.barrier it executes (a named barrier: its
threads'; an mbarrier arrival: the arriving threads', and a thread that waits for the phase takes the
latest epoch its arrivals reached, so stores before an arrival are ordered before the waiter's loads,
and loads before it before the waiter's stores); within one epoch of one
work-group it is an error when a lane reads an element another lane wrote (read after write), writes
an element another lane read (write after read), or two lanes write the same element (write after
write). Atomics do not conflict with atomics. A write of nvgpu.device_async_copy is *pending* until
the issuing lane's nvgpu.device_async_wait retires its group: any access to a pending element is an
error, and on retirement the copy counts as that lane's write in the lane's current epoch (so the
other lanes need a barrier before they read it). Pending copies survive barriers and the kernel's end.

Shadow state, per 2-byte unit of every buffer, as int32 *stamps* epoch * 4096 + slot (slot: the
thread's linear id in its work-group, < 1024; 1024 + that for an atomic; 3072 for atomics of several
threads): the last writer (a copy not waited for is 2^31 - 4096 + its thread, above every epoch), and
the readers of the epoch as two maxima, of (epoch, thread) and of (epoch, 1023 - thread), which name the
highest and the lowest reading thread, so two distinct readers whenever there are two. A stamp below
the accessing lane's epoch * 4096 is from an earlier epoch: a barrier costs O(lanes) and never touches
the shadow, and an access whose shadow stamps are all older than every accessing lane's epoch (the
usual case after a barrier) is cleared by two max() calls; only otherwise are the units compared one
by one (and a precise classification runs when that fails). Recording a read is two np.maximum.at.

Units of 2 bytes, not bytes: the smallest element the kernels keep in workgroup memory is 16-bit
(f16 / bf16; ldmatrix and mma move b16 elements), so 2-byte units are exact for every access the
interpreter supports while halving the shadow and the work per access; 1-byte elements are rejected.
The shadow takes 6 bytes per 2-byte unit; interpreter.py bounds the workgroup memory of a chunk.
"""
from __future__ import annotations

import numpy as np

from .errors import InterpreterError
from .lanes import LaneGrid
from .memory import MemRef, row_major
from .types import MemRefType, ScalarType

UNIT = 2                      # bytes per tracked unit
ALIGN = 16                    # work-group copies start at multiples of this many bytes
FILL = 0xFF                   # the bytes of fresh workgroup memory: NaN in every float type
EPOCH = 1 << 12               # stamp = epoch * EPOCH + slot
ATOMIC = 1 << 10              # slot of an atomic: ATOMIC + thread
SEVERAL = ATOMIC + (1 << 11)  # slot of atomics of several threads
MAX_THREADS = ATOMIC          # threads per work-group that slots can name
PENDING = (1 << 31) - EPOCH   # stamp of an async copy not waited for: PENDING + thread
MAX_EPOCH = PENDING // EPOCH - 1
NONE = -1                     # no access yet
VERBS = {"read": "reads", "write": "writes", "atomic": "atomically updates",
         "async": "copies (nvgpu.device_async_copy) into"}
OWN_SLOT = {"write": 0, "atomic": ATOMIC}  # what a lane's write / atomic adds to its stamp


class WorkgroupMemory:
    """The workgroup memory of one launch chunk: its buffers, the lanes' epochs and async copies."""

    def __init__(self, grid: LaneGrid, dynamic_bytes: int):
        self.grid = grid
        self.dynamic_bytes = dynamic_bytes
        self._dynamic: WorkgroupBuffer | None = None
        self.lanes = grid.lane_index
        self.thread = grid.thread_linear.astype(np.int32)
        self.base = np.zeros(grid.lanes, np.int32)        # epoch * EPOCH, per lane
        self.stamp = self.base + self.thread                # the lane's stamp in its epoch
        self.stamp_low = self.base + (ATOMIC - 1 - self.thread)  # the same, ordered from the top
        self.epochs = 0                                     # barriers executed in this chunk
        # barriers each lane met other lanes at (gpu.barrier, bar.sync; not an mbarrier arrival): what
        # orders one warpgroup's wgmma operand reads before another's stores (hopper_sync)
        self.meetings = np.zeros(grid.lanes, np.int64)
        self.committed = np.zeros(grid.lanes, np.int64)     # async groups each lane committed
        self.retired = np.zeros(grid.lanes, np.int64)       # groups below this index are complete
        self.pending: list[tuple] = []                      # (buffer, units, lanes, group) not retired
        self.hopper = None   # hopper_sync.HopperSync of a kernel with mbarrier / TMA / wgmma ops

    # --- buffers ---------------------------------------------------------------------------------

    def attribution(self, t: MemRefType, name: str) -> MemRef:
        """A fresh workgroup memory attribution of static type `t`, one copy per work-group."""
        what = f"workgroup memory {name}"
        if any(n is None for n in t.shape):
            raise InterpreterError(f"{what}: {t} needs a static shape to be allocated")
        strides = t.strides if t.strides is not None else row_major(t.shape)
        if any(s is None for s in strides):
            raise InterpreterError(f"{what}: {t} needs static strides to be allocated")
        span = 1 + sum((n - 1) * s for n, s in zip(t.shape, strides)) if all(t.shape) else 0
        buffer = self._buffer(what, span * t.elem.storage_dtype.itemsize)
        return buffer.typed(t.elem, t.shape, strides, self.grid.group_local * buffer.stride)

    def dynamic(self) -> MemRef:
        """gpu.dynamic_shared_memory: the launch's shared_bytes per work-group, as memref<?xi8>."""
        if self._dynamic is None:
            self._dynamic = self._buffer("dynamic shared memory", self.dynamic_bytes)
        buffer = self._dynamic
        return buffer.typed(ScalarType("i8"), (self.dynamic_bytes,), (1,), self.grid.group_local * buffer.stride)

    def _buffer(self, name: str, group_bytes: int) -> "WorkgroupBuffer":
        if self.grid.group_threads > MAX_THREADS:
            raise InterpreterError(f"{name}: work-groups of {self.grid.group_threads} threads are larger than "
                                   f"the {MAX_THREADS} the race detector can tell apart")
        return WorkgroupBuffer(self, name, group_bytes)

    # --- epochs and async groups -----------------------------------------------------------------

    def barrier(self, mask, what: str, meeting: bool = True) -> None:
        """Start a new epoch for the lanes that execute the barrier (whole groups, checked), or an mbarrier
        arrival (meeting False: the arriving lanes meet nobody)."""
        if meeting:
            if mask is None:
                self.meetings += 1
            else:
                self.meetings[mask] += 1
        self.epochs += 1
        if self.epochs > MAX_EPOCH:
            raise InterpreterError(f"{what}: more than {MAX_EPOCH} barriers in one launch chunk: the race "
                                   "detector has no epochs left (run fewer work-groups or iterations)")
        for stamps in (self.base, self.stamp, self.stamp_low):
            if mask is None:
                stamps += EPOCH
            else:
                stamps[mask] += EPOCH

    def acquire(self, lanes: np.ndarray, base: np.ndarray) -> None:
        """Lanes that observed an mbarrier phase take the epoch its arrivals released (`base`, per lane):
        what the arriving lanes did before they arrived is then ordered before what these lanes do next."""
        delta = np.maximum(base - self.base[lanes], 0).astype(np.int32)
        for stamps in (self.base, self.stamp, self.stamp_low):
            stamps[lanes] += delta

    def commit(self, mask) -> None:
        """nvgpu.device_async_create_group: each lane's uncommitted copies become its next group."""
        if mask is None:
            self.committed += 1
        else:
            self.committed[mask] += 1

    def wait(self, mask, groups: int) -> None:
        """nvgpu.device_async_wait: retire all but each lane's `groups` most recent committed groups;
        their copies become the lane's writes in its current epoch."""
        limit = self.committed - groups
        self.retired = np.maximum(self.retired, limit if mask is None else np.where(mask, limit, 0))
        still = []
        for buffer, units, lanes, group in self.pending:
            done = group < self.retired[lanes]
            if not done.all():
                still.append((buffer, units[~done], lanes[~done], group[~done]))
                units, lanes = units[done], lanes[done]
            buffer.writer[units.reshape(-1)] = np.repeat(self.stamp[lanes], units.shape[1])
        self.pending = still

    # --- accesses --------------------------------------------------------------------------------

    def access(self, buffer: "WorkgroupBuffer", kind: str, flat, mask, n: int, itemsize: int, what: str,
               element) -> None:
        """Check and record one op's accesses of `buffer`: kind read / write / atomic / async (a
        cp.async destination); flat: [L] or [L, n] storage indices of `itemsize`-byte elements (not
        modified later); element(lane, position) gives the index tuple of an element for messages."""
        if itemsize < UNIT:
            raise InterpreterError(f"{what}: {itemsize}-byte elements in workgroup memory are not supported "
                                   f"(the race detector tracks {UNIT}-byte units)")
        flat = np.reshape(flat, (-1, n))
        if mask is None:
            lanes, pick = self.lanes, slice(None)
            rows = np.broadcast_to(flat, (lanes.size, n))
        else:
            lanes = pick = np.flatnonzero(mask)
            if not lanes.size:
                return
            rows = flat[lanes] if flat.shape[0] > 1 else np.broadcast_to(flat, (lanes.size, n))
        per = itemsize // UNIT
        units = rows if per == 1 else (rows[:, :, None] * per + np.arange(per)).reshape(rows.shape[0], -1)
        units = np.ascontiguousarray(units)
        every = units.reshape(-1)
        width = units.shape[1]
        base = self.base[pick]
        oldest = base.min()
        context = (buffer, kind, units, lanes, per, what, element)
        if self.hopper is not None:
            rows = units.shape[0]
            problem = self.hopper.generic_access(buffer, kind, units, np.broadcast_to(lanes, (rows,)),
                                                 np.broadcast_to(self.meetings[pick], (rows,)))
            if problem is not None:
                raise InterpreterError(f"{what}: {self._where(context, problem[0])}, {problem[1]}")
        writer = buffer.writer.take(every)
        if kind == "read":
            if writer.max() >= oldest:
                self._check(context, writer.reshape(units.shape), None, None)
            np.maximum.at(buffer.high, every, np.repeat(self.stamp[pick], width))
            np.maximum.at(buffer.low, every, np.repeat(self.stamp_low[pick], width))
            return
        high = buffer.high.take(every)
        if max(writer.max(), high.max()) >= oldest:
            self._check(context, writer.reshape(units.shape), high.reshape(units.shape),
                        buffer.low.take(every).reshape(units.shape))
        if kind == "async":
            own = np.repeat(PENDING + self.thread[pick], width)
        else:
            own = np.repeat(self.stamp[pick] + OWN_SLOT[kind], width)
        buffer.writer[every] = own
        clash = buffer.writer.take(every) != own
        if kind == "atomic":  # several lanes' atomics in one epoch: no single lane to name
            slot = writer - np.repeat(base, width)
            several = clash | ((slot >= ATOMIC) & (slot < EPOCH) & (writer != own))
            if several.any():
                buffer.writer[every[several]] = np.repeat(base + SEVERAL, width)[several]
        elif clash.any():
            self._same_op_clash(context, clash.reshape(units.shape), buffer.writer.take(every))
        if kind == "async":
            self.pending.append((buffer, units, lanes, self.committed[lanes]))

    def _check(self, context, writer, high, low) -> None:
        """Compare each unit's stamps with its lane's epoch; classify the failures precisely."""
        buffer, kind, units, lanes, per, what, element = context
        base, mine = self.base[lanes][:, None], self.stamp[lanes][:, None]
        slot, own = writer - base, mine - base
        written = (slot >= 0) & (slot != own) & (slot != own + ATOMIC)  # by another lane, or pending
        if kind == "atomic":
            written &= ~((slot >= ATOMIC) & (slot < EPOCH))
        read = False if kind == "read" else \
            (high >= base) & ((high != mine) | (low != self.stamp_low[lanes][:, None]))
        if not (written | read).any():
            return
        if written.any():
            spot = _first(written)
            if writer[spot] >= PENDING:
                verb = "read of" if kind == "read" else "write over"
                raise InterpreterError(
                    f"{what}: {verb} an async copy that was not waited for: {self._where(context, spot)}, "
                    f"which nvgpu.device_async_copy of {self._slot(context, spot, writer[spot] - PENDING)} "
                    "writes, and no wait of that lane has retired the copy's group yet")
            order = "read after write" if kind == "read" else "write after write"
            raise InterpreterError(f"{what}: data race on {self._where(context, spot)}, which "
                                   f"{self._slot(context, spot, slot[spot])} wrote since the work-group's "
                                   f"last gpu.barrier ({order})")
        spot = _first(read)
        reader = high[spot] - base[spot[0], 0]
        if reader == own[spot[0], 0]:
            reader = ATOMIC - 1 - (low[spot] - base[spot[0], 0])
        raise InterpreterError(f"{what}: data race on {self._where(context, spot)}, which "
                               f"{self._slot(context, spot, reader)} read since the work-group's last "
                               "gpu.barrier (write after read)")

    # --- messages --------------------------------------------------------------------------------

    def _same_op_clash(self, context, clash, writer) -> None:
        buffer, kind, units, lanes, per, what, element = context
        spot = _first(clash)
        stamp = writer.reshape(units.shape)[spot]
        other = stamp - (PENDING if kind == "async" else self.base[lanes[spot[0]]])
        raise InterpreterError(f"{what}: data race on {self._where(context, spot)}, which "
                               f"{self._slot(context, spot, other)} writes in the same op (write after write)")

    def _where(self, context, spot) -> str:
        """'<buffer> of work-group (..): lane L (thread ..) reads element (..) (byte B)'."""
        buffer, kind, units, lanes, per, what, element = context
        row, column = spot
        lane = int(lanes[row])
        byte = int(units[spot]) * UNIT - int(self.grid.group_local[lane]) * buffer.stride
        block = tuple(int(a[lane]) for a in self.grid.block_id)
        return (f"{buffer.name} of work-group {block}: {self._lane(lane)} {VERBS[kind]} element "
                f"{element(lane, column // per)} (byte {byte - byte % (per * UNIT)})")

    def _slot(self, context, spot, slot) -> str:
        """The lane (or lanes) a slot of the accessing lane's work-group names."""
        slot = int(slot)
        if slot == SEVERAL:
            return "atomics of several lanes"
        lane = int(context[3][spot[0]])
        other = lane - int(self.thread[lane]) + slot % ATOMIC
        return f"an atomic of {self._lane(other)}" if slot >= ATOMIC else self._lane(other)

    def _lane(self, lane: int) -> str:
        thread = tuple(int(a[lane]) for a in self.grid.thread_id)
        return f"lane {self.grid.first_group * self.grid.group_threads + lane} (thread {thread})"


def _first(flags: np.ndarray) -> tuple[int, int]:
    return np.unravel_index(int(np.argmax(flags)), flags.shape)


class WorkgroupBuffer:
    """One kind of workgroup memory for every work-group of a chunk, and its shadow state."""

    def __init__(self, memory: WorkgroupMemory, name: str, group_bytes: int):
        self.memory = memory
        self.name = name
        self.stride = -(-group_bytes // ALIGN) * ALIGN
        self.data = np.full(memory.grid.groups * self.stride, FILL, np.uint8)
        units = self.data.size // UNIT
        self.writer = np.full(units, NONE, np.int32)
        self.high = np.full(units, NONE, np.int32)  # max stamp of a reader
        self.low = np.full(units, NONE, np.int32)   # max stamp_low of a reader: the lowest thread

    def typed(self, elem: ScalarType, shape, strides, byte_offset) -> MemRef:
        """A memref of `elem` over these bytes starting at each lane's `byte_offset` (a multiple of the
        element size)."""
        storage = self.data.view(elem.storage_dtype)
        offset = np.asarray(byte_offset, dtype=np.int64) // elem.storage_dtype.itemsize
        return MemRef(storage, offset, tuple(np.int64(n) for n in shape), tuple(np.int64(s) for s in strides),
                      elem, self)

    def access(self, kind: str, flat, mask, n: int, itemsize: int, what: str, element) -> None:
        self.memory.access(self, kind, flat, mask, n, itemsize, what, element)
