// f32, no mask, hdim 256 (8 elements per lane) on sm_90: two kernels, 16 atomics per key step.
// RUN: fmha-compile --body warp --dtype f32 --mask none --hdim 256 --target sm_90 --ptxas none --emit isa | FileCheck %s
// RUN: fmha-compile --body warp --dtype f32 --mask none --hdim 256 --target sm_90 --ptxas none --emit isa | FileCheck %s --check-prefix=NEVER

// CHECK-LABEL: .visible .entry fmha_bwd_f32_d256x256_g1_nomask_warp32_dot_do_o(
// CHECK-LABEL: .visible .entry fmha_bwd_f32_d256x256_g1_nomask_warp32_dq_dk_dv(
// CHECK: ex2.approx.ftz.f32
// CHECK-COUNT-16: atom.relaxed.gpu.global.add.f32
// CHECK-NOT: atom.
// CHECK: ret;

// NEVER-NOT: convert_dk
// NEVER-NOT: atom.global.cas
