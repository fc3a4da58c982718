"""Workgroup memory and its race detector: dynamic shared memory and memref.view, NaN for unwritten
memory, per-work-group epochs, read-after-write / write-after-read / write-after-write races, atomics,
and cp.async copies that are pending until their group is waited for."""
import re

import numpy as np
import pytest

from fmha_mlir.dtypes import bf16_bits
from fmha_mlir.runtime.interp import InterpreterError

from interp_support import index_constants, run

SMEM = "memref<?xi8, #gpu.address_space<workgroup>>"
F32X32 = "memref<32xf32, #gpu.address_space<workgroup>>"
IO = "%in: memref<?xf32>, %out: memref<?xf32>"
# Two warps of 32 lanes per work-group; %buf is 32 floats of dynamic shared memory, %i the global index.
PROLOGUE = f"""
    %t = gpu.thread_id x
    %g = gpu.block_id x
{index_constants(0, 32, 63, 64)}
    %gbase = arith.muli %g, %c64 : index
    %i = arith.addi %gbase, %t : index
    %warp0 = arith.cmpi ult, %t, %c32 : index
    %warp1 = arith.cmpi uge, %t, %c32 : index
    %mirror = arith.subi %c63, %t : index
    %smem = gpu.dynamic_shared_memory : {SMEM}
    %buf = memref.view %smem[%c0][] : {SMEM} to {F32X32}"""
WARP0_WRITES = f"""
    scf.if %warp0 {{
      %x = memref.load %in[%i] : memref<?xf32>
      memref.store %x, %buf[%t] : {F32X32}
    }}"""
WARP1_READS = f"""
    scf.if %warp1 {{
      %y = memref.load %buf[%mirror] : {F32X32}
      memref.store %y, %out[%i] : memref<?xf32>
    }}"""


def launch(body, grid=(2, 1, 1), shared_bytes=128, **options):
    data = np.arange(64 * grid[0], dtype=np.float32) + 1
    out = np.zeros_like(data)
    run(PROLOGUE + body, IO, [data, out], grid=grid, block=(64, 1, 1), wave_size=32,
        shared_bytes=shared_bytes, **options)
    return data.reshape(grid[0], 64), out.reshape(grid[0], 64)


def race(message: str) -> str:
    """A regex for an exact race message after the op's location."""
    op, rest = message.split(" ", 1)
    return re.escape(op) + r" \(line \d+ of the interpreter IR\): " + re.escape(rest) + "$"


def test_missing_barrier_between_warps_is_reported():
    """Warp 0 writes, warp 1 reads: lockstep would hand warp 1 the right values, the detector must not."""
    with pytest.raises(InterpreterError, match=race(
            "memref.load data race on dynamic shared memory of work-group (0, 0, 0): lane 32 (thread "
            "(32, 0, 0)) reads element (31,) (byte 124), which lane 31 (thread (31, 0, 0)) wrote since the "
            "work-group's last gpu.barrier (read after write)")):
        launch(WARP0_WRITES + WARP1_READS)


def test_the_same_kernel_with_the_barrier_passes():
    data, out = launch(WARP0_WRITES + "\n    gpu.barrier" + WARP1_READS)
    np.testing.assert_array_equal(out[:, 32:], data[:, 31::-1])  # each work-group its own copy
    assert not out[:, :32].any()


def test_write_after_read_without_barrier():
    """Warp 1 reads what warp 0 wrote (after a barrier), then warp 0 overwrites it in the same epoch."""
    overwrite = f"""
    scf.if %warp0 {{
      %z = arith.constant 0.0 : f32
      memref.store %z, %buf[%t] : {F32X32}
    }}"""
    with pytest.raises(InterpreterError, match=r"memref.store .*: data race on dynamic shared memory of "
                       r"work-group \(0, 0, 0\): lane 0 \(thread \(0, 0, 0\)\) writes element \(0,\) \(byte 0\), "
                       r"which lane 63 \(thread \(63, 0, 0\)\) read since the work-group's last gpu.barrier "
                       r"\(write after read\)$"):
        launch(WARP0_WRITES + "\n    gpu.barrier" + WARP1_READS + overwrite)
    launch(WARP0_WRITES + "\n    gpu.barrier" + WARP1_READS + "\n    gpu.barrier" + overwrite)


