// Deterministic mode on gfx942: the MFMA kernel stores its dQ partial, no global atomic anywhere; the
// default kernel adds dQ with global_atomic_add_f32.
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 64 --target gfx942 --deterministic --emit isa | FileCheck %s
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 64 --target gfx942 --deterministic --emit isa | FileCheck %s --check-prefix=NEVER
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 64 --target gfx942 --emit isa | FileCheck %s --check-prefix=ATOMIC

// CHECK-LABEL: fmha_bwd_bf16_d64x64_g1_nomask_det_{{.*}}_dq_dk_dv:
// CHECK: v_mfma
// CHECK: global_store_dword
// CHECK-LABEL: fmha_bwd_bf16_d64x64_g1_nomask_det_{{.*}}_convert_dq:

// NEVER-NOT: global_atomic

// ATOMIC-LABEL: fmha_bwd_bf16_d64x64_g1_nomask_{{.*}}_dq_dk_dv:
// ATOMIC: global_atomic_add_f32
