// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(convert-fmha-to-rocdl)' | FileCheck %s --check-prefixes=CHECK,DPP
// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(convert-fmha-to-rocdl{chipset=gfx950 reduce=shuffle})' | FileCheck %s --check-prefixes=CHECK,SHUFFLE

// A full-wave sum: six DPP steps leave the 64-lane sum in lane 63, readlane 63 gives it to every lane.
// Rows outside a row_mask keep `old` (0.0), so the row_bcast steps add 0 there.

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @full_wave
  // CHECK-SAME: rocdl.flat_work_group_size = "64,64"
  gpu.func @full_wave(%x: f32, %out: memref<f32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
    // DPP: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
    // DPP: %[[P1:.*]] = amdgpu.dpp %[[ZERO]] %[[X:.*]] quad_perm([1 : i32, 0 : i32, 3 : i32, 2 : i32]) : f32
    // DPP: %[[S1:.*]] = arith.addf %[[X]], %[[P1]] : f32
    // DPP: %[[P2:.*]] = amdgpu.dpp %[[ZERO]] %[[S1]] quad_perm([2 : i32, 3 : i32, 0 : i32, 1 : i32]) : f32
    // DPP: %[[S2:.*]] = arith.addf %[[S1]], %[[P2]] : f32
    // DPP: %[[P3:.*]] = amdgpu.dpp %[[ZERO]] %[[S2]] row_half_mirror : f32
    // DPP: %[[S3:.*]] = arith.addf %[[S2]], %[[P3]] : f32
    // DPP: %[[P4:.*]] = amdgpu.dpp %[[ZERO]] %[[S3]] row_mirror : f32
    // DPP: %[[S4:.*]] = arith.addf %[[S3]], %[[P4]] : f32
    // DPP: %[[P5:.*]] = amdgpu.dpp %[[ZERO]] %[[S4]] row_bcast_15 {row_mask = 10 : i32} : f32
    // DPP: %[[S5:.*]] = arith.addf %[[S4]], %[[P5]] : f32
    // DPP: %[[P6:.*]] = amdgpu.dpp %[[ZERO]] %[[S5]] row_bcast_31 {row_mask = 12 : i32} : f32
    // DPP: %[[S6:.*]] = arith.addf %[[S5]], %[[P6]] : f32
    // DPP: %[[LANE:.*]] = arith.constant 63 : i32
    // DPP: %[[SUM:.*]] = rocdl.readlane %[[S6]], %[[LANE]] : (f32, i32) -> f32
    // DPP-NOT: gpu.shuffle
    // DPP: memref.store %[[SUM]]
    // SHUFFLE-NOT: amdgpu.dpp
    // SHUFFLE-COUNT-6: gpu.shuffle xor
    // SHUFFLE-NOT: gpu.shuffle
    // CHECK-NOT: fmha.wave_reduce
    %sum = "fmha.wave_reduce"(%x) {kind = "add", width = 64 : i32} : (f32) -> f32
    memref.store %sum, %out[] : memref<f32>
    gpu.return
  }
}

// -----

// A 16-lane group (a row kernel's row): DPP takes the four in-row steps alone, which leave each
// 16-lane row's sum in all of its lanes; no row_bcast, no readlane. With reduce=shuffle it is the xor
// butterfly over the whole wave (width operand 64): offsets below 16 never leave a 16-lane group.

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @sixteen_lanes
  gpu.func @sixteen_lanes(%x: f32, %out: memref<f32>) kernel {
    // DPP: %[[P1:.*]] = amdgpu.dpp %{{.*}} %[[X:.*]] quad_perm([1 : i32, 0 : i32, 3 : i32, 2 : i32]) : f32
    // DPP: %[[S1:.*]] = arith.addf %[[X]], %[[P1]] : f32
    // DPP: amdgpu.dpp %{{.*}} %[[S1]] quad_perm([2 : i32, 3 : i32, 0 : i32, 1 : i32]) : f32
    // DPP: row_half_mirror
    // DPP: %[[P4:.*]] = amdgpu.dpp %{{.*}} row_mirror : f32
    // DPP: %[[D4:.*]] = arith.addf %{{.*}}, %[[P4]] : f32
    // DPP-NOT: amdgpu.dpp
    // DPP-NOT: rocdl.readlane
    // DPP-NOT: gpu.shuffle
    // DPP: memref.store %[[D4]]
    // SHUFFLE-DAG: %[[WAVE:.*]] = arith.constant 64 : i32
    // SHUFFLE-DAG: %[[O1:.*]] = arith.constant 1 : i32
    // SHUFFLE: %[[R1:.*]], %{{.*}} = gpu.shuffle xor %[[X:.*]], %[[O1]], %[[WAVE]] : f32
    // SHUFFLE: %[[S1:.*]] = arith.addf %[[X]], %[[R1]] : f32
    // SHUFFLE: %[[O2:.*]] = arith.constant 2 : i32
    // SHUFFLE: gpu.shuffle xor %[[S1]], %[[O2]], %[[WAVE]] : f32
    // SHUFFLE: arith.constant 4 : i32
    // SHUFFLE: arith.constant 8 : i32
    // SHUFFLE: %[[R4:.*]], %{{.*}} = gpu.shuffle xor
    // SHUFFLE: %[[S4:.*]] = arith.addf %{{.*}}, %[[R4]] : f32
    // SHUFFLE-NOT: gpu.shuffle
    // SHUFFLE-NOT: amdgpu.dpp
    // SHUFFLE: memref.store %[[S4]]
    %sum = "fmha.wave_reduce"(%x) {kind = "add", width = 16 : i32} : (f32) -> f32
    memref.store %sum, %out[] : memref<f32>
    gpu.return
  }
}

// -----

// 32 lanes: no DPP sequence leaves a 32-lane sum in every lane, so both modes use five butterfly steps.

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @thirty_two_lanes
  gpu.func @thirty_two_lanes(%x: f32, %out: memref<f32>) kernel {
    // CHECK-NOT: amdgpu.dpp
    // CHECK-COUNT-5: gpu.shuffle xor
    // CHECK-NOT: gpu.shuffle
    // CHECK: memref.store
    %sum = "fmha.wave_reduce"(%x) {kind = "add", width = 32 : i32} : (f32) -> f32
    memref.store %sum, %out[] : memref<f32>
    gpu.return
  }
}
