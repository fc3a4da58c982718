"""The Hopper pieces on the H200: build the wgmma probe (passes/hopper_probe.py: TMA with a 128-byte
swizzle and zero fill through a 2-stage mbarrier pipeline, wgmma SS, then wgmma RS with an MN-major B) and
the ladder of smaller kernels made of the same pieces (passes/hopper_probe_ladder.py: mbarrier, tma, ss,
rs, pipeline, roles: the probe warp-specialised, and dq_reduce: the dQ writer's TMA reduce-add) here as
sm_90a cubins with their ptxas reports; run
them there through the CUDA executor (tensor maps encoded per launch as __grid_constant__ parameters),
each rung in a child process under a watchdog, and report each as pass / wrong / hang / error; or run the
probe and its warp-specialised variant here in the CPU interpreter under the same gate.

    python -m tools.hopper_probe build DIR       # here: needs MLIR and ptxas
    python -m tools.hopper_probe run DIR        # on the H200: NumPy and cuda-bindings
    python -m tools.hopper_probe interp DIR     # here: both probes and dq_reduce in the CPU interpreter (MLIR)
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from .build_run import build_run_parser, write_report_files

PTXAS = "/usr/local/cuda-13.0/bin/ptxas"
SEED = 7
WATCHDOG_S = 20          # a rung's child process (CUDA start, two launches, checks) takes a few seconds
LAUNCHES = 2             # run_rung launches each rung twice (the second reuses the cached tensor maps)


def build(directory: Path) -> None:
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.hopper_probe_geometry import RUNGS, ProbeShape, rung
    from fmha_mlir.passes.hopper_probe_ladder import rung_module_text

    shape, ptxas = ProbeShape(), shutil.which("ptxas") or PTXAS
    compiler = Compiler(ptxas=ptxas)
    directory.mkdir(parents=True, exist_ok=True)
    rungs = {}
    for name in RUNGS:
        compiled = compiler.compile_module(rung_module_text(name, shape), "gpu", "sm_90a")
        (directory / f"{name}.ptx").write_text(compiled.isa)
        # the cubin the run loads is the one this ptxas -v describes
        report = subprocess.run([ptxas, "-v", "-arch=sm_90a", str(directory / f"{name}.ptx"), "-o",
                                 str(directory / f"{name}.cubin")], capture_output=True, text=True, check=True)
        (directory / f"{name}.ptxas.txt").write_text(report.stdout + report.stderr)
        r = rung(name, shape)
        rungs[name] = {"kernel": r.kernel, "binary": f"{name}.cubin", "grid": r.grid, "shared_bytes": r.shared_bytes,
                       "maps": list(r.maps), "threads": r.threads}
        print(f"built {name}: {r.kernel}, {r.shared_bytes} bytes of dynamic shared memory;",
              report.stderr.strip().splitlines()[-2].strip())
    (directory / "probe.json").write_text(json.dumps({
        "shape": vars(shape), "boxes": shape.boxes, "rungs": rungs}, indent=1))


def probe_inputs(shape) -> dict:
    """A [m, k], B [n, k], V [n, n2] as bf16 bit patterns (one seed for every run)."""
    from fmha_mlir.dtypes import to_storage

    rng = np.random.default_rng(SEED)
    return {name: to_storage(rng.standard_normal(s).astype(np.float32), "bf16")
            for name, s in (("a", (shape.m, shape.k)), ("b", (shape.n, shape.k)), ("v", (shape.n, shape.n2)))}


def dq_reduce_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The dq_reduce rung's dq [dq_rows, inner] and partial tiles [groups, rows, inner], f32 multiples of
    1/4 in [-4, 4] (every sum of them is exact in f32, in any order), and the work-groups' shared images:
    each partial as a 128-byte-swizzled box lies in shared memory, as i32 words."""
    from fmha_mlir.hopper_probe_geometry import DqReduceRung
    from fmha_mlir.runtime.interp import hopper

    plan, rng = DqReduceRung(), np.random.default_rng(SEED)
    dq = rng.integers(-16, 17, (plan.dq_rows, plan.inner)).astype(np.float32) / 4
    partials = rng.integers(-16, 17, (plan.groups, plan.rows, plan.inner)).astype(np.float32) / 4
    images = np.zeros((plan.groups, plan.nbytes), np.uint8)
    for image, partial in zip(images, partials):
        hopper.place_box(image, 0, partial, 128)
    return dq, partials, images.view(np.int32).reshape(-1)


