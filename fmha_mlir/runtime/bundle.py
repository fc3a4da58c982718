"""A compiled kernel set on disk: `manifest.json` (the launch plan of docs/ir.md) plus the files it names.

The compile side builds a Bundle and saves it; the runtime loads it on a machine without MLIR. Every
manifest is validated when a Bundle is made, so a broken bundle fails at load with the key it lacks,
not halfway through a launch.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from .. import shape_expr
from ..errors import Reason, RuntimeLaunchError, SpecError
from ..kernel_config import KernelConfig
from ..numerics import Numerics
from ..spec import AttentionBwdSpec, Mask, f32_value
from ..target import TARGETS, Target
from ..bodies import ACCESSES, ACCUMULATE, READ
from .args import SCALAR_TYPES
from .kernel_signatures import binary_defines, kernel_signatures
from .tensor_maps import SWIZZLES

TENSOR_MAP_SWIZZLES = tuple(SWIZZLES)

FORMAT = "fmha-bundle/3"
MANIFEST_FILE = "manifest.json"
REQUIRED_KEYS = ("format", "compiler", "spec", "config", "numerics", "target", "binary", "interp_ir", "buffers",
                 "steps", "kernels")
BUFFER_ROLES = ("input", "output", "workspace")
BINARY_FORMATS = {"rocdl": ("hsaco",), "nvvm": ("ptx", "cubin")}  # by Target.backend


def spec_to_json(spec: AttentionBwdSpec) -> dict:
    """The manifest's "spec" object: the spec's fields, the mask as a nested object."""
    return dataclasses.asdict(spec)


def spec_from_json(data: dict) -> AttentionBwdSpec:
    """Rebuild the spec from the manifest's "spec" object; RuntimeLaunchError if it is not a valid spec."""
    if not isinstance(data, dict):
        raise RuntimeLaunchError(f"manifest key 'spec' must be an object, got {type(data).__name__}")
    fields = dict(data)
    try:
        mask = fields.pop("mask", {})
        spec = AttentionBwdSpec(**fields, mask=Mask(**mask))
    except (TypeError, ValueError) as exc:
        raise RuntimeLaunchError(f"manifest key 'spec' does not describe a spec: {exc}") from None
    reasons = spec.reasons()
    if reasons:
        raise RuntimeLaunchError("manifest key 'spec' is invalid: " + "; ".join(map(str, reasons)))
    return spec


