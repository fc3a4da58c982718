// grad_accum = "bf16" on gfx942 and gfx950: the MFMA kernel adds dQ (computed transposed, so a lane's
// registers pair along the head dim) into dq itself with global_atomic_pk_add_bf16: no f32 atomic, no
// compare-and-swap loop, no flat atomic and no convert_dq kernel.
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 64 --target gfx942 --grad-accum bf16 --emit isa | FileCheck %s
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 64 --target gfx942 --grad-accum bf16 --emit isa | FileCheck %s --check-prefix=NEVER
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 128 --mask top_left --target gfx950 --grad-accum bf16 --emit isa | FileCheck %s --check-prefix=GFX950
// RUN: fmha-compile --body tiled --dtype bf16 --hdim 128 --mask top_left --target gfx950 --grad-accum bf16 --emit isa | FileCheck %s --check-prefix=NEVER

// CHECK-LABEL: fmha_bwd_bf16_d64x64_g1_nomask_accbf16_{{.*}}_dq_dk_dv:
// CHECK: v_mfma_f32_16x16x16_bf16
// CHECK: global_atomic_pk_add_bf16

// GFX950-LABEL: fmha_bwd_bf16_d128x128_g1_tl_accbf16_{{.*}}_dq_dk_dv:
// GFX950: v_mfma_f32_16x16x32_bf16
// GFX950: global_atomic_pk_add_bf16

// NEVER-NOT: global_atomic_add_f32
// NEVER-NOT: cmpswap
// NEVER-NOT: flat_atomic
// NEVER-NOT: convert_dq