def test_write_after_write_across_ops_and_within_one_op():
    warp1_writes = f"""
    scf.if %warp1 {{
      %j = arith.subi %t, %c32 : index
      %x = memref.load %in[%i] : memref<?xf32>
      memref.store %x, %buf[%j] : {F32X32}
    }}"""
    with pytest.raises(InterpreterError, match=r"memref.store .*: data race on .* lane 32 \(thread \(32, 0, 0\)\) "
                       r"writes element \(0,\) \(byte 0\), which lane 0 \(thread \(0, 0, 0\)\) wrote since the "
                       r"work-group's last gpu.barrier \(write after write\)$"):
        launch(WARP0_WRITES + warp1_writes)
    launch(WARP0_WRITES + "\n    gpu.barrier" + warp1_writes)
    both = f"""
    %j = arith.remui %t, %c32 : index
    %x = memref.load %in[%i] : memref<?xf32>
    memref.store %x, %buf[%j] : {F32X32}"""
    with pytest.raises(InterpreterError, match=r"memref.store .*: data race on .* writes element \(\d+,\) "
                       r"\(byte \d+\), which lane \d+ \(thread .*\) writes in the same op \(write after write\)$"):
        launch(both)


def test_own_elements_and_shared_reads_need_no_barrier():
    """A lane may read back its own writes, and any number of lanes may read one element."""
    body = f"""
    %j = arith.remui %t, %c32 : index
    scf.if %warp0 {{
      %x = memref.load %in[%i] : memref<?xf32>
      memref.store %x, %buf[%t] : {F32X32}
      %back = memref.load %buf[%t] : {F32X32}
      memref.store %back, %buf[%t] : {F32X32}
    }}
    gpu.barrier
    %y = memref.load %buf[%j] : {F32X32}
    %z = memref.load %buf[%c0] : {F32X32}
    %s = arith.addf %y, %z : f32
    memref.store %s, %out[%i] : memref<?xf32>"""
    data, out = launch(body)
    np.testing.assert_array_equal(out, np.tile(data[:, :32], 2) + data[:, :1])


def test_epochs_are_per_work_group():
    """Work-group 0 takes a barrier that work-group 1 skips: only work-group 1 races."""
    body = WARP0_WRITES + """
    %is0 = arith.cmpi eq, %g, %c0 : index
    scf.if %is0 {
      gpu.barrier
    }""" + WARP1_READS
    with pytest.raises(InterpreterError, match=r"data race on dynamic shared memory of work-group \(1, 0, 0\): "
                                               r"lane 96 \(thread \(32, 0, 0\)\) reads"):
        launch(body)


def test_atomics_do_not_race_with_atomics_but_with_plain_accesses():
    add = """
    %one{n} = arith.constant 1.0 : f32
    %old{n} = memref.atomic_rmw addf %one{n}, %acc[%c0] : (f32, memref<1xf32, 3>) -> f32"""
    read = """
    %sum = memref.load %acc[%c0] : memref<1xf32, 3>
    memref.store %sum, %out[%i] : memref<?xf32>"""
    zero = """
    scf.if %first {
      %z = arith.constant 0.0 : f32
      memref.store %z, %acc[%c0] : memref<1xf32, 3>
    }
    gpu.barrier"""
    body = "\n    %first = arith.cmpi eq, %t, %c0 : index" + zero + add.format(n=0) + add.format(n=1)
    data = np.zeros(128, np.float32)
    out = np.zeros(128, np.float32)
    args = dict(grid=(2, 1, 1), block=(64, 1, 1), wave_size=32, shared_bytes=128,
                workgroup="%acc: memref<1xf32, 3>")
    run(PROLOGUE + body + "\n    gpu.barrier" + read, IO, [data, out], **args)
    assert (out == 128).all()
    with pytest.raises(InterpreterError, match=r"memref.load .*: data race on workgroup memory %arg2 of "
                                               r"work-group \(0, 0, 0\): lane 0 .* reads element \(0,\) "
                                               r"\(byte 0\), which atomics of several lanes wrote"):
        run(PROLOGUE + body + read, IO, [data, out], **args)
    with pytest.raises(InterpreterError, match=r"memref.atomic_rmw .*: data race on .* lane 1 \(thread "
                                               r"\(1, 0, 0\)\) atomically updates element \(0,\) \(byte 0\), which "
                                               r"lane 0 \(thread \(0, 0, 0\)\) wrote .*\(write after write\)$"):
        unordered = zero.replace("gpu.barrier", "") + add.format(n=0)
        run(PROLOGUE + "\n    %first = arith.cmpi eq, %t, %c0 : index" + unordered, IO, [data, out], **args)


