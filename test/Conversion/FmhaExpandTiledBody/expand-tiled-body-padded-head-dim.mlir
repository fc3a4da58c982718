// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-select-kernel-config{target=sm_90 body=tiled},fmha-decompose-bwd,fmha-stages-to-gpu,fmha-expand-tiled-body)' | FileCheck %s --check-prefix=NV
// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-select-kernel-config{target=gfx942 body=tiled},fmha-decompose-bwd,fmha-stages-to-gpu,fmha-expand-tiled-body)' | FileCheck %s --check-prefix=AMD

// Head dims 80 / 48 on tiles of 96 / 48 columns (sm_90's d128 row: dQ's warps take 32 columns each) and
// 128 / 64 (gfx942): a 16-byte chunk of K or Q at a column >= 80 is zero-filled without being read (cp.async
// with source size 0, or a buffer load selected away) from a column clamped to the row's last chunk (72);
// V, whose tile is as wide as its head dim on sm_90, copies as before (no column test). The dK stores and dQ's
// atomics skip the columns >= 80; dV's stores need no test on sm_90.

// NV-LABEL:   gpu.func @{{.*}}_dq_dk_dv(
// NV-SAME:    %[[K:arg1]]: memref<?x?x?x80xbf16
// NV-SAME:    %[[V:arg2]]: memref<?x?x?x48xbf16
// NV-SAME:    %[[DQ:arg6]]: memref<?x?x?x80xf32
// NV-SAME:    %[[DK:arg7]]: memref<?x?x?x80xbf16
// NV-SAME:    %[[DV:arg8]]: memref<?x?x?x48xbf16
// NV:         %[[ROWOK:.*]] = arith.cmpi sle
// NV-NEXT:    %[[C80:.*]] = arith.constant 80 : index
// NV-NEXT:    %[[COLOK:.*]] = arith.cmpi ult, %[[COL:.*]], %[[C80]] : index
// NV-NEXT:    %[[VALID:.*]] = arith.andi %[[ROWOK]], %[[COLOK]] : i1
// NV-NEXT:    %[[C72:.*]] = arith.constant 72 : index
// NV-NEXT:    %[[CLAMPED:.*]] = arith.minui %[[COL]], %[[C72]] : index
// NV:         %[[COUNT:.*]] = arith.select %[[VALID]], %{{.*}}, %{{.*}} : index
// NV-NEXT:    nvgpu.device_async_copy %[[K]][{{.*}}, %[[CLAMPED]]], %{{.*}}, 8, %[[COUNT]] {bypassL1}
// NV-COUNT-5: nvgpu.device_async_copy %[[K]]
// NV-NOT:     arith.minui
// NV:         nvgpu.device_async_copy %[[V]]
// The prologue's and the loop's copies of D, then the loop's dQ atomics; dK's stores follow its scaling.
// NV-COUNT-2: nvgpu.device_async_copy %arg5
// NV:         %[[DQIN:.*]] = arith.cmpi ult, %[[DQCOL:.*]], %c80{{.*}} : index
// NV-NEXT:    scf.if %[[DQIN]] {
// NV-NEXT:      "fmha.atomic_add"(%{{.*}}, %[[DQ]], {{.*}}, %[[DQCOL]])
// NV:         arith.constant 0.111803398 : f32
// NV:         %[[DKIN:.*]] = arith.cmpi ult, %[[DKCOL:.*]], %c80{{.*}} : index
// NV-NEXT:    scf.if %[[DKIN]] {
// NV-NEXT:      vector.store %{{.*}}, %[[DK]][{{.*}}, %[[DKCOL]]]
// NV-NOT:     arith.cmpi ult, %{{.*}}, %c48
// NV:         vector.store %{{.*}}, %[[DV]]

// AMD-LABEL:  gpu.func @{{.*}}_dq_dk_dv(
// AMD-SAME:   %[[K:arg1]]: memref<?x?x?x80xbf16
// AMD:        %[[ROWOK:.*]] = arith.cmpi slt
// AMD-NEXT:   %[[C80:.*]] = arith.constant 80 : index
// AMD-NEXT:   %[[COLOK:.*]] = arith.cmpi ult, %[[COL:.*]], %[[C80]] : index
// AMD-NEXT:   %[[VALID:.*]] = arith.andi %[[ROWOK]], %[[COLOK]] : i1
// AMD-NEXT:   %[[C72:.*]] = arith.constant 72 : index
// AMD-NEXT:   %[[CLAMPED:.*]] = arith.minui %[[COL]], %[[C72]] : index
// AMD:        %[[COL32:.*]] = arith.index_cast %[[CLAMPED]] : index to i32
// AMD-NEXT:   %[[LOADED:.*]] = amdgpu.raw_buffer_load %[[K]][{{.*}}, %[[COL32]]]
// AMD:        arith.select %[[VALID]], %[[LOADED]], %{{.*}} : vector<8xbf16>

module {
  func.func @fmha_bwd_bf16_d80x48_g1_nomask(%arg0: memref<?x?x?x80xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "q"}, %arg1: memref<?x?x?x80xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "k"}, %arg2: memref<?x?x?x48xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "v"}, %arg3: memref<?x?x?x48xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "o"}, %arg4: memref<?x?x?x48xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "do"}, %arg5: memref<?x?x?xf32, strided<[?, ?, 1]>> {fmha.operand = "lse"}, %arg6: memref<?x?x?x80xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dq"}, %arg7: memref<?x?x?x80xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dk"}, %arg8: memref<?x?x?x48xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dv"}) {
    "fmha.attention_bwd"(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8) {bias = "none", dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 80 : i64, hdim_v = 48 : i64, mask = "none", scale = 0.111803398 : f32, window_left = -1 : i64, window_right = -1 : i64} : (memref<?x?x?x80xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x80xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x48xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x48xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x48xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<?x?x?x80xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x80xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x48xbf16, strided<[?, ?, ?, 1]>>) -> ()
    return
  }
}