@dataclass(frozen=True)
class Bundle:
    """The manifest (parsed JSON) and the contents of the files it names, by file name."""

    manifest: dict
    files: dict[str, bytes]

    def __post_init__(self):
        _validate_manifest(self.manifest, self.files)

    # -- files ---------------------------------------------------------------------------------------

    def save(self, directory) -> Path:
        """Write manifest.json and every file into `directory` (created if missing); returns its path."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        stamped = {**self.manifest, DIGEST_KEY: digest(self.manifest, self.files)}
        (path / MANIFEST_FILE).write_text(json.dumps(stamped, indent=1) + "\n")
        for name, data in self.files.items():
            (path / name).write_bytes(data)
        return path

    @classmethod
    def load(cls, directory) -> "Bundle":
        """Read a bundle written by `save`; RuntimeLaunchError naming the file or key that is wrong."""
        path = Path(directory)
        manifest_path = path / MANIFEST_FILE
        if not manifest_path.is_file():
            raise RuntimeLaunchError(f"{manifest_path}: no bundle manifest here (build one with fmha-compile -o DIR)")
        try:
            manifest = json.loads(manifest_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RuntimeLaunchError(f"{manifest_path}: not valid JSON: {exc}") from None
        files = {f.name: f.read_bytes() for f in path.iterdir() if f.is_file() and f.name != MANIFEST_FILE}
        stamp = manifest.pop(DIGEST_KEY, None) if isinstance(manifest, dict) else None
        try:
            bundle = cls(manifest, files)
        except RuntimeLaunchError as exc:
            raise RuntimeLaunchError(f"{manifest_path}: {exc}") from None
        if stamp != bundle.key:
            # A launch plan edited by hand (steps reordered, a zero fill dropped) runs and returns wrong
            # gradients without any other error: refuse what fmha-compile did not write.
            raise RuntimeLaunchError(f"{manifest_path}: " + ("has no 'digest'" if stamp is None else
                                     "does not match its digest: the manifest or a file of the bundle was changed "
                                     "after fmha-compile wrote it") + "; rebuild the bundle with fmha-compile -o DIR")
        return bundle

    def check_made_for(self, spec: AttentionBwdSpec, arch: str, config: KernelConfig, where: str) -> None:
        """Refuse (SpecError) a bundle whose manifest was not made for exactly this spec, arch and config:
        one filed under another's name would launch and return wrong gradients without any other error."""
        reasons = [Reason(name, f"the bundle {where} was compiled for {made}; this call needs {asked}",
                          "rebuild it for this call (fmha-compile -o DIR) or take it out of the bundle folder")
                   for name, made, asked in mismatches((self.spec, self.target.arch, self.config),
                                                       (spec, arch, config))]
        if reasons:
            raise SpecError(reasons)

    # -- accessors -----------------------------------------------------------------------------------

    @cached_property
    def spec(self) -> AttentionBwdSpec:
        return spec_from_json(self.manifest["spec"])

    @cached_property
    def key(self) -> str:
        """The bundle's identity (its digest): executors load each bundle once under it."""
        return digest(self.manifest, self.files)

    @property
    def config(self) -> KernelConfig:
        return KernelConfig.from_json(self.manifest["config"])

    @property
    def numerics(self) -> Numerics:
        """What the kernels round and how they sum: the gate's model of them."""
        return Numerics(**self.manifest["numerics"])

    @property
    def target(self) -> Target:
        return TARGETS[self.manifest["target"]["arch"]]

    @property
    def binary(self) -> bytes:
        return self.files[self.manifest["binary"]["file"]]

    @property
    def binary_format(self) -> str:
        """'hsaco', 'cubin' or 'ptx'."""
        return self.manifest["binary"]["format"]

    @property
    def interp_ir(self) -> str:
        """The generic-form kernel IR the CPU interpreter runs."""
        return self.files[self.manifest["interp_ir"]].decode()

    @property
    def kernels(self) -> dict:
        return self.manifest["kernels"]

    @property
    def steps(self) -> list:
        return self.manifest["steps"]

    @property
    def buffers(self) -> dict:
        return self.manifest["buffers"]


DIGEST_KEY = "digest"


def mismatches(made: tuple, asked: tuple) -> list[tuple[str, str, str]]:
    """(field, the bundle's value, the call's value) for each field in which a bundle made for (spec, arch,
    config) differs from what a call asks for. Floats compare as the f32 values the kernels hold."""
    (made_spec, made_arch, made_config), (spec, arch, config) = made, asked
    pairs = [("arch", made_arch, arch)]
    pairs += [(f"spec.{f.name}", getattr(made_spec, f.name), getattr(spec, f.name)) for f in dataclasses.fields(spec)]
    names = dict.fromkeys(["body"] + [f.name for c in (config, made_config) for f in dataclasses.fields(c)])
    pairs += [(f"config.{name}", getattr(made_config, name, None), getattr(config, name, None)) for name in names]
    return [(name, _shown(a), _shown(b)) for name, a, b in pairs if not _same(a, b)]


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return all(isinstance(x, (int, float)) for x in (a, b)) and f32_value(a) == f32_value(b)
    return a == b


def _shown(value) -> str:
    return f"mask {value}" if isinstance(value, Mask) else repr(value)


