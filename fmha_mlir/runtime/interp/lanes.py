"""Launch geometry: every thread of a chunk of work-groups is one lane of a flat NumPy axis.

Lanes are ordered work-group by work-group (x fastest), and inside a work-group by the linear thread
id (x fastest). Waves are consecutive groups of `wave_size` lanes inside a work-group; the last wave of
a work-group is partial when the block size is not a multiple of the wave size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InterpreterError


@dataclass(frozen=True)
class LaneGrid:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    wave_size: int
    first_group: int          # linear index of this chunk's first work-group
    groups: int               # work-groups in this chunk

    @property
    def group_threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def lanes(self) -> int:
        return self.groups * self.group_threads

    def __post_init__(self):
        lane = np.arange(self.lanes, dtype=np.int64)
        b = self.group_threads
        thread = lane % b
        group = self.first_group + lane // b
        bx, by, _ = self.block
        gx, gy, _ = self.grid
        lane_in_wave = thread % self.wave_size
        wave_start_thread = thread - lane_in_wave
        derived = {
            "lane_index": lane,
            "thread_linear": thread,
            "group_local": lane // b,
            "thread_id": (thread % bx, (thread // bx) % by, thread // (bx * by)),
            "block_id": (group % gx, (group // gx) % gy, group // (gx * gy)),
            "lane_in_wave": lane_in_wave,
            "wave_base": lane - lane_in_wave,
            "wave_len": np.minimum(self.wave_size, b - wave_start_thread),
            "wave_index": lane // b * (-(-b // self.wave_size)) + thread // self.wave_size,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def executing(self, mask) -> np.ndarray:
        """The indices of the lanes that execute under `mask` (None: every lane)."""
        return self.lane_index if mask is None else np.flatnonzero(mask)

    def work_group(self, lane: int) -> int:
        """The linear id of the work-group `lane` belongs to."""
        return self.first_group + int(self.group_local[lane])

    def incomplete_groups(self, mask, width: int) -> np.ndarray:
        """Per lane: it executes (mask None: every lane does) but its aligned group of `width` lanes in
        its wave does not all exist or does not all execute (for ops that read each other's lanes)."""
        present = (self.lane_in_wave // width * width + width) <= self.wave_len
        if mask is None:
            return ~present
        group_id = self.wave_base + self.lane_in_wave // width * width
        whole = np.bincount(group_id[mask], minlength=self.lanes)[group_id] == width
        return mask & ~(present & whole)

    def describe(self, lane: int) -> str:
        """'lane L (block (x, y, z), thread (x, y, z))' for error messages."""
        block = tuple(int(a[lane]) for a in self.block_id)
        thread = tuple(int(a[lane]) for a in self.thread_id)
        return f"lane {self.first_group * self.group_threads + int(lane)} (block {block}, thread {thread})"


def require_whole_groups(st, mask, width: int, what: str, unit: str) -> None:
    """A collective op of `width` lanes (a warp's mma.sync, a wave's MFMA): the interpreter runs waves of
    `width`, and every executing lane's whole group executes it; else an error naming the first lane."""
    g = st.grid
    if g.wave_size != width:
        raise InterpreterError(f"{what}: needs {unit}s of {width} lanes (the interpreter runs waves of "
                               f"{g.wave_size})")
    if mask is None:  # only partial groups can fail: that depends on the geometry, once per chunk
        key = ("partial groups", width)
        if key not in st.cache:
            st.cache[key] = g.incomplete_groups(None, width)
        partial = st.cache[key]
    else:
        partial = g.incomplete_groups(mask, width)
    if partial.any():
        lane = int(np.argmax(partial))
        raise InterpreterError(f"{what}: {g.describe(lane)} is in a {unit} that does not execute it whole: all "
                               f"{width} lanes of a {unit} must execute it together (a divergent or partial {unit})")
