"""Tests run on Numba's CUDA simulator: no GPU is needed. PTX tests start their own processes."""
import os
import tempfile

# Must be set before numba.cuda is first imported anywhere in the test process.
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
os.environ.setdefault("TUNER_KERNEL_DIR", tempfile.mkdtemp(prefix="tuner-test-kernels-"))
