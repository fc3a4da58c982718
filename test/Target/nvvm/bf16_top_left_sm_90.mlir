// bf16, causal top-left, hdim 128 on sm_90: relaxed device-scope float atomics, ex2.approx, warp shuffles.
// RUN: fmha-compile --dtype bf16 --mask top_left --hdim 128 --target sm_90 --ptxas none --emit isa | FileCheck %s
// RUN: fmha-compile --dtype bf16 --mask top_left --hdim 128 --target sm_90 --ptxas none --emit isa | FileCheck %s --check-prefix=NEVER

// CHECK: .target sm_90
// CHECK-LABEL: .visible .entry fmha_bwd_bf16_d128x128_g1_tl_dot_do_o(
// CHECK-COUNT-5: shfl.sync.bfly.b32 {{.*}}, -1;
// CHECK-LABEL: .visible .entry fmha_bwd_bf16_d128x128_g1_tl_dq_dk_dv(
// CHECK: shfl.sync.bfly.b32
// CHECK: ex2.approx.ftz.f32
// CHECK: atom.relaxed.gpu.global.add.f32
// CHECK-LABEL: .visible .entry fmha_bwd_bf16_d128x128_g1_tl_convert_dk(
// CHECK: cvt.rn.bf16
// CHECK-LABEL: .visible .entry fmha_bwd_bf16_d128x128_g1_tl_convert_dv(

// No system-scope or acq_rel atomics, no compare-and-swap loop, no libdevice calls.
// NEVER-NOT: atom.acq_rel
// NEVER-NOT: .sys
// NEVER-NOT: atom.global.cas
// NEVER-NOT: __nv_
