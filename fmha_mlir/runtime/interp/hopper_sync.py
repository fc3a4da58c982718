"""Happens-before for Hopper kernels: mbarrier phases with transaction counts, TMA-written shared
memory, the generic / async proxies, and register budgets, for one launch chunk.

mbarriers. A group (nvgpu.mbarrier.create) holds, per work-group and barrier, the arrivals a phase
expects, those still pending, the transaction bytes still to come (arrive.expect_tx adds, a TMA load's
completion subtracts) and the number of completed phases. A phase completes when its pending arrivals
and its transaction bytes are both zero. try_wait.parity(p) passes once the barrier's current phase has
a parity other than p; a lane that passes has *observed* every phase before the current one.

TMA writes. A TMA box lands in shared memory at once, but its bytes are marked with the barrier and
phase it completes on; a read of a marked byte (an ordinary load, a wgmma operand) is an error unless
every reading lane has observed that phase: the "missing mbarrier wait" of a pipeline. When roles run
as coroutines the consumer may get there before the producer issued the load at all: a wgmma operand
that nothing has written yet is an error too.

Proxies. Shared memory written by ordinary stores (the generic proxy) and then read by wgmma or TMA
(the async proxy) needs a fence.proxy.async by the writing thread in between; each 2-byte unit keeps
its last generic writer until that lane fences, and an async read of a unit with a writer is an error.

Bulk groups. A TMA reduce-add or box store reads its shared-memory box through the async proxy (so the
proxy rule applies) and keeps reading it until its bulk group is waited for: each unit it reads keeps the
issuing lane until that lane's wait_group retires the group. An ordinary store to such a unit is an error
(the box is overwritten while the write may still read it), and so is a work-group that ends with bulk
writes not waited for (its shared memory is handed to the next work-group). A group's global writes land at
issue here, but count as complete only after a wait_group without .read, and as published to other
work-groups only by a semaphore signal after that (reduce_order.py checks the adds' order).

wgmma operand reads. A product reads its shared-memory operands through the async proxy from issue
until its group is waited for: each unit it reads keeps the product (in flight until then), the first
lane of its warpgroup and how many barriers that lane had met (gpu.barrier, bar.sync: WorkgroupMemory.
meetings). An ordinary store to such a unit is an error while the product is in flight (by any thread),
and after that too when the storing thread is in another warpgroup and has met no barrier since the read
(write after read: the barrier that orders another warpgroup's product before the store is missing; an
mbarrier phase does not count, it orders only what its arrivals did); a TMA load over a unit of a product
in flight is an error as well. A warpgroup's own later stores need only the wait (wgmma.wait_group is
collective).

wgmma fences. A product's registers written by other instructions (an accumulator's zeros, the packed
A fragments of an RS product) need a wgmma.fence by its warpgroup after the write and before the
product: each such value keeps the tick of its write, each warpgroup the tick of its last fence.

Register budgets. setmaxnreg moves a warpgroup's per-thread budget (24..256, multiples of 8); the
warpgroups of a work-group share the SM's 64K registers, so their budgets may not sum past that.
"""
from __future__ import annotations

import numpy as np

from ...target import HOPPER_REGISTER_FILE as REGISTER_FILE, SETMAXNREG_BUDGETS
from ...wgmma_layouts import WARPGROUP
from .errors import InterpreterError
from .lanes import LaneGrid

UNIT = 2                         # bytes per tracked unit, as workgroup.py's race detector
NONE = -1