def dq_reduce_check(before: np.ndarray, partials: np.ndarray, after: np.ndarray, launches: int) -> dict:
    """Exact: dq + launches x the partials' sum on the rows from `row` inside dq, the others untouched."""
    from fmha_mlir.hopper_probe_geometry import DqReduceRung

    plan = DqReduceRung()
    want = before.copy()
    want[plan.row:] += launches * partials[:, :plan.dq_rows - plan.row].sum(axis=0)
    bad = int(np.count_nonzero(after != want))
    return {"verdict": "wrong" if bad else "pass",
            "detail": f"{bad} of {after.size} dq elements differ from dq + {launches} x the sum of {plan.groups} "
                      f"work-groups' boxes at row {plan.row} (rows past {plan.dq_rows} dropped)"}


def _tile_image(shared: np.ndarray, offset: int, tile, tensor: np.ndarray, row: int, column: int) -> None:
    """What the TMA boxes of `tile` at (row, column) of `tensor` leave in `shared` at `offset` (NumPy)."""
    from fmha_mlir.runtime.interp import hopper

    for box_offset, first, rows in tile.boxes():
        hopper.tma_box(shared, offset + box_offset, tensor, row, column + first, rows, tile.atom_elements, tile.swizzle)


def _expected_tma(shape, inputs, swizzle: bool = True) -> np.ndarray:
    """The tma rung's shared bytes, as its boxes leave them (`swizzle` False: placed row after row, what a
    map without the swizzle would leave; a diagnosis of a wrong result)."""
    from fmha_mlir.hopper_probe_geometry import TmaRung
    from fmha_mlir.runtime.interp import hopper

    plan = TmaRung(shape)
    image = np.zeros(plan.nbytes, np.uint8)
    tiles = {"a": shape.a_tile, "b": shape.b_tile}
    for tensor, offset, column in plan.loads:
        tile = tiles[tensor]
        for box_offset, first, rows in tile.boxes():
            hopper.tma_box(image, offset + box_offset, inputs[tensor], 0, column + first, rows, tile.atom_elements,
                           tile.swizzle if swizzle else 0)
    return image


def _image(shape, inputs, end: int) -> np.ndarray:
    """The ss / rs rungs' shared image: the first k-block's A and B tiles and V's tile, as TMA leaves them."""
    from fmha_mlir.hopper_probe_geometry import image_layout

    layout = image_layout(shape)
    image = np.zeros(layout["end"], np.uint8)
    _tile_image(image, layout["a"], shape.a_tile, inputs["a"], 0, 0)
    _tile_image(image, layout["b"], shape.b_tile, inputs["b"], 0, 0)
    _tile_image(image, layout["v"], shape.v_tile, inputs["v"], 0, 0)
    return image[:end].view(np.uint32).view(np.int32)


def product_checks(shape, inputs, rows: int, k: int) -> dict:
    """judge() checks of C = A B^T over rows x k, and of C2 = bf16(C) V given the kernel's own C: the RS
    product's A is the kernel's C rounded to bf16, and a C a few f32 ulps from the float64 one (another
    summation order) may round to the neighbouring bf16 value, which moves C2 by an ulp of C times V;
    C itself is judged on its own. Each check is a function of the outputs (c2's also takes the C)."""
    from fmha_mlir.dtypes import from_storage, to_storage
    from fmha_mlir.tolerance import judge

    af, bf, vf = (from_storage(x, "bf16").astype(np.float64) for x in (inputs["a"][:rows, :k], inputs["b"][:, :k],
                                                                       inputs["v"]))
    c_ref, c_low = af @ bf.T, (af.astype(np.float32) @ bf.T.astype(np.float32)).astype(np.float64)
    round16 = lambda x: from_storage(to_storage(x.astype(np.float32), "bf16"), "bf16").astype(np.float64)  # noqa: E731

    def c2_check(got, c):
        p = round16(c)
        single = (p.astype(np.float32) @ vf.astype(np.float32)).astype(np.float64)
        return judge("C2 = bf16(C) V (RS)", got, p @ vf, single, "bf16", shape.n, np.abs(p) @ np.abs(vf))

    return {"c": lambda got: judge("C = A B^T (SS)", got, c_ref, c_low, "bf16", k, np.abs(af) @ np.abs(bf).T),
            "c2": c2_check}


