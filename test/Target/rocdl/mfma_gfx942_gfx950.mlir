// amdgpu.mfma, the instruction the AMD tiled body is built on (fmha_mlir/matrix_layouts.py), through
// the compiler's AMD backend: 32x32x8 and 16x16x16 bf16 on gfx942, the double-K 32x32x16 on gfx950, with
// the accumulators kept in registers (no scratch) in a 64-lane wave.
// RUN: fmha-compile %s --from-stage gpu --target gfx942 --emit isa | FileCheck %s --check-prefix=GFX942
// RUN: sed 's/32x32x8 %a \* %a/32x32x16 %a8 * %a8/; s/: vector<4xbf16>, vector<4xbf16>, vector<16xf32>/: vector<8xbf16>, vector<8xbf16>, vector<16xf32>/' %s | fmha-compile - --from-stage gpu --target gfx950 --emit isa | FileCheck %s --check-prefix=GFX950
// RUN: fmha-compile %s --from-stage gpu --target gfx942 --emit metadata | FileCheck %s --check-prefix=META

// GFX942-LABEL: mfma_tile:
// GFX942: v_mfma_f32_32x32x8_bf16
// GFX942: v_mfma_f32_16x16x16_bf16
// GFX942: s_endpgm
// GFX950-LABEL: mfma_tile:
// GFX950: v_mfma_f32_32x32x16_bf16
// GFX950: v_mfma_f32_16x16x16_bf16
// GFX950: s_endpgm

// META: "private_segment_fixed_size": 0,
// META: "wavefront_size": 64

module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @mfma_tile(%in: memref<?xbf16>, %out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %lane = gpu.thread_id x
      %c8 = arith.constant 8 : index
      %at = arith.muli %lane, %c8 : index
      %a = vector.load %in[%at] : memref<?xbf16>, vector<4xbf16>
      %a8 = vector.load %in[%at] : memref<?xbf16>, vector<8xbf16>
      %zero = arith.constant dense<0.0> : vector<16xf32>
      %d = amdgpu.mfma 32x32x8 %a * %a + %zero {blocks = 1 : i32, abid = 0 : i32, cbsz = 0 : i32} blgp = none : vector<4xbf16>, vector<4xbf16>, vector<16xf32>
      %zero4 = arith.constant dense<0.0> : vector<4xf32>
      %e = amdgpu.mfma 16x16x16 %a * %a + %zero4 {blocks = 1 : i32, abid = 0 : i32, cbsz = 0 : i32} blgp = none : vector<4xbf16>, vector<4xbf16>, vector<4xf32>
      %c16 = arith.constant 16 : index
      %c4 = arith.constant 4 : index
      %o = arith.muli %lane, %c16 : index
      vector.store %d, %out[%o] : memref<?xf32>, vector<16xf32>
      %o2 = arith.muli %lane, %c4 : index
      vector.store %e, %out[%o2] : memref<?xf32>, vector<4xf32>
      gpu.return
    }
  }
}
