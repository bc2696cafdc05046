"""`nsa diff`: what changed between two reports (or two groups), and whether it is real.

    from nsight_analytics.diff import compare
    d = compare(con, [1], [2])          # A (before) vs B (after)
    d.verdict, d.reason                 # 'improvement', '... shift -5.5 ms (-21.3%), 95% CI ...'
    d.attribution.by_phase              # where the mean step time change came from

`timeline` finds each report's GPU-side step times and splits the steps' GPU time by phase and
kind; `host` splits each step's host time by the step thread's ops (PyTorch profiler traces), with
the GPU idle time under them; `stats` is the Mann-Whitney / Hodges-Lehmann statistic (and how many
steps would resolve a change); `verdict` words the verdict; `compare` runs the checks, the
verdict and the attribution; `runs` compares two runs (`compare_runs`: one world size rank by
rank, two as a scaling); `findings` pairs the rules' findings of the two sides; `baselines`
stores named baselines in the workspace. The facade (`api.diff`) loads the tables `READS` names
(the tables of `RUN_QUERIES` for runs, and what the rules read) before calling `compare`.
"""

from __future__ import annotations

from .baselines import baseline_reports, baselines, save_baseline
from .compare import CONFIDENCE, NOISE_FLOOR, compare
from .gate import GATE_METRICS, Gate, gate
from .model import VERDICTS, Diff
from .runs import QUERIES as RUN_QUERIES
from .runs import compare_runs

# The canonical tables a diff reads (besides what the rules read, for its findings).
READS = frozenset(
    {
        "steps",
        "kernel_rows",
        "kernel_names",
        "memcpy",
        "memset",
        "graph_executions",
        "cuda_api",
        "cpu_ops",
        "nvtx_ranges",
        "gpus",
        "memory_events",
        "reports",
    }
)

__all__ = [
    "CONFIDENCE",
    "GATE_METRICS",
    "NOISE_FLOOR",
    "READS",
    "RUN_QUERIES",
    "VERDICTS",
    "Diff",
    "Gate",
    "baseline_reports",
    "baselines",
    "compare",
    "compare_runs",
    "gate",
    "save_baseline",
]
