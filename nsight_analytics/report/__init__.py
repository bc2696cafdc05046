"""The data of `nsa report`'s HTML page: everything the page shows, gathered from the library
queries and the canonical tables into plain JSON-able dicts (base units: ns, bytes), for one
report (`gather`) or for the ranks of a run on the run's clock (`gather_run`).

The facade (`api.report_data`) materialises what `READS` names and runs the rules first; this
package only reads. `nsight_analytics.render.html` turns the result into the page and runs no
query itself, so a notebook can inspect or trim the data before rendering it.
"""

from __future__ import annotations

from .gather import READS, gather
from .run import gather_run
from .timeline import DEFAULT_MAX_EVENTS

__all__ = ["DEFAULT_MAX_EVENTS", "READS", "gather", "gather_run"]
