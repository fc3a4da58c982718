"""A bound plan's steps with every kernel's arguments packed once, into one buffer; a run writes only
its buffers' addresses into it.

Between two runs of a plan nothing in the kernarg blobs changes but the pointer fields (a memref's
allocated and aligned pointers: the buffer's address, offset 0): sizes, strides and scalars are the
geometry's. So the blobs are packed at bind time (args.pack_args, with stand-in addresses), each
pointer field's word is recorded with the buffer it points to, and a run is one NumPy assignment of
the addresses to those words, then one launch per step on the same parameter pointers (the driver
copies the values at the launch). That is what keeps a run's host time to a few dozen Python calls.

A tensor map (a by-value TMA descriptor) embeds its buffer's address, so it is the other field a run
may change: where a map's buffer moved since the last run, the executor's encoding for the new address
(cached per address and geometry: a host call, no device sync) is copied into the blob.
"""
from __future__ import annotations

import operator
from typing import Mapping, Sequence

import numpy as np

from .args import DeviceBuffer, pack_args, pointer_fields, tensor_map_fields
from .executor import Executor, KernelSet

WORD = 8   # bytes of a pointer field; pack_args aligns every field to its size and pads each blob to 8


class PackedSteps:
    """The steps of one bound plan, ready to run on buffers at any addresses (not thread-safe: the
    caller makes patch-and-launch one step, a BoundPlan under its lock)."""

    def __init__(self, steps: Sequence, layouts: Mapping, names: Sequence[str], device: Executor,
                 kernels: KernelSet):
        """steps: runner.BoundStep's; layouts: every buffer's runner.Layout; names: the order run()'s
        addresses come in (every buffer the steps use)."""
        index = {name: i for i, name in enumerate(names)}
        stand_ins = {name: DeviceBuffer(name, layout.dtype, layout.shape, layout.strides, 0)
                     for name, layout in layouts.items()}
        packed = [pack_args([stand_ins[a] if isinstance(a, str) else a for a in step.args]) if step.kernel else None
                  for step in steps]
        starts = np.cumsum([0] + [0 if p is None else p.size for p in packed]).tolist()
        self._words = np.zeros(starts[-1] // WORD, np.uint64)
        blobs = self._words.view(np.uint8)
        positions, sources, maps = [], [], []
        for start, p in zip(starts, packed):
            if p is None:
                continue
            blobs[start:start + p.size] = np.frombuffer(p.blob, np.uint8)
            for offset, name in pointer_fields(p):
                positions.append((start + offset) // WORD)
                sources.append(index[name])
            maps += [(start + offset, index[arg.buffer.name], arg) for offset, arg in tensor_map_fields(p)]
        self._positions = np.array(positions, np.intp)
        # the addresses in field order, by one C call (one field: a bare int, which NumPy broadcasts)
        self._gather = operator.itemgetter(*sources) if sources else (lambda addresses: ())
        self._device = device
        # per tensor map: (blob offset, address index, TensorMapArg); the address its bytes encode now
        self._maps, self._mapped = maps, [None] * len(maps)
        self._blobs = blobs
        # per step: (launch(stream), None) for a kernel; (fill(address, stream), address index) for a zero fill
        self._steps = [(kernels.packed_launcher(step.kernel, step.grid, step.block, p, blobs[start:start + p.size],
                                                step.shared_bytes), None) if p is not None else
                       (device.zero_filler(layouts[step.args[0]].nbytes), index[step.args[0]])
                       for step, p, start in zip(steps, packed, starts)]

    def run(self, addresses: Sequence[int], stream: int | None) -> None:
        """Every step on the buffers at `addresses` (in `names` order), queued on `stream`; inside the
        executor's current()."""
        self._words[self._positions] = self._gather(addresses)
        for i, (offset, source, arg) in enumerate(self._maps):
            if addresses[source] != self._mapped[i]:
                encoded = self._device.encode_tensor_map(arg, addresses[source])
                self._blobs[offset:offset + len(encoded)] = np.frombuffer(encoded, np.uint8)
                self._mapped[i] = addresses[source]
        for run, zeroed in self._steps:
            if zeroed is None:
                run(stream)
            else:
                run(addresses[zeroed], stream)
