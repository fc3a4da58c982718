"""The order of bulk reduce-adds into global memory in a kernel whose work-groups take turns
(fmha.semaphore_*: deterministic dQ, docs/design/accumulation.md), which says so by ORDERED_REDUCES
on its gpu.func (passes/hopper_sync.declare_ordered_reduces).

Deterministic mode is worth something only if every element sums its terms in one order. Here a
reduce-add lands at issue, so the interpreter's sum is always in its own run's order; what it checks is
that the GPU's could not differ: a reduce-add onto an element that another work-group's bulk group wrote
must come after that group completed (cp.async.bulk.wait_group without .read) and its thread then
signalled a semaphore (the release that publishes it, HopperSync.bulk_publish). Else the two adds could
land in either order, and the sum's rounding with them. Which semaphore guards which elements is the
kernel's business: the check needs only the writes, so a writer may keep its latest group in flight
across a signal for an earlier one (config.turn_overlap). It compares with the writer's latest signal,
not with the one the adding work-group waited for: a signal on the wrong counter shows in the counters
(a wait that never passes, or final counts the tests compare with each query block's visits).
"""
from __future__ import annotations

import numpy as np

from .errors import InterpreterError

ORDERED_REDUCES = "fmha.ordered_reduces"


class _Writers:
    """The threads that issued bulk writes, numbered in the order they first did: (HopperSync, lane,
    work-group) by number."""

    def __init__(self):
        self._list: list[tuple] = []
        self._ids: dict[tuple[int, int], int] = {}

    def number(self, sync, lane: int, work_group: int) -> int:
        me = self._ids.setdefault((id(sync), lane), len(self._list))
        if me == len(self._list):
            self._list.append((sync, lane, work_group))
        return me

    def __getitem__(self, number: int) -> tuple:
        return self._list[number]


class ReduceOrder:
    """Per element of each tensor that bulk reduce-adds wrote: the thread and bulk group that wrote it last."""

    def __init__(self):
        self._writers = _Writers()
        self._last: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}   # tensor -> (writer id, group) per element

    def reduce(self, tensor: np.ndarray, region: tuple, sync, lane: int, work_group: int, what: str) -> None:
        """`lane` of `work_group` (its Hopper state `sync`) reduce-adds into tensor[region], in the bulk group
        sync.bulk_group(lane); an error if another work-group's unpublished group wrote any element there."""
        key = (tensor.__array_interface__["data"][0], tensor.shape, tensor.strides)
        writer, group = self._last.setdefault(key, (np.full(tensor.shape, -1, np.int64),
                                                    np.zeros(tensor.shape, np.int64)))
        me = self._writers.number(sync, lane, work_group)
        writers, groups = writer[region], group[region]
        for other in np.unique(writers[(writers >= 0) & (writers != me)]).tolist():
            other_sync, other_lane, other_group = self._writers[other]
            if other_group == work_group:
                continue
            theirs = groups[writers == other]
            late = theirs[theirs >= other_sync.bulk_published(other_lane)]
            if late.size:
                raise InterpreterError(
                    f"{what}: work-group {work_group} reduce-adds onto elements that work-group {other_group}'s "
                    f"bulk group {int(late[0])} wrote, which its thread had not "
                    "published (completed by cp.async.bulk.wait_group without read, then a semaphore signal): "
                    "on the GPU the two adds could land in either order")
        writer[region] = me
        group[region] = sync.bulk_group(lane)


class BulkReads:
    """Per 4-byte word of each tensor that bulk writes (TMA reduce-adds and stores) reached: the thread and
    bulk group that wrote it last, so that an ordinary load by another work-group can be checked: it must
    come after that group completed (cp.async.bulk.wait_group without .read) and its thread then signalled
    a semaphore (the release the load's work-group acquires before it: dQ converted in the grid). Else the
    load may see the element before the bulk write lands. Kept in kernels whose work-groups wait on each
    other (fmha.semaphore_*), the only ones whose work-groups read what others wrote. Words are found by
    address: a tensor map's tensor and a kernel argument over the same buffer are different views."""

    def __init__(self):
        self._writers = _Writers()
        self._spans: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}   # (low, high) -> writer, group

    def wrote(self, tensor: np.ndarray, region: tuple, sync, lane: int, work_group: int) -> None:
        """`lane` of `work_group` wrote tensor[region] by a bulk op in its group sync.bulk_group(lane)."""
        low, high = _byte_bounds(tensor)
        writer, group = self._spans.setdefault((low, high), (np.full(-(-(high - low) // 4), -1, np.int64),
                                                             np.zeros(-(-(high - low) // 4), np.int64)))
        me = self._writers.number(sync, lane, work_group)
        words = (_addresses(tensor, region) - low) // 4
        writer[words] = me
        group[words] = sync.bulk_group(lane)

    def read(self, storage: np.ndarray, flat: np.ndarray, lanes: np.ndarray, groups: np.ndarray, what: str) -> None:
        """Lanes `lanes` of work-groups `groups` (one each) read storage[flat[lane]] (elements, any trailing
        vector axis); an error if one reads a word another work-group's unpublished bulk group wrote."""
        low, high = _byte_bounds(storage)
        spans = [(span, arrays) for span, arrays in self._spans.items() if span[0] < high and low < span[1]]
        if not spans or not lanes.size:
            return
        addresses = low + np.asarray(flat, np.int64)[lanes].reshape(lanes.size, -1) * storage.itemsize
        readers = np.broadcast_to(groups[:, None], addresses.shape)
        for (start, end), (writer, group) in spans:
            inside = (addresses >= start) & (addresses < end)
            words = (addresses[inside] - start) // 4
            self._check(writer[words], group[words], readers[inside], what)

    def _check(self, writers: np.ndarray, groups: np.ndarray, readers: np.ndarray, what: str) -> None:
        for other in np.unique(writers[writers >= 0]).tolist():
            sync, other_lane, other_group = self._writers[other]
            late = (writers == other) & (readers != other_group) & (groups >= sync.bulk_published(other_lane))
            if late.any():
                first = int(np.flatnonzero(late)[0])
                raise InterpreterError(
                    f"{what}: work-group {int(readers[first])} reads elements that work-group {other_group}'s "
                    f"bulk group {int(groups[first])} wrote, which its thread had not published (completed by "
                    "cp.async.bulk.wait_group without read, then a semaphore signal): on the GPU the read may "
                    "come before the write lands")


def _byte_bounds(array: np.ndarray) -> tuple[int, int]:
    """The first and one past the last byte address `array`'s elements occupy."""
    low = high = array.__array_interface__["data"][0]
    for size, stride in zip(array.shape, array.strides):
        low, high = low + min(0, (size - 1) * stride), high + max(0, (size - 1) * stride)
    return low, high + array.itemsize


def _addresses(tensor: np.ndarray, region: tuple) -> np.ndarray:
    """The byte addresses of tensor[region] (a tuple of slices)."""
    view = tensor[region]
    out = np.full(view.shape, view.__array_interface__["data"][0], np.int64)
    for axis, (size, stride) in enumerate(zip(view.shape, view.strides)):
        shape = [1] * view.ndim
        shape[axis] = size
        out = out + (np.arange(size, dtype=np.int64) * stride).reshape(shape)
    return out.reshape(-1)
