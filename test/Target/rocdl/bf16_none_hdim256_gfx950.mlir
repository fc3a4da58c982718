// bf16, no mask, hdim 256 on gfx950: the f32 -> bf16 convert is the hardware v_cvt_pk_bf16_f32.
// RUN: fmha-compile --dtype bf16 --mask none --hdim 256 --target gfx950 --body warp --emit isa | FileCheck %s
// RUN: fmha-compile --dtype bf16 --mask none --hdim 256 --target gfx950 --body warp --emit isa | FileCheck %s --check-prefix=NEVER

// CHECK-LABEL: fmha_bwd_bf16_d256x256_g1_nomask_warp64_dq_dk_dv:
// CHECK: v_exp_f32
// CHECK: global_atomic_add_f32
// CHECK-LABEL: fmha_bwd_bf16_d256x256_g1_nomask_warp64_convert_dk:
// CHECK: v_cvt_pk_bf16_f32

// NEVER-NOT: global_atomic_cmpswap
// NEVER-NOT: ds_bpermute