def run_rung(directory: Path, name: str) -> dict:
    """Launch one rung (twice: the second launch reuses the cached tensor maps) and judge it: verdict
    'pass' or 'wrong' with what differs. Runs in the child process the watchdog can kill."""
    from fmha_mlir.hopper_probe_geometry import BLOCK_K, ProbeShape, TmaRung, image_layout
    from fmha_mlir.runtime.args import DeviceBuffer, TensorMapArg
    from fmha_mlir.runtime.cuda_executor import CudaExecutor, CudaKernels
    from fmha_mlir.runtime.executor import check_status

    meta = json.loads((directory / "probe.json").read_text())
    shape = ProbeShape(**meta["shape"])
    rung = meta["rungs"][name]
    inputs = probe_inputs(shape)
    if name == "dq_reduce":
        dq, partials, images = dq_reduce_inputs()
        inputs = {"dq": dq.copy()}
    layout = image_layout(shape)
    outputs = {"mbarrier": {"out": np.zeros(rung["threads"], np.int32)},
               "tma": {"out": np.zeros(TmaRung(shape).nbytes // 4, np.int32)},
               "ss": {"c": np.zeros((64, shape.n), np.float32)},
               "rs": {"c": np.zeros((64, shape.n), np.float32), "c2": np.zeros((64, shape.n2), np.float32)},
               "pipeline": {"c": np.zeros((shape.m, shape.n), np.float32),
                            "c2": np.zeros((shape.m, shape.n2), np.float32)},
               "dq_reduce": {}}["pipeline" if name == "roles" else name]
    sources = {"ss": {"image": _image(shape, inputs, layout["v"])},
               "rs": {"image": _image(shape, inputs, layout["end"])},
               "dq_reduce": {"images": images} if name == "dq_reduce" else {}}.get(name, {})
    dtypes = {np.dtype(np.int32): "i32", np.dtype(np.float32): "f32", np.dtype(np.uint16): "bf16"}
    with CudaExecutor() as device:
        with device.current():
            module = check_status(device._cu.cuModuleLoadData((directory / rung["binary"]).read_bytes()),
                                  "cuModuleLoadData")
        kernels = CudaKernels(device, module)
        buffers = {}
        for key, host in {**{m: inputs[m] for m in rung["maps"]}, **sources, **outputs}.items():
            allocation = device.alloc(host.nbytes)
            device.upload(allocation, np.ascontiguousarray(host))
            strides = tuple(s // host.itemsize for s in host.strides)
            buffers[key] = DeviceBuffer(key, dtypes[host.dtype], host.shape, strides, allocation.address, allocation)
        args = [TensorMapArg(f"{m}_map", buffers[m], tuple(meta["boxes"][m]), 128) for m in rung["maps"]]
        args += [buffers[key] for key in (*sources, *outputs)]
        for _ in range(LAUNCHES):
            kernels.launch(rung["kernel"], rung["grid"], (rung["threads"], 1, 1), args, rung["shared_bytes"])
            device.synchronize()
        for key, host in {**outputs, **({"dq": inputs["dq"]} if name == "dq_reduce" else {})}.items():
            device.download(buffers[key].allocation, host)
    if name == "dq_reduce":
        return dq_reduce_check(dq, partials, inputs["dq"], LAUNCHES)
    if name == "mbarrier":
        bad = int(np.count_nonzero(outputs["out"] != np.arange(1, rung["threads"] + 1)))
        return {"verdict": "wrong" if bad else "pass", "detail": f"{bad} of {rung['threads']} threads wrong"}
    if name == "tma":
        got = outputs["out"].view(np.uint8)
        want = _expected_tma(shape, inputs)
        bad = int(np.count_nonzero(got != want))
        detail = f"{bad} of {got.size} shared bytes differ from the swizzled, zero-filled boxes"
        if bad:
            plain = int(np.count_nonzero(got != _expected_tma(shape, inputs, swizzle=False)))
            first = int(np.flatnonzero(got != want)[0])
            detail += f"; first at byte {first}; {plain} differ from the boxes placed without the swizzle"
        return {"verdict": "wrong" if bad else "pass", "detail": detail}
    k = BLOCK_K if name in ("ss", "rs") else shape.k
    checks = product_checks(shape, inputs, outputs["c"].shape[0], k)
    got = {key: value.astype(np.float64) for key, value in outputs.items()}
    results = [checks["c"](got["c"])] + ([checks["c2"](got["c2"], got["c"])] if "c2" in got else [])
    return {"verdict": "pass" if all(c.passed for c in results) else "wrong",
            "detail": "; ".join(str(c) for c in results)}


def run(directory: Path, report: Path) -> bool:
    """Each rung in a child process, killed after WATCHDOG_S: a hang is a verdict, not a stuck run."""
    from fmha_mlir.hopper_probe_geometry import RUNGS

    meta = json.loads((directory / "probe.json").read_text())
    rows = []
    for name in RUNGS:
        command = [sys.executable, "-m", "tools.hopper_probe", "rung", str(directory), "--rung", name]
        try:
            child = subprocess.run(command, capture_output=True, text=True, timeout=WATCHDOG_S)
        except subprocess.TimeoutExpired:
            row = {"verdict": "hang", "detail": f"no result within {WATCHDOG_S} s (child killed)"}
        else:
            lines = child.stdout.strip().splitlines()
            if child.returncode in (0, 1) and lines and lines[-1].startswith("{"):
                row = json.loads(lines[-1])
            else:
                row = {"verdict": "error", "detail": f"rc {child.returncode}: "
                       + "; ".join((child.stderr or child.stdout).strip().splitlines()[-2:])}
        rows.append({"rung": name, **row})
        print(f"{name}: {row['verdict']}: {row['detail']}", flush=True)
    shape = meta["shape"]
    lines = ["# wgmma probe ladder on the H200", "", f"Command: `python -m tools.hopper_probe run {directory}`", "",
             f"M={shape['m']} N={shape['n']} K={shape['k']} (zero fill past K) N2={shape['n2']}; "
             f"boxes {meta['boxes']}; watchdog {WATCHDOG_S} s per rung", "",
             "| rung | verdict | detail |", "| --- | --- | --- |"]
    lines += [f"| {r['rung']} | {r['verdict']} | {r['detail']} |" for r in rows]
    pipeline = directory / meta["rungs"]["pipeline"]["binary"]
    sass = _sass(pipeline)
    lines += ["", "ptxas (pipeline):", "```", (directory / "pipeline.ptxas.txt").read_text().strip(), "```", "", sass]
    write_report_files(report, lines, {"rungs": rows, "sass": sass})
    return all(r["verdict"] == "pass" for r in rows)


def judge_products(shape, inputs, c, c2) -> list:
    """The gate on the full probe's C and C2 (f32 outputs), C2 given the kernel's own C."""
    checks = product_checks(shape, inputs, shape.m, shape.k)
    c, c2 = np.asarray(c, np.float64), np.asarray(c2, np.float64)
    return [checks["c"](c), checks["c2"](c2, c)]


def run_interpreted(text: str, shape, inputs, swizzle: int = 128, roles: bool = False):
    """(C, C2) of the probe's kernel-stage IR `text` (its warp-specialised variant with `roles`) run by
    the CPU interpreter on `inputs` (tensor maps with ProbeShape.boxes and `swizzle`, as `run` encodes
    them with 128)."""
    from fmha_mlir.hopper_probe_geometry import rung
    from fmha_mlir.runtime.interp import Interpreter
    from fmha_mlir.runtime.interp.hopper import TensorMap

    r = rung("roles" if roles else "pipeline", shape)
    c, c2 = np.zeros((shape.m, shape.n), np.float32), np.zeros((shape.m, shape.n2), np.float32)
    maps = [TensorMap(inputs[m], shape.boxes[m], swizzle, "bf16") for m in r.maps]
    Interpreter(text, 32).run_kernel(r.kernel, [*maps, c, c2], r.grid, (r.threads, 1, 1), r.shared_bytes)
    return c, c2


def run_dq_reduce_interpreted(text: str) -> dict:
    """The dq_reduce rung's kernel-stage IR `text` run by the CPU interpreter, launched LAUNCHES times as
    `run` does, and checked as there."""
    from fmha_mlir.hopper_probe_geometry import DqReduceRung, ProbeShape, rung
    from fmha_mlir.runtime.interp import Interpreter
    from fmha_mlir.runtime.interp.hopper import TensorMap

    r = rung("dq_reduce", ProbeShape())
    dq, partials, images = dq_reduce_inputs()
    out = dq.copy()
    interpreter = Interpreter(text, 32)
    for _ in range(LAUNCHES):
        interpreter.run_kernel(r.kernel, [TensorMap(out, DqReduceRung().box, 128, "f32"), images], r.grid,
                               (r.threads, 1, 1), r.shared_bytes)
    return dq_reduce_check(dq, partials, out, LAUNCHES)


def interp(directory: Path) -> bool:
    """The probe and its warp-specialised variant in the interpreter, under the gate (no GPU), and the
    dq_reduce rung, compiled here to their kernel-stage IR."""
    from fmha_mlir.compiler import Compiler
    from fmha_mlir.hopper_probe_geometry import ProbeShape
    from fmha_mlir.passes.hopper_probe import probe_module_text

    shape = ProbeShape()
    directory.mkdir(parents=True, exist_ok=True)
    inputs = probe_inputs(shape)
    passed = True
    for roles in (False, True):
        text = Compiler().compile_module(probe_module_text(shape, roles), "gpu", "sm_90a").interp_ir
        (directory / f"probe{'.roles' if roles else ''}.interp.mlir").write_text(text)
        checks = judge_products(shape, inputs, *run_interpreted(text, shape, inputs, roles=roles))
        print(f"{'warp-specialised' if roles else 'one warpgroup'}:\n" + "\n".join(f"- {c}" for c in checks))
        passed &= all(c.passed for c in checks)
    from fmha_mlir.passes.hopper_probe_ladder import rung_module_text

    text = Compiler().compile_module(rung_module_text("dq_reduce", shape), "gpu", "sm_90a").interp_ir
    (directory / "dq_reduce.interp.mlir").write_text(text)
    result = run_dq_reduce_interpreted(text)
    print(f"dq_reduce: {result['verdict']}: {result['detail']}")
    return passed and result["verdict"] == "pass"


def _sass(cubin: Path) -> str:
    """HGMMA / local-memory counts in the SASS, where cuobjdump or nvdisasm is installed."""
    for tool, args in (("cuobjdump", ["-sass"]), ("nvdisasm", [])):
        path = shutil.which(tool) or next((str(p) for p in Path("/usr/local").glob(f"cuda*/bin/{tool}")), None)
        if path:
            text = subprocess.run([path, *args, str(cubin)], capture_output=True, text=True).stdout
            return (f"SASS ({tool}): {text.count('HGMMA')} HGMMA, {text.count('LDL') + text.count('STL')} local "
                    f"loads/stores, {text.count('UTMALDG')} UTMALDG")
    return "SASS: neither cuobjdump nor nvdisasm found"


def main(argv=None) -> int:
    parser = build_run_parser(__doc__, "reports/hopper_probe.md", ("build", "run", "rung", "interp"),
                              "rung: one rung in this process (what `run` starts under its watchdog)")
    parser.add_argument("--rung", help="the rung `rung` runs")
    args = parser.parse_args(argv)
    if args.action == "build":
        build(args.directory)
        return 0
    if args.action == "rung":
        result = run_rung(args.directory, args.rung)
        print(json.dumps(result))
        return 0 if result["verdict"] == "pass" else 1
    if args.action == "interp":
        return 0 if interp(args.directory) else 1
    return 0 if run(args.directory, args.report) else 1


if __name__ == "__main__":
    sys.exit(main())
