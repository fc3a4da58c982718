"""The bundle manifest (docs/ir.md, "The launch plan"): the plan read from the IR plus everything the
runtime must know without MLIR: spec, kernel config, the body's numerics and alignment needs, target,
files, the compiler's identity and (AMD) per-kernel code-object metadata."""
from __future__ import annotations

from importlib import metadata as importlib_metadata

from .bodies import body_plan
from .kernel_config import KernelConfig
from .launch_plan import PlanError
from .runtime.bundle import FORMAT, spec_to_json
from .spec import AttentionBwdSpec
from .target import Target

IDENTITY_PACKAGES = ("fmha-mlir", "flydsl", "ziglang")


def compiler_identity() -> dict[str, str]:
    """The versions that made a bundle: this project, the MLIR bindings and the linker."""
    out = {}
    for package in IDENTITY_PACKAGES:
        try:
            out[package] = importlib_metadata.version(package)
        except importlib_metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def build_manifest(plan: dict, *, spec: AttentionBwdSpec, config: KernelConfig, target: Target, binary_file: str,
                   binary_format: str, interp_ir_file: str, metadata: dict[str, dict] | None = None) -> dict:
    kernels = {name: dict(entry) for name, entry in plan["kernels"].items()}
    for name, facts in (metadata or {}).items():
        if name not in kernels:
            raise PlanError(f"the code object has kernel {name!r}, which no step launches")
        kernels[name]["metadata"] = facts
    body = body_plan(spec, config)
    buffers = {name: {**buf, "align": body.alignment.get(name, 1)} for name, buf in plan["buffers"].items()}
    return {
        "format": FORMAT,
        "compiler": compiler_identity(),
        "spec": spec_to_json(spec),
        "config": config.to_json(),
        "numerics": body.numerics.to_json(),
        "target": {"arch": target.arch, "backend": target.backend, "wave_size": target.wave_size},
        "binary": {"file": binary_file, "format": binary_format},
        "interp_ir": interp_ir_file,
        "buffers": buffers,
        "steps": plan["steps"],
        "kernels": kernels,
        **({"scalars": plan["scalars"]} if "scalars" in plan else {}),
    }
