"""SASS facts of benchmark bundles, read statically (no GPU): per dq_dk_dv kernel, its registers and spill
bytes (ptxas -v), and from its disassembly (nvdisasm) the matrix instructions (HGMMA on wgmma, HMMA on
mma.sync) and the local-memory instructions (STL / LDL: spills) by role and whether a loop runs them, and
the instruction mix of each role's step loop.

    python tools/sass_report.py DIR [--ptxas PATH] [--nvdisasm PATH] [--only TEXT] [--report FILE]

DIR is a `bench_bwd.py build` directory (DIR/<chip>/<bundle>/kernels.ptx). Roles are told apart by the
setmaxnreg instructions a warp-specialised kernel runs (USETMAXREG.TRY_ALLOC: the consumers; .DEALLOC: the
producer warpgroup with its dQ writer); the code after the last EXIT is the out-of-line retry of mbarrier
waits. A role's step loop is its outermost loop (a backward branch); the counts are static: an instruction
on a branch the step may skip counts once. nvdisasm is not part of the project's install: a CUDA toolkit
has it, and `pip download --no-deps nvidia-cuda-nvdisasm` unpacks to one.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench_bwd import ptxas_facts   # run as a script: tools/ is on sys.path

_FUNCTION = re.compile(r"^\s*\.text\.(\w+):")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
MATRIX = ("HGMMA", "HMMA")
LOCAL = ("STL", "LDL")


@dataclass
class Instruction:
    address: int
    opcode: str      # with its modifiers: HGMMA.64x64x16.F32.BF16
    operands: str

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]


@dataclass
class Function:
    name: str
    instructions: list[Instruction] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)    # label -> the address of the next instruction

    def loops(self) -> list[tuple[int, int]]:
        """(first, last) address of each backward branch's range, the out-of-line code's excluded."""
        end = self.main_end()
        out = []
        for ins in self.instructions:
            target = _TARGET.search(ins.operands)
            if ins.base in ("BRA", "BRX", "JMP") and target and ins.address <= end:
                first = self.labels.get(target.group(1))
                if first is not None and first <= ins.address:
                    out.append((first, ins.address))
        return out

    def main_end(self) -> int:
        """The address of the last EXIT: what follows it is reached only by branches (the waits' retries)."""
        exits = [i.address for i in self.instructions if i.base == "EXIT"]
        return max(exits) if exits else self.instructions[-1].address

    def roles(self) -> dict[str, list[Instruction]]:
        """Instructions by role, in address order: `all threads` until a setmaxnreg, then `consumers` after
        TRY_ALLOC and `producer` after DEALLOC; `out-of-line` after the last EXIT."""
        out: dict[str, list[Instruction]] = {}
        role, end = "all threads", self.main_end()
        for ins in self.instructions:
            if ins.base == "USETMAXREG":
                role = "consumers" if "TRY_ALLOC" in ins.opcode else "producer"
            out.setdefault(role if ins.address <= end else "out-of-line", []).append(ins)
        return out


def parse_sass(text: str) -> list[Function]:
    """The functions of `nvdisasm -c` output, each with its instructions and labels."""
    functions: list[Function] = []
    pending: list[str] = []
    for line in text.splitlines():
        if m := _FUNCTION.match(line):
            functions.append(Function(m.group(1)))
            pending = []
        elif not functions:
            continue
        elif m := _LABEL.match(line):
            pending.append(m.group(1))
        elif m := _INSTRUCTION.match(line):
            ins = Instruction(int(m.group(1), 16), m.group(2), m.group(3))
            functions[-1].instructions.append(ins)
            for label in pending:
                functions[-1].labels[label] = ins.address
            pending = []
    return [f for f in functions if f.instructions]


def role_facts(function: Function) -> dict[str, dict]:
    """Per role: its local-memory instructions (all, and those inside a loop), matrix instructions, and
    its step loop's size and mix (the outermost loop that starts in the role)."""
    loops = function.loops()
    out = {}
    for role, instructions in function.roles().items():
        first, last = instructions[0].address, instructions[-1].address
        mine = [(a, b) for a, b in loops if first <= a <= last]
        step = max(mine, key=lambda r: r[1] - r[0], default=None)
        in_loop = lambda i: any(a <= i.address <= b for a, b in loops)  # noqa: E731
        local = [i for i in instructions if i.base in LOCAL]
        facts = {"instructions": len(instructions), "local": len(local),
                 "local_in_loop": sum(1 for i in local if in_loop(i)),
                 "matrix": sum(1 for i in instructions if i.base in MATRIX)}
        if step is not None:
            body = [i for i in instructions if step[0] <= i.address <= step[1]]
            facts["loop"] = {"instructions": len(body), "mix": Counter(i.base for i in body)}
        out[role] = facts
    return out


def disassemble(ptx: str, arch: str, ptxas: str, nvdisasm: str) -> str:
    with tempfile.TemporaryDirectory(prefix="fmha-sass-") as tmp:
        cubin = Path(tmp) / "kernels.cubin"
        subprocess.run([ptxas, f"-arch={arch}", "-", "-o", str(cubin)], input=ptx, text=True, check=True,
                       capture_output=True)
        return subprocess.run([nvdisasm, "-c", "-g", str(cubin)], text=True, check=True,
                              capture_output=True).stdout


LOOP_COLUMNS = ("HGMMA", "HMMA", "LDS", "LDSM", "STS", "STSM", "BAR", "SYNCS", "MUFU", "FFMA", "FMUL", "FADD")


def report(directory: Path, ptxas: str, nvdisasm: str, only: str = "", command: str = "") -> str:
    versions = {tool: subprocess.run([path, "--version"], text=True, capture_output=True).stdout.split("\n")[-2]
                for tool, path in (("ptxas", ptxas), ("nvdisasm", nvdisasm))}
    lines = [f"# SASS of the dq_dk_dv kernels under {directory.name}", "",
             f"Command: `{command}` (ptxas {versions['ptxas']}; nvdisasm {versions['nvdisasm']}).", "",
             "Static counts (tools/sass_report.py): an instruction counts once wherever it sits. local = STL / "
             "LDL (spills), `in loop` those a loop runs.", "",
             "| bundle | chip | registers | spill B | role | instructions | matrix | local (in loop) | "
             "step loop: instructions | " + " | ".join(LOOP_COLUMNS) + " |",
             "| --- " * (9 + len(LOOP_COLUMNS)) + "|"]
    for ptx_path in sorted(directory.glob("*/*/kernels.ptx")):
        bundle, arch = ptx_path.parent.name, ptx_path.parent.parent.name
        if only not in bundle:
            continue
        ptx = ptx_path.read_text()
        facts = ptxas_facts(ptx, ptxas, arch)
        for function in parse_sass(disassemble(ptx, arch, ptxas, nvdisasm)):
            if not function.name.endswith("dq_dk_dv"):
                continue
            kernel = facts.get(function.name, {})
            for role, f in role_facts(function).items():
                loop = f.get("loop")
                mix = [str(loop["mix"].get(c, 0)) if loop else "" for c in LOOP_COLUMNS]
                cells = [bundle, arch, kernel.get("registers", "n/a"), kernel.get("spill_bytes", "n/a"), role,
                         f["instructions"], f["matrix"], f"{f['local']} ({f['local_in_loop']})",
                         loop["instructions"] if loop else "", *mix]
                lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory", type=Path, help="a `bench_bwd.py build` directory")
    p.add_argument("--ptxas", default=shutil.which("ptxas"))
    p.add_argument("--nvdisasm", default=shutil.which("nvdisasm"))
    p.add_argument("--only", default="", help="only bundles whose name contains this text")
    p.add_argument("--report", type=Path, default=None, help="write the markdown here (else print it)")
    args = p.parse_args(argv)
    missing = [name for name in ("ptxas", "nvdisasm") if not getattr(args, name)]
    if missing:
        p.error(f"{' and '.join(missing)} not found: pass --{missing[0]} PATH (a CUDA toolkit's bin/, or for "
                "nvdisasm the unpacked `pip download --no-deps nvidia-cuda-nvdisasm` wheel)")
    if not any(args.directory.glob("*/*/kernels.ptx")):
        p.error(f"no bundles under {args.directory}: make them with `python tools/bench_bwd.py build "
                f"{args.directory} --wgmma --ptxas PATH`")
    command = "python tools/sass_report.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(args.directory, args.ptxas, args.nvdisasm, args.only, command)
    if args.report:
        args.report.write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
