"""Settings every test shares: one torch thread per worker when pytest-xdist runs the suite in parallel.

Under `pytest -n N` each worker is its own process; at torch's default thread count N workers would ask for
N times the cores there are and spin against each other. The environment variable reaches the processes a
test starts too (CLI runs, learners under torchrun), which read it when they import torch.
"""

from __future__ import annotations

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
