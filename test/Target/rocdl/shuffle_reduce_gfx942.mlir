// --reduce shuffle: full-wave sums become the xor butterfly (LDS permutes) instead of DPP.
// RUN: fmha-compile --dtype f16 --mask none --hdim 64 --target gfx942 --reduce shuffle --emit isa | FileCheck %s
// RUN: fmha-compile --dtype f16 --mask none --hdim 64 --target gfx942 --reduce shuffle --emit isa | FileCheck %s --check-prefix=NEVER

// CHECK-LABEL: fmha_bwd_f16_d64x64_g1_nomask_dot_do_o:
// CHECK: ds_bpermute_b32
// CHECK: ds_swizzle_b32
// CHECK: global_store

// NEVER-NOT: _dpp
// NEVER-NOT: v_readlane_b32 {{.*}}, 63