def test_unwritten_workgroup_memory_reads_nan_in_every_float_view():
    body = f"""
    %h = memref.view %smem[%c0][] : {SMEM} to memref<64xf16, #gpu.address_space<workgroup>>
    %b = memref.view %smem[%c0][] : {SMEM} to memref<64xbf16, #gpu.address_space<workgroup>>
    %x = memref.load %buf[%c0] : {F32X32}
    %xh = memref.load %h[%t] : memref<64xf16, #gpu.address_space<workgroup>>
    %xb = memref.load %b[%t] : memref<64xbf16, #gpu.address_space<workgroup>>
    %wh = arith.extf %xh : f16 to f32
    %wb = arith.extf %xb : bf16 to f32
    %s = arith.addf %wh, %wb : f32
    %s2 = arith.addf %s, %x : f32
    %a = memref.load %wg[%t] : memref<64xf32, 3>
    %s3 = arith.addf %s2, %a : f32
    %notnan = arith.cmpf ord, %s3, %s3 : f32
    %f = arith.uitofp %notnan : i1 to f32
    memref.store %f, %out[%i] : memref<?xf32>"""
    out = np.full(128, 7, np.float32)
    run(PROLOGUE + body, IO, [np.zeros(128, np.float32), out], grid=(2, 1, 1), block=(64, 1, 1),
        wave_size=32, shared_bytes=128, workgroup="%wg: memref<64xf32, 3>")
    assert not out.any()


def test_views_alias_the_same_bytes():
    """bf16 pairs written through one view read back as the f32 bit patterns they form."""
    values = np.array([1.5, -2.0, 3.25, 0.125] * 16, np.float32)
    bits = bf16_bits(values).reshape(-1, 2)
    out = np.zeros(32, np.int32)
    body = f"""
    %t = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %c16 = arith.constant 16 : index
    %smem = gpu.dynamic_shared_memory : {SMEM}
    %b = memref.view %smem[%c16][] : {SMEM} to memref<64xbf16, #gpu.address_space<workgroup>>
    %w = memref.view %smem[%c16][] : {SMEM} to memref<32xi32, #gpu.address_space<workgroup>>
    %x = memref.load %in[%t] : memref<64xbf16>
    memref.store %x, %b[%t] : memref<64xbf16, #gpu.address_space<workgroup>>
    gpu.barrier
    %c32 = arith.constant 32 : index
    %low = arith.cmpi ult, %t, %c32 : index
    scf.if %low {{
      %y = memref.load %w[%t] : memref<32xi32, #gpu.address_space<workgroup>>
      memref.store %y, %out[%t] : memref<32xi32>
    }}"""
    run(body, "%in: memref<64xbf16>, %out: memref<32xi32>", [bf16_bits(values), out], block=(64, 1, 1),
        wave_size=32, shared_bytes=144)
    np.testing.assert_array_equal(out, (bits[:, 0].astype(np.uint32) | bits[:, 1].astype(np.uint32) << 16)
                                  .view(np.int32))


def test_view_alignment_and_bounds():
    view = f"""
    %c0 = arith.constant 0 : index
    %shift = arith.constant {{shift}} : index
    %smem = gpu.dynamic_shared_memory : {SMEM}
    %v = memref.view %smem[%shift][] : {SMEM} to memref<16xf32, #gpu.address_space<workgroup>>"""
    with pytest.raises(InterpreterError, match=r"memref.view .*: lane 0 .*: byte offset 2 is not a multiple of 4, "
                                               r"the size of f32"):
        run(view.format(shift=2), "%unused: index", [0], block=(32, 1, 1), wave_size=32, shared_bytes=128)
    with pytest.raises(InterpreterError, match=r"memref.view .*: byte offset 80 and 64 bytes of "
                                               r"memref<16xf32, #gpu.address_space<workgroup>> do not fit in the "
                                               r"128 bytes of dynamic shared memory"):
        run(view.format(shift=80), "%unused: index", [0], block=(32, 1, 1), wave_size=32, shared_bytes=128)
    run(view.format(shift=64), "%unused: index", [0], block=(32, 1, 1), wave_size=32, shared_bytes=128)
    with pytest.raises(InterpreterError, match=r"do not fit in the 0 bytes of dynamic shared memory"):
        run(view.format(shift=0), "%unused: index", [0], block=(32, 1, 1), wave_size=32)