def digest(manifest: dict, files: dict[str, bytes]) -> str:
    """sha256 of the manifest (canonical JSON) and of every file, by name: what `save` stamps and `load`
    checks, so that a bundle runs only as fmha-compile wrote it."""
    h = hashlib.sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return "sha256:" + h.hexdigest()


def _validate_manifest(manifest, files) -> None:
    if not isinstance(manifest, dict):
        raise RuntimeLaunchError(f"the manifest must be a JSON object, got {type(manifest).__name__}")
    if manifest.get("format") != FORMAT:
        raise RuntimeLaunchError(f"manifest key 'format' is {manifest.get('format')!r}; this runtime reads "
                                 f"{FORMAT!r} (rebuild the bundle with this version's fmha-compile)")
    missing = [key for key in REQUIRED_KEYS if key not in manifest]
    if missing:
        raise RuntimeLaunchError(f"manifest lacks key(s) {', '.join(map(repr, missing))}")
    for name in files:
        if not name or "/" in name or "\\" in name or name in (".", "..", MANIFEST_FILE):
            raise RuntimeLaunchError(f"bundle file name {name!r} is not a plain file name")
    spec_from_json(manifest["spec"])
    _validate_facts(manifest)
    _validate_target(manifest["target"])
    binary = _require(manifest, "binary", dict)
    _require_file(binary.get("file"), files, "binary.file")
    allowed = BINARY_FORMATS[manifest["target"]["backend"]]
    if binary.get("format") not in allowed:
        raise RuntimeLaunchError(f"manifest key 'binary.format' is {binary.get('format')!r}; "
                                 f"{manifest['target']['arch']} takes {' or '.join(allowed)}")
    _require_file(manifest["interp_ir"], files, "interp_ir")
    buffers = _require(manifest, "buffers", dict)
    scalars = manifest.get("scalars", [])
    if not (isinstance(scalars, list) and all(isinstance(n, str) for n in scalars)):
        raise RuntimeLaunchError(f"manifest key 'scalars' must list scalar names, got {scalars!r}")
    for name, buf in buffers.items():
        _validate_buffer(name, buf, buffers, scalars)
    kernels = _require(manifest, "kernels", dict)
    for name, kernel in kernels.items():
        if not (isinstance(kernel, dict) and isinstance(kernel.get("args"), list)):
            raise RuntimeLaunchError(f"manifest kernel {name!r} needs 'args': its parameter list")
        for index, param in enumerate(kernel["args"]):
            _validate_param(name, index, param)
    for index, step in enumerate(_require(manifest, "steps", list)):
        _validate_step(index, step, buffers, kernels, scalars)
    _validate_kernels_exist(manifest, files)
    _validate_order(manifest["steps"], buffers, kernels)


def _validate_param(kernel: str, index: int, param) -> None:
    """A kernel parameter names its full MLIR type, and a memref how the kernel uses it."""
    where = f"manifest kernel {kernel!r} parameter {index}"
    if not (isinstance(param, dict) and isinstance(param.get("type"), str)):
        raise RuntimeLaunchError(f"{where} needs 'type': its MLIR type as the kernel declares it")
    if ("buffer" in param or "tensor_map" in param) and param.get("access") not in ACCESSES:
        raise RuntimeLaunchError(f"{where} ({param.get('buffer', param.get('tensor_map'))}) has 'access' "
                                 f"{param.get('access')!r}; "
                                 f"one of {', '.join(ACCESSES)}")


