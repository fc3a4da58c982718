// RUN: not fmha-opt %s --pass-pipeline='builtin.module(fmha-hardware-atomics{target=intel})' 2>&1 | FileCheck %s

// CHECK: pass 'fmha-hardware-atomics': unknown target 'intel'; use amd or nvidia
module {
}