def test_byte_elements_of_workgroup_memory_are_rejected():
    body = f"""
    %c0 = arith.constant 0 : index
    %smem = gpu.dynamic_shared_memory : {SMEM}
    %x = memref.load %smem[%c0] : {SMEM}"""
    with pytest.raises(InterpreterError, match=r"memref.load .*: 1-byte elements in workgroup memory are not "
                                               r"supported \(the race detector tracks 2-byte units\)"):
        run(body, "%unused: index", [0], block=(32, 1, 1), wave_size=32, shared_bytes=16)


def test_work_groups_in_several_chunks():
    data, out = launch(WARP0_WRITES + "\n    gpu.barrier" + WARP1_READS, grid=(5, 1, 1), max_lanes=128)
    np.testing.assert_array_equal(out[:, 32:], data[:, 31::-1])


# --- cp.async ------------------------------------------------------------------------------------

TILE = "memref<256xf32, #gpu.address_space<workgroup>>"
SRC = "memref<?x256xf32>"
# Each of the 64 lanes copies 4 floats of its work-group's row of %src into %tile{n} at 4 * lane; %other is
# an element another lane copied (lane t + 32 mod 64), %own one the lane copied itself.
ASYNC_PROLOGUE = f"""
    %t = gpu.thread_id x
    %g = gpu.block_id x
{index_constants(0, 4, 128, 256)}
    %col = arith.muli %t, %c4 : index
    %shifted = arith.addi %col, %c128 : index
    %other = arith.remui %shifted, %c256 : index
    %own = arith.addi %col, %c0 : index
    %smem = gpu.dynamic_shared_memory : {SMEM}
    %tile0 = memref.view %smem[%c0][] : {SMEM} to {TILE}
    %c1024 = arith.constant 1024 : index
    %tile1 = memref.view %smem[%c1024][] : {SMEM} to {TILE}"""


def copy(n: int) -> str:
    return f"""
    %tok{n} = nvgpu.device_async_copy %src[%g, %col], %tile{n}[%col], 4 : {SRC} to {TILE}
    %grp{n} = nvgpu.device_async_create_group %tok{n}"""


def wait(n: int, groups=None) -> str:
    attr = f" {{numGroups = {groups} : i32}}" if groups is not None else ""
    return f"\n    nvgpu.device_async_wait %grp{n}{attr}"


def read(n: int, which: str = "other") -> str:
    return f"""
    %y{n}{which} = memref.load %tile{n}[%{which}] : {TILE}
    %o{n}{which} = arith.muli %g, %c256 : index
    %oi{n}{which} = arith.addi %o{n}{which}, %{which} : index
    memref.store %y{n}{which}, %out[%oi{n}{which}] : memref<?xf32>"""


def run_async(body):
    src = np.arange(2 * 256, dtype=np.float32).reshape(2, 256) + 1
    out = np.zeros(2 * 256, np.float32)
    run(ASYNC_PROLOGUE + body, f"%src: {SRC}, %out: memref<?xf32>", [src, out], grid=(2, 1, 1),
        block=(64, 1, 1), wave_size=32, shared_bytes=2048)
    return src, out.reshape(2, 256)


def test_waited_copies_read_after_a_barrier():
    src, out = run_async(copy(0) + wait(0) + "\n    gpu.barrier" + read(0))
    np.testing.assert_array_equal(out[:, ::4], src[:, ::4])