def _validate_kernels_exist(manifest: dict, files: dict) -> None:
    """Every kernel of the manifest is in the interpreter IR with the parameter types the manifest gives
    (read from its gpu.func signatures), and the binary defines it: a manifest that does not describe
    its own kernels would launch them with the wrong arguments."""
    try:
        signatures = kernel_signatures(files[manifest["interp_ir"]].decode("utf-8"))
    except UnicodeDecodeError:
        raise RuntimeLaunchError(f"interp_ir {manifest['interp_ir']!r} is not UTF-8 text") from None
    binary, binary_format = files[manifest["binary"]["file"]], manifest["binary"]["format"]
    for name, kernel in manifest["kernels"].items():
        if name not in signatures:
            raise RuntimeLaunchError(f"manifest kernel {name!r} is not in the bundle's interpreter IR, whose kernels "
                                     f"are {sorted(signatures)}; rebuild the bundle with fmha-compile -o DIR")
        declared = list(signatures[name])
        listed = [param["type"] for param in kernel["args"]]
        if listed != declared:
            first = next(i for i, (a, b) in enumerate(zip(listed + [None], declared + [None])) if a != b)
            raise RuntimeLaunchError(
                f"manifest kernel {name!r} lists {len(listed)} parameters, its gpu.func declares {len(declared)}; "
                f"parameter {first} is {_nth(listed, first)} in the manifest, {_nth(declared, first)} in the "
                "kernel: the manifest was written for other kernels; rebuild the bundle with fmha-compile -o DIR")
        if not binary_defines(binary, binary_format, name):
            raise RuntimeLaunchError(f"manifest kernel {name!r} is not defined by the bundle's {binary_format} "
                                     f"binary {manifest['binary']['file']!r}; rebuild the bundle with fmha-compile")


def _nth(types: list, index: int) -> str:
    return types[index] if index < len(types) else "absent"


def _validate_order(steps: list, buffers: dict, kernels: dict) -> None:
    """The steps, in order, as a program over the buffers: a kernel reads only an input or what an
    earlier step wrote or zero-filled, accumulates only into a buffer zero-filled since its last plain
    write, and every output is written. (Outputs and workspaces start as NaN: a plan edited against
    these rules would return wrong gradients, not fail.)"""
    state = {name: "written" if buf["role"] == "input" else "unset" for name, buf in buffers.items()}
    for index, step in enumerate(steps):
        if step["op"] == "zero":
            state[step["buffer"]] = "zeroed"
            continue
        where = f"manifest step {index} ({step['kernel']})"
        for arg, param in zip(step["args"], kernels[step["kernel"]]["args"]):
            name = arg.get("buffer", arg.get("tensor_map"))
            if name is None:
                continue
            if param["access"] == READ and state[name] == "unset":
                raise RuntimeLaunchError(f"{where} reads {name!r}, which no earlier step writes or zero-fills: "
                                         "the steps are out of order (rebuild the bundle with fmha-compile)")
            if param["access"] == ACCUMULATE and state[name] not in ("zeroed", "accumulated"):
                raise RuntimeLaunchError(f"{where} accumulates into {name!r}, which is not zero-filled before it: "
                                         f"the plan needs a {{\"op\": \"zero\", \"buffer\": \"{name}\"}} step "
                                         "earlier (rebuild the bundle with fmha-compile)")
            if param["access"] != READ:
                state[name] = "accumulated" if param["access"] == ACCUMULATE else "written"
    unwritten = [name for name, buf in buffers.items() if buf["role"] == "output" and state[name] == "unset"]
    if unwritten:
        raise RuntimeLaunchError(f"no step writes output(s) {unwritten}: they would come back NaN "
                                 "(rebuild the bundle with fmha-compile)")


def _validate_facts(manifest: dict) -> None:
    """compiler, config and numerics: what made the bundle and how its kernels compute."""
    compiler = manifest["compiler"]
    if not (isinstance(compiler, dict) and all(isinstance(v, str) for v in compiler.values())):
        raise RuntimeLaunchError("manifest key 'compiler' must map package names to version strings")
    try:
        KernelConfig.from_json(manifest["config"])
    except (SpecError, TypeError) as exc:
        raise RuntimeLaunchError(f"manifest key 'config' is invalid: {exc}") from None
    numerics = manifest["numerics"]
    try:
        if not isinstance(numerics, dict):
            raise TypeError(f"must be an object, got {type(numerics).__name__}")
        Numerics(**numerics)
    except (SpecError, TypeError) as exc:
        raise RuntimeLaunchError(f"manifest key 'numerics' is invalid: {exc}") from None


