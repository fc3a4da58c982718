# lit configuration of fmha-mlir's IR tests. Run with: lit -v test/
#
# The tools are the console scripts of the installed package, next to the python running lit (so the
# venv's lit uses the venv's tools); FileCheck is the pip `filecheck` clone; `not` is lit's builtin.
import os
import shlex
import sys

import lit.formats

config.name = "fmha-mlir"
config.suffixes = [".mlir"]
config.test_format = lit.formats.ShTest(execute_external=False)
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = config.test_source_root
# pytest runs test/python; lit would only find its fixtures there.
config.excludes = ["python"]


def _tool(script: str, module: str) -> str:
    """The console script beside sys.executable, or the module run by this python if it is absent."""
    path = os.path.join(os.path.dirname(sys.executable), script)
    if os.access(path, os.X_OK):
        return shlex.quote(path)
    return f"{shlex.quote(sys.executable)} -m {module}"


# The pip filecheck reads no FILECHECK_OPTS: pass the option on its command line (and export it for
# an LLVM FileCheck someone may put first on PATH).
_filecheck = f"{_tool('filecheck', 'filecheck')} --enable-var-scope"
config.environment["FILECHECK_OPTS"] = "--enable-var-scope"


def _command(name: str) -> str:
    """A lit substitution pattern (a regex) for command `name`, not for the same text inside a path
    such as %s of test/Tools/fmha-opt/x.mlir (lit has already substituted %s)."""
    return rf"(?<![\w./-]){name}(?![\w./-])"


config.substitutions.append(("%python", shlex.quote(sys.executable)))
config.substitutions.append((_command("fmha-compile"), _tool("fmha-compile", "fmha_mlir.tools.fmha_compile")))
config.substitutions.append((_command("fmha-opt"), _tool("fmha-opt", "fmha_mlir.tools.fmha_opt")))
config.substitutions.append((_command("FileCheck"), _filecheck))
