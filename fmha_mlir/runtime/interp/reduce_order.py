"""The order of bulk reduce-adds into global memory in a kernel whose work-groups take turns
(fmha.semaphore_*: deterministic dQ, docs/design/accumulation.md).

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


class ReduceOrder:
    """Per element of each tensor that bulk reduce-adds wrote: the thread and bulk group that wrote it last."""

    def __init__(self):
        self._writers: list[tuple] = []                  # (HopperSync, lane, work-group)
        self._writer_ids: dict[tuple[int, int], int] = {}
        self._last: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}   # tensor -> (writer id, group) per element

    def reduce(self, tensor: np.ndarray, region: tuple, sync, lane: int, work_group: int, what: str) -> None:
        """`lane` of `work_group` (its Hopper state `sync`) reduce-adds into tensor[region], in the bulk group
        sync.bulk_group(lane); an error if another work-group's unpublished group wrote any element there."""
        key = (tensor.__array_interface__["data"][0], tensor.shape, tensor.strides)
        writer, group = self._last.setdefault(key, (np.full(tensor.shape, -1, np.int64),
                                                    np.zeros(tensor.shape, np.int64)))
        me = self._writer_ids.setdefault((id(sync), lane), len(self._writers))
        if me == len(self._writers):
            self._writers.append((sync, lane, work_group))
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