def _validate_buffer(name: str, buf, buffers: dict, scalars: list) -> None:
    if not isinstance(buf, dict) or buf.get("role") not in BUFFER_ROLES or "dtype" not in buf:
        raise RuntimeLaunchError(f"manifest buffer {name!r} needs a 'role' in {BUFFER_ROLES} and a 'dtype'")
    dims, rank, align = buf.get("dims"), buf.get("rank"), buf.get("align")
    if not (isinstance(dims, list) and isinstance(rank, int) and len(dims) == rank):
        raise RuntimeLaunchError(f"manifest buffer {name!r} needs 'rank' and 'dims', one entry per dimension")
    if not (isinstance(align, int) and not isinstance(align, bool) and align > 0):
        raise RuntimeLaunchError(f"manifest buffer {name!r} needs 'align': a positive element count")
    for dim in dims:
        if buf["role"] == "workspace":
            _check_sizes(dim, f"manifest workspace {name!r}", "is sized by", buffers, scalars)
        elif not (isinstance(dim, str) or (isinstance(dim, int) and not isinstance(dim, bool) and dim > 0)):
            raise RuntimeLaunchError(f"manifest buffer {name!r} dimension {dim!r} must be a dimension name or a "
                                     "positive static size")


def _validate_target(target) -> None:
    arch = target.get("arch") if isinstance(target, dict) else None
    if arch not in TARGETS:
        raise RuntimeLaunchError(f"manifest key 'target.arch' is {arch!r}; known: {', '.join(TARGETS)}")
    known = TARGETS[arch]
    for key in ("backend", "wave_size"):
        if target.get(key) != getattr(known, key):
            raise RuntimeLaunchError(f"manifest key 'target.{key}' is {target.get(key)!r}, but {arch} has "
                                     f"{getattr(known, key)!r}")


def _validate_step(index: int, step, buffers: dict, kernels: dict, scalars: list) -> None:
    where = f"manifest step {index}"
    op = step.get("op") if isinstance(step, dict) else None
    if op == "zero":
        if step.get("buffer") not in buffers:
            raise RuntimeLaunchError(f"{where} (zero) names unknown buffer {step.get('buffer')!r}")
        return
    if op != "launch":
        raise RuntimeLaunchError(f"{where} has op {op!r}; known ops: 'zero', 'launch'")
    kernel = step.get("kernel")
    if kernel not in kernels:
        raise RuntimeLaunchError(f"{where} launches {kernel!r}, which is not under 'kernels'")
    args, params = step.get("args"), kernels[kernel]["args"]
    if not isinstance(args, list) or len(args) != len(params):
        raise RuntimeLaunchError(f"{where} ({kernel}) needs 'args': one entry per kernel parameter "
                                 f"({len(params)}), got {args!r}")
    for arg, param in zip(args, params):
        _validate_arg(where, kernel, arg, param, buffers)
    shared = step.get("shared_bytes", 0)
    if not isinstance(shared, int) or isinstance(shared, bool) or shared < 0:
        raise RuntimeLaunchError(f"{where} ({kernel}) has 'shared_bytes' {shared!r}; it must be an integer >= 0")
    for key in ("grid", "block"):
        dims = step.get(key)
        if not isinstance(dims, list) or len(dims) != 3:
            raise RuntimeLaunchError(f"{where} ({kernel}) needs '{key}' with 3 entries, got {dims!r}")
    for dim in step["grid"]:
        _check_sizes(dim, f"{where} ({kernel}) grid", "uses", buffers, scalars)
    if not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in step["block"]):
        raise RuntimeLaunchError(f"{where} ({kernel}) block {step['block']!r} must be 3 positive integers")


