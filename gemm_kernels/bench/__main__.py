"""``python -m gemm_kernels.bench``: see :mod:`gemm_kernels.bench`."""

import sys

from . import main

sys.exit(main())