def test_a_read_of_an_unwaited_copy_is_reported():
    """The bytes are in place at once (lockstep), but on the GPU they may not have landed yet."""
    message = (r"memref.load .*: read of an async copy that was not waited for: dynamic shared memory of "
               r"work-group \(0, 0, 0\): lane 0 \(thread \(0, 0, 0\)\) reads element \({e},\) \(byte {b}\), "
               r"which nvgpu.device_async_copy of lane {w} \(thread \({w}, 0, 0\)\) writes, and no wait "
               r"of that lane has retired the copy's group yet$")
    with pytest.raises(InterpreterError, match=message.format(e=128, b=512, w=32)):
        run_async(copy(0) + "\n    gpu.barrier" + read(0))
    with pytest.raises(InterpreterError, match=message.format(e=0, b=0, w=0)):  # the issuing lane too
        run_async(copy(0) + read(0, "own"))
    with pytest.raises(InterpreterError, match=r"memref.store .*: write over an async copy that was not "
                                               r"waited for"):
        run_async(copy(0) + """
    %z = arith.constant 0.0 : f32
    memref.store %z, %tile0[%own] : """ + TILE)


def test_a_waited_copy_is_the_issuing_lanes_write():
    """After its wait the lane itself may read its copy; other lanes still need a barrier."""
    run_async(copy(0) + wait(0) + read(0, "own"))
    with pytest.raises(InterpreterError, match=r"memref.load .*: data race on dynamic shared memory .* lane 0 "
                                               r"\(thread \(0, 0, 0\)\) reads element \(128,\) \(byte 512\), "
                                               r"which lane 32 \(thread \(32, 0, 0\)\) wrote since the "
                                               r"work-group's last gpu.barrier \(read after write\)$"):
        run_async(copy(0) + wait(0) + read(0))


def test_barriers_keep_copies_pending_and_the_kernel_may_end_with_them():
    src, out = run_async(copy(0) + "\n    gpu.barrier" + wait(0) + "\n    gpu.barrier" + read(0))
    np.testing.assert_array_equal(out[:, ::4], src[:, ::4])
    run_async(copy(0) + copy(1))


def test_wait_with_num_groups_retires_only_the_older_groups():
    """numGroups = 1: the most recent group may stay pending, the older one is complete."""
    both = copy(0) + copy(1) + wait(1, groups=1) + "\n    gpu.barrier"
    src, out = run_async(both + read(0))
    np.testing.assert_array_equal(out[:, ::4], src[:, ::4])
    with pytest.raises(InterpreterError, match=r"read of an async copy that was not waited for: .* reads element "
                                               r"\(128,\) \(byte 1536\)"):
        run_async(both + read(1))
    run_async(copy(0) + copy(1) + wait(1, groups=0) + "\n    gpu.barrier" + read(0) + read(1))


def test_uncommitted_copies_are_not_waited_for():
    body = f"""
    %tok0 = nvgpu.device_async_copy %src[%g, %col], %tile0[%col], 4 : {SRC} to {TILE}
    nvgpu.device_async_wait %tok0
    gpu.barrier""" + read(0)
    with pytest.raises(InterpreterError, match=r"read of an async copy that was not waited for"):
        run_async(body)


def test_copies_into_one_element_race():
    body = f"""
    %tok0 = nvgpu.device_async_copy %src[%g, %col], %tile0[%c0], 4 : {SRC} to {TILE}"""
    with pytest.raises(InterpreterError, match=r"nvgpu.device_async_copy .*: data race on .* copies "
                                               r"\(nvgpu.device_async_copy\) into element \(\d,\) .*, which lane "
                                               r"\d+ .* writes in the same op \(write after write\)$"):
        run_async(body)


def test_nvvm_spellings_of_commit_and_wait():
    """nvvm.cp.async.commit.group / wait.group {n}, as the tiled body emits them, behave like nvgpu's."""
    copy_nvvm = f"""
    %tok{{n}} = nvgpu.device_async_copy %src[%g, %col], %tile{{n}}[%col], 4 : {SRC} to {TILE}
    "nvvm.cp.async.commit.group"() : () -> ()"""
    both = copy_nvvm.format(n=0) + copy_nvvm.format(n=1) + """
    "nvvm.cp.async.wait.group"() {n = 1 : i32} : () -> ()
    gpu.barrier"""
    src, out = run_async(both + read(0))
    np.testing.assert_array_equal(out[:, ::4], src[:, ::4])
    with pytest.raises(InterpreterError, match=r"read of an async copy that was not waited for"):
        run_async(both + read(1))
