"""The GPU executors on real hardware: the ABI probe and attention-backward bundles against the oracle.

Each test needs the GPU executor of its bundle's vendor (cuda for sm_90, hip for gfx942/gfx950) and
skips, printing the executor's reason, where that is not usable.

Bundles come from one of:
  * `--bundles DIR`: prebuilt bundles, one per subdirectory. This is how a GPU machine without MLIR
    runs these tests. Build them where MLIR is installed, then copy DIR over:
        python test/python/test_gpu_executors.py DIR            # writes DIR/<bundle name>/...
        python -m pytest test/python/test_gpu_executors.py --bundles DIR -rs
  * otherwise each bundle is compiled on demand in the test session (needs MLIR).
"""
from __future__ import annotations

import functools
import glob
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # runtime_probe, also when run as a script

import runtime_probe  # noqa: E402
from fmha_mlir.errors import RuntimeLaunchError  # noqa: E402
from fmha_mlir.problem import ProblemSize, make_problem  # noqa: E402
from fmha_mlir.runtime.bundle import Bundle  # noqa: E402
from fmha_mlir.runtime.executor import GPU_EXECUTOR_OF_VENDOR, executor_class  # noqa: E402
from fmha_mlir.runtime.runner import run_bundle  # noqa: E402
from fmha_mlir.spec import AttentionBwdSpec, Mask  # noqa: E402
from fmha_mlir.target import TARGETS  # noqa: E402

ARCHES = ("sm_90", "gfx942", "gfx950")
# Each dtype and mask kind once, MHA and GQA, hdim_v != hdim_q, one head dim that needs several
# elements per lane on both wave sizes.
SPECS = (
    AttentionBwdSpec(dtype="f16", hdim_q=64),
    AttentionBwdSpec(dtype="bf16", hdim_q=128, gqa_ratio=2, mask=Mask("causal_top_left")),
    AttentionBwdSpec(dtype="f32", hdim_q=64, mask=Mask("sliding_window", 16, 0)),
    AttentionBwdSpec(dtype="f16", hdim_q=64, hdim_v=128, gqa_ratio=4, mask=Mask("causal_bottom_right")),
)
PROBE_PREFIX = "probe_"
CUBIN = "cubin_"  # name part of the NVIDIA bundles whose binary is a cubin (ptxas) instead of PTX


def _probe_names() -> list[str]:
    return [PROBE_PREFIX + arch for arch in ARCHES] + [PROBE_PREFIX + CUBIN + "sm_90"]


def _fmha_names() -> dict[str, tuple[AttentionBwdSpec, str, bool]]:
    names = {f"{spec.kernel_prefix}_{arch}": (spec, arch, False) for spec in SPECS for arch in ARCHES}
    names[f"{SPECS[0].kernel_prefix}_{CUBIN}sm_90"] = (SPECS[0], "sm_90", True)
    return names


class MissingTool(Exception):
    """A bundle cannot be built on this machine."""


def _complete_ptxas() -> str | None:
    """A ptxas inside a complete CUDA toolkit (what the compiler needs for cubins), if there is one."""
    from fmha_mlir.backends.nvidia import cuda_toolkit

    candidates = [shutil.which("ptxas"), *sorted(glob.glob("/usr/local/cuda*/bin/ptxas"))]
    return next((c for c in candidates if c and cuda_toolkit(c)), None)


def build_bundle(name: str) -> Bundle:
    """Compile bundle `name` (needs MLIR; the cubin ones a CUDA toolkit)."""
    if name.startswith(PROBE_PREFIX):
        return runtime_probe.build_probe_bundle(_arch_of(name), cubin=CUBIN in name)
    from fmha_mlir.compiler import Compiler

    spec, arch, cubin = _fmha_names()[name]
    ptxas = _complete_ptxas() if cubin else None
    if cubin and ptxas is None:
        raise MissingTool(f"bundle {name} needs ptxas inside a complete CUDA toolkit")
    compiled = Compiler(ptxas=ptxas).compile_spec(spec, arch)
    return Bundle(compiled.manifest, compiled.bundle_files())


def build_all(directory) -> list[Path]:
    paths = []
    for name in _probe_names() + list(_fmha_names()):
        try:
            paths.append(build_bundle(name).save(Path(directory) / name))
        except MissingTool as exc:
            print(f"skipped: {exc}", file=sys.stderr)
    return paths


def pytest_generate_tests(metafunc):
    directory = metafunc.config.getoption("--bundles", default=None)
    names = sorted(p.name for p in Path(directory).iterdir() if p.is_dir()) if directory else (
        _probe_names() + list(_fmha_names()))
    for fixture, is_probe in (("probe_name", True), ("fmha_name", False)):
        if fixture in metafunc.fixturenames:
            metafunc.parametrize(fixture, [n for n in names if n.startswith(PROBE_PREFIX) == is_probe])


@pytest.fixture(scope="session")
def load_bundle(pytestconfig):
    directory = pytestconfig.getoption("--bundles", default=None)

    @functools.cache
    def load(name: str) -> Bundle:
        if directory:
            return Bundle.load(Path(directory) / name)
        try:
            return build_bundle(name)
        except ImportError as exc:
            pytest.skip(f"no --bundles DIR given and no MLIR to build bundle {name}: {exc}")
        except MissingTool as exc:
            pytest.skip(str(exc))

    return load


