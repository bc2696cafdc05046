"""Names the CLI needs while it builds its options, kept in a module that imports nothing, so
`nsa --help` does not load DuckDB: the workspace's environment variable and the metrics the diff
gate can watch."""

from __future__ import annotations

# The workspace file when --db is not given.
ENV_DB = "NSA_DB"

# The manifest that makes a folder a Parquet dataset (`nsa export`, `--data DIR`).
DATASET_MANIFEST = "_nsa_dataset.json"

# Metrics the diff gate can watch; lower is better for each.
GATE_METRICS = (
    "step_time",
    "mean_step_time",
    "gpu_busy",
    "gpu_idle",
    "exposed_copy",
    "kernels_per_step",
    "memory_peak",
    "energy_per_step",
)
