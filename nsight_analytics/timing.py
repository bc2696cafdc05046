"""How long each step took, for `nsa --verbose` (and any program that turns INFO logging on).

Every module logs under the `nsight_analytics` logger; nothing is printed unless the caller
configures logging, so the library stays quiet in notebooks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def timed(log: logging.Logger, what: str) -> Iterator[None]:
    """Log `what` and its wall time at INFO when the block ends (also when it fails)."""
    if not log.isEnabledFor(logging.INFO):
        yield
        return
    start = time.perf_counter()
    try:
        yield
    except BaseException:
        log.info("%s: failed after %.3f s", what, time.perf_counter() - start)
        raise
    log.info("%s: %.3f s", what, time.perf_counter() - start)
