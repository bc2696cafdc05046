"""Rule cases, one file per rule: tests/rules/gpu_idle.py holds the cases of the rule in
nsight_analytics/rules/checks/gpu_idle.py (rule `gpu-idle`), the way sqlfluff keeps a YAML file
of cases per rule. The build*.py modules draw the rows the cases share.

A case: `id`, the rules it runs (`rules`), the rows it inserts per canonical table (a `reports`
row is added for every report id used), optional threshold overrides (`config`), the findings
expected as (rule_id, severity) pairs in rank order (`expect`) and, per expected finding, what it
must hold (`detail`): `est_savings_ns` (None where the rule claims no saving) and `evidence`
numbers computed in the case from the rows it draws; optionally `says` (words of the message),
`same_saving_as`, and for run rules `run_id`, `report_id` and `ranks`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
# one module per rule, named after the rule's module; build*.py draw rows
CASE_FILES = sorted(p.stem for p in HERE.glob("*.py") if not p.stem.startswith(("_", "build")))


def cases_of(name: str) -> list[dict[str, Any]]:
    """The cases of tests/rules/<name>.py, each marked with the file it came from."""
    module = importlib.import_module(f"rules.{name}")
    return [{**case, "file": name} for case in module.CASES]


CASES: list[dict[str, Any]] = [case for name in CASE_FILES for case in cases_of(name)]