class MbarrierGroup:
    """The barriers of one nvgpu.mbarrier.create, for every work-group of the chunk."""

    def __init__(self, count: int, first_id: int, groups: int, what: str):
        self.count, self.first_id, self.what = count, first_id, what
        self.expected = np.zeros((groups, count), np.int64)
        self.pending = np.zeros((groups, count), np.int64)
        self.tx = np.zeros((groups, count), np.int64)
        self.phase = np.zeros((groups, count), np.int64)
        self.initialised = np.zeros((groups, count), bool)
        # the race detector's epoch the arrivals of the current phase reached, and of the last completed one
        self.release = np.zeros((groups, count), np.int64)
        self.released = np.zeros((groups, count), np.int64)

    def describe(self, barrier: int) -> str:
        return f"mbarrier {barrier} of {self.what}"

    def complete(self) -> None:
        """Complete every phase whose arrivals and transaction bytes are all in."""
        done = self.initialised & (self.pending == 0) & (self.tx == 0)
        self.phase += done
        self.pending = np.where(done, self.expected, self.pending)
        self.released = np.where(done, self.release, self.released)
        self.release = np.where(done, 0, self.release)


def warpgroup_ids(grid: LaneGrid, lanes: np.ndarray) -> np.ndarray:
    """Each chunk lane's warpgroup as one number: its work-group and its warpgroup in it."""
    return grid.group_local[lanes] * WARPGROUP * 64 + grid.thread_linear[lanes] // WARPGROUP


class _Shadow:
    """Per 2-byte unit of one workgroup buffer: the barrier id and phase a TMA write completes on
    (NONE: not TMA-written) and the last generic writer (a chunk lane) not yet fenced."""

    def __init__(self, units: int):
        self.tma_barrier = np.full(units, NONE, np.int64)
        self.tma_phase = np.zeros(units, np.int64)
        self.generic_writer = np.full(units, NONE, np.int64)
        self.written = np.zeros(units, bool)     # by anything, ever: an async read of others reads garbage
        self.bulk_reader = np.full(units, NONE, np.int64)   # the lane whose bulk reduce may still read it
        self.wgmma_product = np.full(units, NONE, np.int64)  # the last wgmma product that read it
        self.wgmma_reader = np.full(units, NONE, np.int64)   # the first lane of that product's warpgroup
        self.wgmma_meetings = np.zeros(units, np.int64)      # the barriers its first lane had met at issue


