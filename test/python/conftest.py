"""pytest options and shared fixtures of the python tests."""
import importlib.util

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--bundles", default=None, metavar="DIR",
        help="prebuilt bundles for test_gpu_executors.py, one per subdirectory (make them where MLIR is "
             "installed with: python test/python/test_gpu_executors.py DIR)")
    parser.addoption(
        "--torch-bundles", default=None, metavar="DIR",
        help="prebuilt bundles for the CUDA tests of test_torch_op.py and test_torch_varlen.py (make them "
             "where MLIR is installed with: python test/python/test_torch_op.py DIR, and likewise "
             "test_torch_varlen.py)")


@pytest.fixture
def prebuilt_bundles(pytestconfig):
    """The prebuilt bundles' directory (--torch-bundles), or None where MLIR can compile them (a GPU
    machine has no MLIR: there even the CPU tests that compile need the prebuilt ones)."""
    directory = pytestconfig.getoption("--torch-bundles")
    if directory is None and importlib.util.find_spec("flydsl") is None:
        pytest.skip("no --torch-bundles DIR and no MLIR to compile the bundles "
                    "(python test/python/test_torch_op.py DIR)")
    return directory
