"""pytest options of the python tests."""


def pytest_addoption(parser):
    parser.addoption(
        "--bundles", default=None, metavar="DIR",
        help="prebuilt bundles for test_gpu_executors.py, one per subdirectory (make them where MLIR is "
             "installed with: python test/python/test_gpu_executors.py DIR)")
    parser.addoption(
        "--torch-bundles", default=None, metavar="DIR",
        help="prebuilt bundles for the CUDA tests of test_torch_op.py (make them where MLIR is installed "
             "with: python test/python/test_torch_op.py DIR)")