class HopperSync:
    """What one launch chunk's Hopper ops share (WorkgroupMemory.hopper)."""

    def __init__(self, grid: LaneGrid):
        self.grid = grid
        self.groups: dict[int, MbarrierGroup] = {}      # by the creating op's id
        self.observed = np.zeros((grid.lanes, 0), np.int64)   # [lane, barrier id]: phases seen complete
        self._shadows: dict[int, _Shadow] = {}
        self._group_of: list[tuple[MbarrierGroup, int]] = []  # barrier id -> (group, index)
        warpgroups = -(-grid.group_threads // WARPGROUP)
        self.budgets = np.zeros((grid.groups, warpgroups), np.int64)   # 0: not set by setmaxnreg
        # per lane: its bulk reduces since its last commit, and its committed groups not yet waited for,
        # each a list of (buffer key, units read)
        self._bulk_open: dict[int, list] = {}
        self._bulk_groups: dict[int, list[list]] = {}
        # per lane: its groups committed, those whose global writes completed (a wait_group without read;
        # groups complete in order), and those completed before its last semaphore signal (published)
        self._bulk_committed: dict[int, int] = {}
        self._bulk_completed: dict[int, int] = {}
        self._bulk_published: dict[int, int] = {}
        # wgmma per warpgroup (work-group, warpgroup): its products since the last commit, its committed
        # groups not yet waited for (each a list of product numbers), and which product wrote each
        # accumulator value (by the value's slot) last
        self._wgmma_open: dict[tuple, list[int]] = {}
        self._wgmma_groups: dict[tuple, list[list[int]]] = {}
        self._wgmma_writer: dict[int, dict[tuple, int]] = {}
        self._wgmma_count = 0
        self._wgmma_flying = np.zeros(1024, bool)    # by product number: issued, its group not waited for
        # ticks of the wgmma fences: each value slot a product reads as registers (written by an op other
        # than wgmma), and each warpgroup's last fence
        self._tick = 0
        self._written_at: dict[int, int] = {}
        self._fenced: dict[tuple, int] = {}
        # a warpgroup-collective op whose warpgroup is split over roles: lanes that executed it so far, by
        # (op, work-group, warpgroup), and what the op is
        self._collective: dict[tuple, set[int]] = {}
        self._collective_what: dict[tuple, str] = {}

    # --- mbarriers ---------------------------------------------------------------------------------

    def group(self, key: int, count: int, what: str) -> MbarrierGroup:
        """The group of one nvgpu.mbarrier.create (the same object every time the op runs)."""
        if key not in self.groups:
            group = MbarrierGroup(count, self.observed.shape[1], self.grid.groups, what)
            self.groups[key] = group
            self._group_of += [(group, b) for b in range(count)]
            self.observed = np.concatenate([self.observed, np.zeros((self.grid.lanes, count), np.int64)], axis=1)
        return self.groups[key]

    def describe(self, barrier_id: int) -> str:
        group, index = self._group_of[barrier_id]
        return group.describe(index)

    # --- shared memory -----------------------------------------------------------------------------

    def _shadow(self, buffer) -> _Shadow:
        key = id(buffer)
        if key not in self._shadows:
            self._shadows[key] = _Shadow(buffer.data.size // UNIT)
        return self._shadows[key]

    def tma_write(self, buffer, byte_offsets: np.ndarray, group: MbarrierGroup, workgroup: int, barrier: int,
                  what: str = "a TMA load") -> None:
        """A TMA load wrote these bytes (global indices into buffer.data), completing on `barrier`; an error
        (naming the product's warpgroup) if a wgmma in flight reads any of them."""
        shadow, units = self._shadow(buffer), np.unique(byte_offsets // UNIT)
        reader = self._flying_reader(shadow, units)
        if reader is not None:
            lane = int(shadow.wgmma_reader[units][reader])
            raise InterpreterError(f"{what}: overwrites shared memory that a wgmma of {self.grid.describe(lane)}'s "
                                   "warpgroup may still be reading (its group is not waited for: "
                                   "nvvm.wgmma.wait.group.sync.aligned)")
        shadow.tma_barrier[units] = group.first_id + barrier
        shadow.tma_phase[units] = group.phase[workgroup, barrier]
        shadow.generic_writer[units] = NONE
        shadow.written[units] = True

    def unwritten(self, buffer, units: np.ndarray) -> int | None:
        """The first of `units` that nothing has written yet (its global byte index), else None."""
        shadow = self._shadow(buffer)
        missing = ~shadow.written[units]
        return int(units[np.argmax(missing)]) * UNIT if missing.any() else None

    def unobserved(self, buffer, units: np.ndarray, lanes: np.ndarray) -> tuple | None:
        """(row, column, barrier id, phase) of the first unit of `units` [rows, n] (row r read by lane
        lanes[r]) that a TMA load wrote in a phase its reader has not observed; None if there is none."""
        shadow = self._shadows.get(id(buffer))
        if shadow is None:
            return None
        barrier = shadow.tma_barrier[units]
        marked = barrier != NONE
        if not marked.any():
            return None
        seen = self.observed[np.broadcast_to(lanes[:, None], units.shape)[marked], barrier[marked]]
        bad = np.zeros(units.shape, bool)
        bad[marked] = seen <= shadow.tma_phase[units][marked]
        if not bad.any():
            return None
        row, column = np.unravel_index(int(np.argmax(bad)), bad.shape)
        return row, column, int(barrier[row, column]), int(shadow.tma_phase[units[row, column]])

    def generic_access(self, buffer, kind: str, units: np.ndarray, lanes: np.ndarray,
                       meetings: np.ndarray) -> tuple | None:
        """An ordinary load or store of `units` [rows, n] by `lanes` [rows], which have met `meetings` [rows]
        barriers: (spot, problem) if it touches TMA-written bytes not waited for, or stores over a wgmma
        operand unordered with its read; a store becomes the units' unfenced generic write."""
        found = self.unobserved(buffer, units, lanes)
        if found is not None:
            row, column, barrier, phase = found
            verb = "reads" if kind == "read" else "overwrites"
            return (row, column), (f"which a TMA load wrote completing on {self.describe(barrier)} (phase {phase}); "
                                   f"it {verb} them without waiting for that phase (nvgpu.mbarrier.try_wait.parity)")
        if kind != "read":
            shadow = self._shadow(buffer)
            problem = self._wgmma_write_after_read(shadow, units, lanes, meetings)
            if problem is not None:
                return problem
            readers = shadow.bulk_reader[units]
            if (readers != NONE).any():
                spot = tuple(int(i) for i in np.unravel_index(int(np.argmax(readers != NONE)), units.shape))
                return spot, (f"which a bulk reduce issued by {self.grid.describe(int(readers[spot]))} may still be "
                              "reading: that thread has not waited for its group (nvvm.cp.async.bulk.wait_group "
                              "with read)")
            shadow.generic_writer[units] = np.broadcast_to(lanes[:, None], units.shape)
            shadow.tma_barrier[units] = NONE
            shadow.written[units] = True
        return None

    def _flying_reader(self, shadow: _Shadow, units: np.ndarray):
        """The index (into units) of the first unit a wgmma product in flight reads, else None."""
        product = shadow.wgmma_product[units]
        read = product != NONE
        if not read.any():
            return None
        flying = np.zeros(units.shape, bool)
        flying[read] = self._wgmma_flying[product[read]]
        return np.unravel_index(int(np.argmax(flying)), units.shape) if flying.any() else None

    def _wgmma_write_after_read(self, shadow: _Shadow, units: np.ndarray, lanes: np.ndarray,
                                meetings: np.ndarray) -> tuple | None:
        """(spot, problem) of a store over a wgmma operand: its product in flight, or read by another
        warpgroup with no barrier met between; None if there is none."""
        spot = self._flying_reader(shadow, units)
        if spot is not None:
            spot = tuple(int(i) for i in spot)
            return spot, (f"which a wgmma of {self.grid.describe(int(shadow.wgmma_reader[units][spot]))}'s warpgroup "
                          "may still be reading: its group is not waited for (nvvm.wgmma.wait.group.sync.aligned)")
        reader = shadow.wgmma_reader[units]
        read = reader != NONE
        if not read.any():
            return None
        other = np.zeros(units.shape, bool)
        writers = np.broadcast_to(lanes[:, None], units.shape)
        other[read] = warpgroup_ids(self.grid, reader[read]) != warpgroup_ids(self.grid, writers[read])
        racing = other & (shadow.wgmma_meetings[units] >= np.broadcast_to(meetings[:, None], units.shape))
        if not racing.any():
            return None
        spot = tuple(int(i) for i in np.unravel_index(int(np.argmax(racing)), units.shape))
        return spot, (f"which a wgmma of {self.grid.describe(int(reader[spot]))}'s warpgroup read with no barrier "
                      "met since (write after read: no gpu.barrier or bar.sync orders that product's reads "
                      "before this store)")

    def unfenced(self, buffer, units: np.ndarray) -> int | None:
        """The chunk lane of an unfenced generic write among `units`, else None."""
        shadow = self._shadows.get(id(buffer))
        if shadow is None:
            return None
        writers = shadow.generic_writer[units]
        hit = writers != NONE
        return int(writers[hit][0]) if hit.any() else None

    def fence_proxy(self, lanes: np.ndarray) -> None:
        """fence.proxy.async by `lanes`: their generic writes are ordered before later async accesses."""
        for shadow in self._shadows.values():
            shadow.generic_writer[np.isin(shadow.generic_writer, lanes)] = NONE

    # --- bulk groups ---------------------------------------------------------------------------------

    def bulk_read(self, buffer, units: np.ndarray, lane: int) -> None:
        """A bulk write issued by `lane` reads `units` (global units of buffer.data) until its group is waited for."""
        self._shadow(buffer).bulk_reader[units] = lane
        self._bulk_open.setdefault(lane, []).append((id(buffer), units))

    def bulk_commit(self, lanes: np.ndarray) -> None:
        """cp.async.bulk.commit_group by `lanes`: each one's bulk writes since its last commit become a group."""
        for lane in lanes.tolist():
            reads = self._bulk_open.pop(lane, [])
            if reads:
                self._bulk_groups.setdefault(lane, []).append(reads)
                self._bulk_committed[lane] = self.bulk_group(lane) + 1

    def bulk_wait(self, lanes: np.ndarray, pending: int, read: bool) -> None:
        """cp.async.bulk.wait_group `pending` by `lanes`: all but each one's `pending` latest groups have
        read their shared memory, and with `read` False, completed their writes too."""
        for lane in lanes.tolist():
            if not read:
                self._bulk_completed[lane] = max(self._bulk_completed.get(lane, 0), self.bulk_group(lane) - pending)
            groups = self._bulk_groups.get(lane, [])
            split = max(len(groups) - pending, 0)
            done, self._bulk_groups[lane] = groups[:split], groups[split:]
            for reads in done:
                for key, units in reads:
                    shadow = self._shadows[key]
                    mine = units[shadow.bulk_reader[units] == lane]
                    shadow.bulk_reader[mine] = NONE

    def bulk_group(self, lane: int) -> int:
        """The number of the bulk group `lane`'s next reduce joins (its groups counted from 0)."""
        return self._bulk_committed.get(lane, 0)

    def bulk_publish(self, lanes: np.ndarray) -> None:
        """A semaphore signal by `lanes` (a release): what their completed groups wrote is published."""
        for lane in lanes.tolist():
            self._bulk_published[lane] = self._bulk_completed.get(lane, 0)

    def bulk_published(self, lane: int) -> int:
        """How many of `lane`'s first bulk groups had completed at its last semaphore signal."""
        return self._bulk_published.get(lane, 0)

    # --- wgmma groups --------------------------------------------------------------------------------

    def wgmma_issue(self, warpgroup: tuple, slot: int, reads=(), lane: int = NONE, meetings: int = 0) -> None:
        """A product of `warpgroup` writes the accumulator value in `slot` and reads `reads` ((buffer,
        global units) of its shared-memory operands), issued with `lane` its warpgroup's first lane, which
        has met `meetings` barriers: in flight until its group is waited for."""
        self._wgmma_count += 1
        product = self._wgmma_count
        if product >= self._wgmma_flying.size:
            self._wgmma_flying = np.concatenate([self._wgmma_flying, np.zeros(self._wgmma_flying.size, bool)])
        self._wgmma_flying[product] = True
        for buffer, units in reads:
            shadow = self._shadow(buffer)
            shadow.wgmma_product[units], shadow.wgmma_reader[units] = product, lane
            shadow.wgmma_meetings[units] = meetings
        self._wgmma_open.setdefault(warpgroup, []).append(product)
        self._wgmma_writer.setdefault(slot, {})[warpgroup] = product

    def register_written(self, slot: int) -> None:
        """An op other than wgmma wrote the value in `slot`, which a product may read as registers."""
        self._tick += 1
        self._written_at[slot] = self._tick

    def wgmma_fence(self, warpgroup: tuple) -> None:
        self._tick += 1
        self._fenced[warpgroup] = self._tick

    def unfenced_registers(self, warpgroup: tuple, slots) -> bool:
        """Whether a value in `slots` was written after the warpgroup's last wgmma.fence (or it has none)."""
        fenced = self._fenced.get(warpgroup, -1)
        return any(self._written_at.get(slot, -1) > fenced for slot in slots)

    def wgmma_commit(self, warpgroup: tuple) -> None:
        products = self._wgmma_open.pop(warpgroup, [])
        if products:
            self._wgmma_groups.setdefault(warpgroup, []).append(products)

    def wgmma_wait(self, warpgroup: tuple, pending: int) -> None:
        groups = self._wgmma_groups.get(warpgroup, [])
        split = max(len(groups) - pending, 0)
        for products in groups[:split]:
            self._wgmma_flying[products] = False
        self._wgmma_groups[warpgroup] = groups[split:]

    def wgmma_in_flight_any(self, slot: int) -> bool:
        """Whether any warpgroup's product that wrote `slot` may be in flight (a cheap first test)."""
        return bool(self._wgmma_writer.get(slot)) and any(self._wgmma_groups.values())

    def wgmma_in_flight(self, warpgroup: tuple, slot: int) -> bool:
        """Whether the product that last wrote `slot` for `warpgroup` is in a committed group not yet waited
        for. (An uncommitted product's registers may be read: that is how the next RS product of its chain
        takes them, through llvm.extractvalue into its inline PTX.)"""
        product = self._wgmma_writer.get(slot, {}).get(warpgroup)
        return product is not None and any(product in group for group in self._wgmma_groups.get(warpgroup, []))

    def collective(self, key, lanes: np.ndarray, what: str) -> np.ndarray:
        """Record that `lanes` executed the warpgroup-collective op `key` (its roles run one after another,
        each with its part of a warpgroup); the lanes of the warpgroups that have now executed it whole."""
        g = self.grid
        done = []
        for w, k in set(zip(g.group_local[lanes].tolist(), (g.thread_linear[lanes] // WARPGROUP).tolist())):
            part = (key, w, k)
            seen = self._collective.setdefault(part, set())
            seen.update(lanes[(g.group_local[lanes] == w) & (g.thread_linear[lanes] // WARPGROUP == k)].tolist())
            self._collective_what[part] = what
            if len(seen) == WARPGROUP:
                done += sorted(self._collective.pop(part))
        return np.asarray(done, dtype=np.int64)

    def finish(self, what: str) -> None:
        """The end of the chunk's work-groups: an error if a lane left bulk writes not waited for, or a
        warpgroup executed a collective op in part."""
        for part, seen in self._collective.items():
            raise InterpreterError(f"{self._collective_what[part]}: {self.grid.describe(min(seen))} is in a "
                                   f"warpgroup that does not execute it whole ({len(seen)} of {WARPGROUP} threads): "
                                   "wgmma and setmaxnreg are warpgroup-collective")
        for lane, left in [*self._bulk_open.items(), *self._bulk_groups.items()]:
            if left:
                raise InterpreterError(f"{what}: {self.grid.describe(lane)} ends with bulk writes (reduce-adds, "
                                       "stores) it has not committed and waited for (nvvm.cp.async.bulk.commit."
                                       "group, wait_group with read): they may still read shared memory the next "
                                       "work-group is given")

    # --- register budgets --------------------------------------------------------------------------

    def set_budget(self, workgroups: np.ndarray, warpgroups: np.ndarray, count: int, increase: bool,
                   what: str) -> None:
        old = self.budgets[workgroups, warpgroups]
        if (increase and (old > count).any()) or (not increase and ((old != 0) & (old < count)).any()):
            raise InterpreterError(f"{what}: setmaxnreg.{'inc' if increase else 'dec'} to {count} from a budget of "
                                   f"{int(old.max() if increase else old.min())} registers moves the other way")
        self.budgets[workgroups, warpgroups] = count
        # a warpgroup yet to move its budget counts at the least it could keep: setmaxnreg.inc waits for
        # registers the other warpgroups give back, so the order of the moves is not an error
        total = np.where(self.budgets > 0, self.budgets, SETMAXNREG_BUDGETS[0]).sum(axis=1) * WARPGROUP
        if (total > REGISTER_FILE).any():
            group = int(np.argmax(total))
            raise InterpreterError(f"{what}: the warpgroups of work-group {self.grid.first_group + group} now ask for "
                                   f"{int(total[group])} registers ({self.budgets[group].tolist()} per thread), "
                                   f"more than the SM's {REGISTER_FILE}")
