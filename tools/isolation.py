"""Run a tool's MLIR work in a child process, so that what MLIR or LLVM does on input we cannot fully
validate (arbitrary IR, a restart from a stage dump) cannot kill the caller.

The bindings' LLVM is built with assertions: on some invalid IR it aborts (SIGABRT), and deep nesting
overflows its stack (SIGSEGV); on others it prints "LLVM ERROR: ..." and carries on. The parent imports
no MLIR: it starts `python -m <tool> --in-process ARGS`, passes its output through, and turns a death
by signal, or an LLVM error the child printed while exiting 0, into one error line with the command
that reproduces it.
"""
from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass

from fmha_mlir.errors import EXIT_ERROR

IN_PROCESS = "--in-process"
_IN_PROCESS_HELP = ("run the MLIR work in this process: faster, but an LLVM assertion then kills it (by default "
                    "a child process does it and a crash becomes an error message)")


def add_in_process_option(parser) -> None:
    parser.add_argument(IN_PROCESS, action="store_true", help=_IN_PROCESS_HELP)


@dataclass(frozen=True)
class ChildResult:
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def crashed(self) -> bool:
        return self.returncode < 0

    @property
    def llvm_error(self) -> str | None:
        """The first 'LLVM ERROR' line the child printed, if any (LLVM may print one and not fail)."""
        for line in self.stderr.decode("utf-8", "replace").splitlines():
            if "LLVM ERROR" in line:
                return line.strip()
        return None

    def why(self) -> str:
        """What killed the child: the signal and the last line it printed (an assertion's text)."""
        try:
            name = signal.Signals(-self.returncode).name
        except ValueError:
            name = f"signal {-self.returncode}"
        lines = [line.strip() for line in self.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if "Assertion" in line or "LLVM ERROR" in line),
                    lines[-1] if lines else "")
        return f"{name}" + (f": {last[-400:]}" if last else "")


def run_child(module: str, argv: list[str], stdin: bytes | None) -> ChildResult:
    """`python -m module --in-process argv` with `stdin` as its input."""
    done = subprocess.run([sys.executable, "-m", module, IN_PROCESS, *argv], input=stdin or b"",
                          capture_output=True)
    return ChildResult(done.returncode, done.stdout, done.stderr)


def ir_text(data: bytes) -> str:
    """Input bytes as IR text: UnicodeDecodeError, or ValueError for a NUL byte (MLIR's parser takes
    neither as an error of its own)."""
    text = data.decode("utf-8")
    if "\x00" in text:
        raise ValueError(f"a NUL byte at offset {text.index(chr(0))}: this is not MLIR text")
    return text


def exit_status(tool: str, result: ChildResult) -> int:
    """Pass a child that did not crash through; an LLVM error it printed while exiting 0 is a failure."""
    passthrough(result)
    if result.returncode == 0 and result.llvm_error:
        print(f"{tool}: error: {result.llvm_error} (the output above is not to be trusted)", file=sys.stderr)
        return EXIT_ERROR
    return result.returncode


def passthrough(result: ChildResult) -> None:
    """The child's output, diagnostics first (the order the tools print them in)."""
    sys.stderr.buffer.write(result.stderr)
    sys.stderr.flush()
    sys.stdout.buffer.write(result.stdout)
    sys.stdout.flush()


def repro(tool: str, argv: list[str]) -> str:
    """The command that runs the same work in-process (where a debugger can see the crash)."""
    return " ".join([tool, IN_PROCESS, *(_quoted(a) for a in argv)])


def _quoted(arg: str) -> str:
    return arg if arg and all(c.isalnum() or c in "-_=./:,+@%" for c in arg) else "'" + arg.replace("'", "'\\''") + "'"