@pytest.fixture(scope="session")
def gpu_executor():
    """gpu_executor(arch) -> the vendor's executor, one per session; skips with its reason if unusable."""
    made = {}

    def get(arch: str):
        name = GPU_EXECUTOR_OF_VENDOR[TARGETS[arch].vendor]
        if name not in made:
            usable, reason = executor_class(name).available()
            if not usable:
                pytest.skip(f"{name} executor unavailable: {reason}")
            made[name] = executor_class(name)()
        return made[name]

    yield get
    for executor in made.values():
        executor.close()


def _arch_of(name: str) -> str:
    return next(arch for arch in TARGETS if name.endswith("_" + arch))


def test_probe_kernel_reads_every_descriptor_field(probe_name, load_bundle, gpu_executor):
    executor = gpu_executor(_arch_of(probe_name))
    bundle = load_bundle(probe_name)
    x = runtime_probe.probe_input(batch=2, heads=3, seqlen=5)
    np.testing.assert_array_equal(runtime_probe.run_probe(executor, bundle, x), runtime_probe.expected_output(x))


def _size(spec: AttentionBwdSpec) -> ProblemSize:
    # seqlen_q != seqlen_k so the two causal alignments differ; odd sizes catch off-by-one grids.
    return ProblemSize(batch=2, heads_q=2 * spec.gqa_ratio, seqlen_q=33, seqlen_k=47)


def _bshd_outputs(problem) -> dict[str, np.ndarray]:
    storage = problem.tensors["q"].dtype
    return {name: np.zeros((s[0], s[2], s[1], s[3]), storage).transpose(0, 2, 1, 3)
            for name, s in (("dq", problem.tensors["q"].shape), ("dk", problem.tensors["k"].shape),
                            ("dv", problem.tensors["v"].shape))}


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_attention_bwd_matches_oracle(fmha_name, layout, load_bundle, gpu_executor):
    executor = gpu_executor(_arch_of(fmha_name))
    bundle = load_bundle(fmha_name)
    problem = make_problem(bundle.spec, _size(bundle.spec), seed=1, layout=layout)
    tensors = dict(problem.tensors)
    if layout == "bshd":  # outputs in the caller's strided arrays, too
        tensors.update(_bshd_outputs(problem))
    result = run_bundle(bundle, executor, tensors)
    if layout == "bshd":
        assert all(result[name] is tensors[name] for name in ("dq", "dk", "dv"))
    checks = problem.check(result, bundle.numerics)
    assert all(check.passed for check in checks), "\n".join(map(str, checks))


def _torch_on_cuda(array: np.ndarray):
    """A CUDA torch tensor with `array`'s values and strides (bf16 from its uint16 bits)."""
    import torch

    if array.dtype == np.uint16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16).to("cuda")
    return torch.from_numpy(array).to("cuda")  # .to keeps the strides of a non-overlapping dense tensor


def test_torch_cuda_tensors_run_in_place(fmha_name, load_bundle, gpu_executor, tmp_path, monkeypatch):
    """The API on torch CUDA tensors: the kernels read and write GPU memory directly (DeviceArray)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    if not fmha_name.endswith("_sm_90") or CUBIN in fmha_name:
        pytest.skip("one run per spec, on the PTX bundle")
    from fmha_mlir import api

    def no_host_copy(tensor):
        raise AssertionError("a GPU tensor was copied to the host")

    monkeypatch.setattr(api, "_to_numpy", no_host_copy)

    gpu_executor("sm_90")  # skips with the executor's reason when it is unusable
    bundle = load_bundle(fmha_name)
    bundle.save(api.bundle_path(tmp_path, bundle.spec, "sm_90"))
    problem = make_problem(bundle.spec, _size(bundle.spec), seed=2, layout="bshd")
    inputs = [_torch_on_cuda(problem.tensors[n]) for n in ("q", "k", "v", "o", "do", "lse")]
    assert inputs[0].stride() != inputs[0].contiguous().stride()  # the BSHD strides reached the GPU
    bwd = api.AttentionBackward(executor="cuda", arch="sm_90", bundle_dir=str(tmp_path))
    grads = bwd(*inputs, mask=bundle.spec.mask)
    assert all(g.is_cuda for g in grads)
    host = {name: (g.view(torch.int16).cpu().numpy().view(np.uint16) if g.dtype == torch.bfloat16 else g.cpu().numpy())
            for name, g in zip(("dq", "dk", "dv"), grads)}
    checks = problem.check(host, bundle.numerics)
    assert all(check.passed for check in checks), "\n".join(map(str, checks))


@pytest.mark.parametrize("device_arch, bundle_arch", [("sm_90", "gfx942"), ("gfx942", "sm_90")])
def test_gpu_executor_refuses_other_vendor(device_arch, bundle_arch, load_bundle, gpu_executor):
    executor = gpu_executor(device_arch)
    with pytest.raises(RuntimeLaunchError, match=f"runs {TARGETS[device_arch].vendor} binaries only"):
        executor.load(load_bundle(PROBE_PREFIX + bundle_arch))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUTPUT_DIR   (builds the bundles these tests run; needs MLIR)")
    for path in build_all(sys.argv[1]):
        print(path)