def _check_sizes(data, what: str, verb: str, buffers: dict, scalars: list) -> None:
    """`data` is a size expression over the manifest's buffers and scalars ("<what> <verb> unknown
    buffer(s)" / "scalar(s)" if not)."""
    expr = shape_expr.from_json(data, what)
    unknown = shape_expr.buffers_of(expr) - set(buffers)
    if unknown:
        raise RuntimeLaunchError(f"{what} {verb} unknown buffer(s) {sorted(unknown)}")
    unknown = shape_expr.args_of(expr) - set(scalars)
    if unknown:
        raise RuntimeLaunchError(f"{what} {verb} scalar(s) {sorted(unknown)} the manifest's 'scalars' does not list")


def _validate_arg(where: str, kernel: str, arg, param, buffers: dict) -> None:
    """One launch argument against the kernel's parameter: a buffer of the parameter's type, or a scalar."""
    if isinstance(arg, dict) and "buffer" in arg:
        name = arg["buffer"]
        if name not in buffers:
            raise RuntimeLaunchError(f"{where} ({kernel}) passes unknown buffer {name!r}")
        if not (isinstance(param, dict) and param.get("rank") == buffers[name]["rank"]
                and param.get("dtype") == buffers[name]["dtype"]):
            raise RuntimeLaunchError(f"{where} ({kernel}) passes buffer {name!r} (rank-{buffers[name]['rank']} "
                                     f"{buffers[name]['dtype']}) for parameter {param!r}")
        return
    if isinstance(arg, dict) and "tensor_map" in arg:
        _validate_tensor_map(where, kernel, arg, param, buffers)
        return
    if isinstance(arg, dict) and arg.get("scalar") in SCALAR_TYPES and isinstance(param, dict) \
            and param.get("scalar") == arg["scalar"]:
        if not (arg["scalar"] == "f32" and isinstance(arg.get("value"), float)):  # else a size expression
            shape_expr.from_json(arg.get("value"), f"{where} ({kernel}) scalar argument")
        return
    raise RuntimeLaunchError(f"{where} ({kernel}) argument {arg!r} does not fit parameter {param!r}: give "
                             "{\"buffer\": name} for a memref or {\"scalar\": type, \"value\": expression}")


def _validate_tensor_map(where: str, kernel: str, arg: dict, param, buffers: dict) -> None:
    """{"tensor_map": buffer, "box": sizes (outermost first), "swizzle": bytes}, as its parameter lists it."""
    name, box = arg["tensor_map"], arg.get("box")
    if name not in buffers:
        raise RuntimeLaunchError(f"{where} ({kernel}) passes a tensor map over unknown buffer {name!r}")
    if not (isinstance(box, list) and len(box) == buffers[name]["rank"]
            and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in box)
            and arg.get("swizzle") in TENSOR_MAP_SWIZZLES):
        raise RuntimeLaunchError(f"{where} ({kernel}) tensor map {arg!r} needs 'box': one positive size per "
                                 f"dimension of {name!r} (rank {buffers[name]['rank']}) and 'swizzle' in "
                                 f"{TENSOR_MAP_SWIZZLES}")
    expected = {"tensor_map": name, "box": box, "swizzle": arg["swizzle"], "rank": buffers[name]["rank"],
                "dtype": buffers[name]["dtype"]}
    if not (isinstance(param, dict) and all(param.get(key) == value for key, value in expected.items())):
        raise RuntimeLaunchError(f"{where} ({kernel}) passes tensor map {arg!r} for parameter {param!r}")


def _require(manifest: dict, key: str, kind: type):
    value = manifest[key]
    if not isinstance(value, kind):
        raise RuntimeLaunchError(f"manifest key {key!r} must be a JSON {kind.__name__}, got {type(value).__name__}")
    return value


def _require_file(name, files: dict, key: str) -> None:
    if name not in files:
        raise RuntimeLaunchError(f"manifest key {key!r} names file {name!r}, which is not in the bundle")
