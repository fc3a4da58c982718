// An invalid spec prints every reason and exits 2, without a traceback; a bad stage restart (exit 1)
// and a bad --ptxas give one clear error too.
// RUN: not fmha-compile --dtype f16 --hdim 100 --gqa 0 --target gfx942 --emit isa 2>&1 | FileCheck %s --check-prefix=SPEC
// RUN: not fmha-compile --dtype f16 --hdim 44 --target sm_90 --emit isa 2>&1 | FileCheck %s --check-prefix=WARP
// RUN: not fmha-compile --mask diagonal --emit isa 2>&1 | FileCheck %s --check-prefix=MASK
// RUN: not fmha-compile %s --from-stage gpu --target sm_90 --emit isa 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not fmha-compile --target sm_90 --ptxas %s --emit isa 2>&1 | FileCheck %s --check-prefix=PTXAS

// SPEC: fmha-compile: invalid attention-backward spec:
// SPEC-NEXT: gqa_ratio: must be a positive integer (got 0)
// SPEC-NOT: Traceback

// WARP: hdim_q: 44 is not supported by the warp body on sm_90 (wave size 32)
// WARP-NOT: Traceback

// MASK: mask: unknown mask 'diagonal'
// MASK-NOT: Traceback

// An explicit ptxas that cannot make cubins is a usage error, not a silent fall back to PTX.
// PTXAS: fmha-compile: error: --ptxas {{.*}}bad-spec.mlir: not a ptxas inside a complete CUDA toolkit

// The kernel is written for 64-lane waves: on sm_90 the kernel stage fails with an error located in this
// file and an fmha-opt command on this file that reproduces it.
// STAGE: fmha-compile: [kernel] stage kernel failed for sm_90
// STAGE: bad-spec.mlir:{{[0-9]+}}:{{[0-9]+}}: error: convert-fmha-to-nvvm: wave_reduce width 64 exceeds the wave size 32
// STAGE: reproduce with: fmha-opt {{.*}}bad-spec.mlir --pass-pipeline='builtin.module(convert-fmha-to-nvvm{chip=sm_90})'
// STAGE-NOT: Traceback

module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @wide(%x: f32, %out: memref<f32>) kernel {
      %sum = "fmha.wave_reduce"(%x) {kind = "add", width = 64 : i32} : (f32) -> f32
      memref.store %sum, %out[] : memref<f32>
      gpu.return
    }
  }
}
