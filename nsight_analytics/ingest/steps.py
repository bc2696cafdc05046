"""Steps: the iterations of a program's main loop, so rules can judge its steady state.

A short capture is often half start-up (module loading, first allocations, cuDNN/cuBLAS
autotuning): judged over the whole span, a healthy loop looks idle. Steps come from, in this
order:
- NVTX ranges of one repeating family (`step 3`, `train_step_3`, `ProfilerStep#3`, `iteration`,
  `batch_3`), the family holding the most time: the program says where its steps are;
- the launches of a CUDA graph replayed in a loop (a decode loop replaying one graph per token):
  on each process, the executable graph its host threads launched most often, at least
  MIN_STEPS times; a step runs from one launch call to the next;
- the repeating kernel pattern on each GPU (a kernel name that occurs once per period, with the
  same number of kernels between its occurrences).
Warm-up steps are flagged `steady = false` (see schema `steps`).
"""

from __future__ import annotations

import itertools
import statistics

import duckdb

from .. import params

# A family is the range name without its trailing number; these end a step-like family name:
# 'step', 'train_step', 'ProfilerStep', 'iteration', 'iter', 'batch' (a plural s allowed).
STEP_WORD = r"(^|[^A-Za-z])([Ss]tep|STEP|[Ii]teration|ITERATION|[Ii]ter|ITER|[Bb]atch|BATCH)s?$"
CAMEL_STEP_WORD = r"[a-z0-9](Step|Iteration|Iter|Batch)s?$"
TRAILING_NUMBER = r"[\s_#:=-]*([0-9]+)\s*$"
# What a step's range name contains somewhere, whatever its case: the cheap filter before the
# family test (nsys.MARK_WORDS uses it for the NVTX scan too).
STEP_HINT = r"(?i)(step|iter|batch)"
# The CUDA graph launch calls (runtime, driver, ROCm; `_ptsz` per-thread stream forms), matched
# on API names without their version suffix (`cudaGraphLaunch_v10000` -> `cudaGraphLaunch`).
GRAPH_LAUNCH = r"^(cuda|cu|hip)GraphLaunch(_ptsz|_spt)?$"
# Steps longer than this many medians before the first one that is not are warm-up.
WARMUP_FACTOR = 1.5
# Kernel-pattern steps: a marker kernel occurs at least this often, with at least this many
# kernels per period, and the kernels between consecutive markers vary by at most this share.
MIN_STEPS = 3
MIN_KERNELS_PER_STEP = 5
MAX_PERIOD_SPREAD = 0.1
# ... and the periods cover at least this share of the device's kernel span: a pattern in one
# corner of the capture is a loop inside a phase, not the program's steps. Graph steps hold at
# least this share of their process's GPU time from their first launch on (start-up before the
# loop and an idle tail after it are not held against them).
MIN_COVERAGE = 0.5

STEP_RANGES = """
CREATE OR REPLACE TEMP TABLE _nsa_step_ranges AS
SELECT global_tid, pid, start_ns, end_ns, name,
       regexp_replace(name, '{number}', '') AS family,
       TRY_CAST(regexp_extract(name, '{number}', 1) AS BIGINT) AS number
FROM ({ranges})
WHERE end_ns > start_ns AND regexp_matches(name, '{hint}')
"""

INSERT_NVTX_STEPS = """
INSERT INTO steps (report_id, step, name, number, source, series, pid, device_id, start_ns, end_ns, duration_ns)
WITH family AS (
    SELECT family FROM _nsa_step_ranges
    WHERE regexp_matches(family, $word) OR regexp_matches(family, $camel)
    GROUP BY family HAVING count(*) >= 2
    ORDER BY sum(end_ns - start_ns) DESC, min(start_ns), family
    LIMIT 1
),
r AS (
    SELECT s.*, max(end_ns) OVER (
        PARTITION BY global_tid ORDER BY start_ns, end_ns DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS outer_end
    FROM _nsa_step_ranges AS s SEMI JOIN family USING (family)
)
SELECT $rid, CAST(row_number() OVER (PARTITION BY global_tid ORDER BY start_ns) - 1 AS INTEGER), name, number,
       'nvtx', global_tid, pid, NULL, start_ns, end_ns, end_ns - start_ns
FROM r
WHERE outer_end IS NULL OR outer_end < end_ns
"""

# Warm-up: with three or more steps, every step before the first one no longer than
# WARMUP_FACTOR x the median; with two, step 0 when it is that much longer than step 1.
MARK_STEADY = f"""
UPDATE steps SET steady = steps.step >= f.first_steady
FROM (
    SELECT series, CASE
        WHEN count(*) >= 3 THEN min(step) FILTER (WHERE duration_ns <= {WARMUP_FACTOR} * med)
        WHEN count(*) = 2 THEN CASE WHEN max(duration_ns) FILTER (WHERE step = 0)
                                   > {WARMUP_FACTOR} * max(duration_ns) FILTER (WHERE step = 1) THEN 1 ELSE 0 END
        ELSE 0
    END AS first_steady
    FROM (SELECT *, median(duration_ns) OVER (PARTITION BY series) AS med FROM steps WHERE report_id = $rid)
    GROUP BY series
) AS f
WHERE steps.report_id = $rid AND steps.series = f.series
"""


def fill_steps(
    con: duckdb.DuckDBPyConnection,
    report_id: int,
    nvtx_ranges_sql: str | None,
    graph_launches_sql: str | None = None,
) -> int:
    """Find and store a report's steps; returns how many. `nvtx_ranges_sql` selects the
    report's closed NVTX ranges as (global_tid, pid, start_ns, end_ns, name), or is None;
    `graph_launches_sql` the report's CUDA graph launch calls as (global_tid, pid, start_ns,
    end_ns, correlation_id, name) when they must come from the source (the workspace's `cuda_api`
    may not be loaded yet); None reads them from `cuda_api`."""
    rid = int(report_id)
    n = 0
    if nvtx_ranges_sql:
        con.execute(STEP_RANGES.format(number=TRAILING_NUMBER, hint=STEP_HINT, ranges=nvtx_ranges_sql))
        with params.dropped_after(con, "_nsa_step_ranges"):
            row = params.execute(
                con, INSERT_NVTX_STEPS, {"rid": rid, "word": STEP_WORD, "camel": CAMEL_STEP_WORD}
            ).fetchone()
            n = int(row[0]) if row else 0
    if n == 0:
        n = _graph_steps(con, rid, graph_launches_sql)
    if n == 0:
        n = _kernel_pattern_steps(con, rid)
    if n:
        params.execute(con, MARK_STEADY, {"rid": rid})
    return n


WORKSPACE_GRAPH_LAUNCHES = f"""
SELECT global_tid, pid, start_ns, end_ns, correlation_id, regexp_replace(name, '_v[0-9]+$', '') AS name
FROM cuda_api
WHERE report_id = $rid AND contains(name, 'GraphLaunch')
  AND regexp_matches(regexp_replace(name, '_v[0-9]+$', ''), '{GRAPH_LAUNCH}')
"""

# Does the report run CUDA graphs at all (graph replays traced as one row, or kernels carrying
# a graph node id)? Without, the launch calls are not read from the source.
HAS_GRAPH_WORK = """
SELECT EXISTS (SELECT 1 FROM graph_executions WHERE report_id = $rid)
    OR EXISTS (SELECT 1 FROM kernel_rows WHERE report_id = $rid AND graph_node_id IS NOT NULL)
"""

# Graph steps. Each launch call is tied to the executable graph it ran by its GPU work (same pid
# and correlation id): the graph replay row's graph_exec_id (the default graph-level trace), else
# the smallest graph node id of its kernels (`--cuda-graph-trace=node`: an executable graph's
# nodes are its own), else, where the trace names no graph (Kineto), the number and first name of
# the kernels it ran. A step is named by its launch call and that graph: `cudaGraphLaunch (graph
# exec 2)`, `cudaGraphLaunch (graph of 12 kernels)`. A (thread, graph) launched at least MIN_STEPS times is a loop: launch i to
# launch i + 1; the last step lasts the median period, at most to the end of the process's GPU
# work (never less than its own call). On each process, the loop launched most often among those
# holding MIN_COVERAGE of the GPU time from their first launch on gives the steps.
INSERT_GRAPH_STEPS = f"""
INSERT INTO steps (report_id, step, name, number, source, series, pid, device_id, start_ns, end_ns, duration_ns)
WITH l AS (SELECT * FROM ({{launches}}) WHERE start_ns IS NOT NULL AND end_ns >= start_ns),
ex AS (
    SELECT g.pid, g.correlation_id, min(g.graph_exec_id) AS exec_id
    FROM graph_executions AS g SEMI JOIN l USING (pid, correlation_id)
    WHERE g.report_id = $rid GROUP BY ALL
),
kn AS (
    SELECT k.pid, k.correlation_id, min(k.graph_node_id) AS node_id, count(*) AS n, min(k.name_id) AS name_id
    FROM kernel_rows AS k SEMI JOIN l USING (pid, correlation_id)
    WHERE k.report_id = $rid GROUP BY ALL
),
keyed AS (
    SELECT l.global_tid, l.pid, l.start_ns, l.end_ns,
           CASE WHEN ex.exec_id IS NOT NULL THEN 'exec ' || ex.exec_id
                WHEN kn.node_id IS NOT NULL THEN 'node ' || kn.node_id
                WHEN kn.n IS NOT NULL THEN kn.n || ' kernels from ' || kn.name_id
                ELSE '' END AS graph,
           l.name || CASE WHEN ex.exec_id IS NOT NULL THEN ' (graph exec ' || ex.exec_id || ')'
                          WHEN kn.n IS NOT NULL THEN ' (graph of ' || kn.n || ' kernels)'
                          ELSE '' END AS label
    FROM l LEFT JOIN ex USING (pid, correlation_id) LEFT JOIN kn USING (pid, correlation_id)
),
cand AS (SELECT pid, global_tid, graph, count(*) AS n FROM keyed GROUP BY ALL HAVING count(*) >= {MIN_STEPS}),
s AS (
    SELECT k.*, c.n, row_number() OVER w - 1 AS step, lead(k.start_ns) OVER w AS next_ns
    FROM keyed AS k JOIN cand AS c
      ON c.pid IS NOT DISTINCT FROM k.pid AND c.global_tid IS NOT DISTINCT FROM k.global_tid AND c.graph = k.graph
    WINDOW w AS (PARTITION BY k.global_tid, k.graph ORDER BY k.start_ns, k.end_ns)
),
act AS (
    SELECT pid, start_ns, end_ns FROM kernel_rows WHERE report_id = $rid
    UNION ALL SELECT pid, start_ns, end_ns FROM graph_executions WHERE report_id = $rid
    UNION ALL SELECT pid, start_ns, end_ns FROM memcpy WHERE report_id = $rid
    UNION ALL SELECT pid, start_ns, end_ns FROM memset WHERE report_id = $rid
),
gpu_end AS (SELECT pid, max(end_ns) AS gpu_end FROM act GROUP BY pid),
timed AS (
    SELECT s.*, coalesce(s.next_ns, greatest(s.end_ns, least(
               s.start_ns + CAST(median(s.next_ns - s.start_ns) OVER (PARTITION BY s.global_tid, s.graph) AS BIGINT),
               coalesce(e.gpu_end, s.end_ns)))) AS stop_ns
    FROM s LEFT JOIN gpu_end AS e ON e.pid IS NOT DISTINCT FROM s.pid
),
bounds AS (
    SELECT pid, global_tid, graph, any_value(n) AS n, min(start_ns) AS lo, max(stop_ns) AS hi
    FROM timed GROUP BY pid, global_tid, graph
),
-- a loop holds at least MIN_COVERAGE of the GPU time its process had from its first launch on
-- (an idle tail does not count against it, eager work after the loop does); of those, each
-- process's most replayed, then the earliest
best AS (
    SELECT pid, global_tid, graph FROM (
        SELECT b.pid, b.global_tid, b.graph,
               row_number() OVER (PARTITION BY b.pid ORDER BY b.n DESC, b.lo, b.global_tid, b.graph) AS r
        FROM bounds AS b JOIN act AS a ON a.pid IS NOT DISTINCT FROM b.pid AND a.start_ns >= b.lo
        GROUP BY b.pid, b.global_tid, b.graph, b.n, b.lo, b.hi
        HAVING sum(a.end_ns - a.start_ns) FILTER (WHERE a.start_ns < b.hi) >= {MIN_COVERAGE} * sum(a.end_ns - a.start_ns)
    ) WHERE r = 1
)
SELECT $rid, CAST(step AS INTEGER), t.label, NULL, 'graphs', t.global_tid, t.pid, NULL,
       t.start_ns, t.stop_ns, t.stop_ns - t.start_ns
FROM timed AS t SEMI JOIN best AS b
  ON b.pid IS NOT DISTINCT FROM t.pid AND b.global_tid IS NOT DISTINCT FROM t.global_tid AND b.graph = t.graph
"""


def _graph_steps(con: duckdb.DuckDBPyConnection, rid: int, launches_sql: str | None) -> int:
    """Steps from the launches of a CUDA graph replayed in a loop (INSERT_GRAPH_STEPS). The launch
    calls come from `launches_sql` (the source), read only when the report runs graphs, or from
    the workspace's `cuda_api`."""
    if launches_sql is None:
        launches_sql = WORKSPACE_GRAPH_LAUNCHES
    elif not params.first_row(params.execute(con, HAS_GRAPH_WORK, {"rid": rid}))[0]:
        return 0
    row = params.execute(con, INSERT_GRAPH_STEPS.format(launches=launches_sql), {"rid": rid}).fetchone()
    return int(row[0]) if row else 0


# Per GPU (device_id, NULL as -1), the marker kernel of the repeating pattern, if any: candidates
# occur at least MIN_STEPS times and at most once per MIN_KERNELS_PER_STEP kernels; their periods
# (kernels from one occurrence to the next, the first period left out when there are more than
# two: it may hold warm-up) must stay within MAX_PERIOD_SPREAD of their median. Of those, the
# fewest occurrences (the outermost loop), then the longest median idle time before them (a step
# starts when the host hands over the next batch), then the smallest name id.
MARKERS = f"""
WITH k AS (
    SELECT coalesce(device_id, -1) AS dev, name_id, start_ns, end_ns,
           row_number() OVER w AS pos,
           start_ns - max(end_ns) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS idle_before
    FROM kernel_rows WHERE report_id = $rid AND start_ns IS NOT NULL
    WINDOW w AS (PARTITION BY coalesce(device_id, -1) ORDER BY start_ns, end_ns)
),
c AS (
    SELECT dev, name_id, count(*) AS n, any_value(total) AS total
    FROM k JOIN (SELECT dev, count(*) AS total FROM k GROUP BY dev) USING (dev)
    GROUP BY dev, name_id
    HAVING count(*) >= {MIN_STEPS} AND count(*) * {MIN_KERNELS_PER_STEP} <= any_value(total)
),
occ AS (
    SELECT k.dev, k.name_id, c.n, k.idle_before,
           k.pos - lag(k.pos) OVER o AS period, row_number() OVER o AS nth
    FROM k JOIN c USING (dev, name_id)
    WINDOW o AS (PARTITION BY k.dev, k.name_id ORDER BY k.pos)
),
body AS (SELECT * FROM occ WHERE period IS NOT NULL AND (nth >= 3 OR n <= 3)),
med AS (SELECT dev, name_id, any_value(n) AS n, median(period) AS med FROM body GROUP BY dev, name_id),
ok AS (
    SELECT b.dev, b.name_id, m.n
    FROM body AS b JOIN med AS m USING (dev, name_id)
    WHERE m.med >= {MIN_KERNELS_PER_STEP}
    GROUP BY b.dev, b.name_id, m.n, m.med
    HAVING max(abs(b.period - m.med)) <= {MAX_PERIOD_SPREAD} * m.med
),
idle AS (SELECT dev, name_id, median(coalesce(idle_before, 0)) AS idle FROM occ SEMI JOIN ok USING (dev, name_id) GROUP BY ALL)
SELECT ok.dev, arg_min(ok.name_id, (ok.n, -i.idle, ok.name_id)) AS marker
FROM ok JOIN idle AS i USING (dev, name_id)
GROUP BY ok.dev
ORDER BY ok.dev
"""


def _kernel_pattern_steps(con: duckdb.DuckDBPyConnection, rid: int) -> int:
    """Steps from the kernel sequence of each GPU (MARKERS), for reports without step ranges.
    Step i runs from the marker's i-th start to its next; the last one for the median period,
    at most to the GPU's last kernel. A pattern covering less than MIN_COVERAGE of the GPU's
    kernel span is a loop inside one phase, not the program's steps, and is dropped."""
    rows: list[str] = []
    for dev, marker in params.execute(con, MARKERS, {"rid": rid}).fetchall():
        where = f"report_id = {rid} AND coalesce(device_id, -1) = {int(dev)}"
        first, last = params.first_row(
            con.execute(f"SELECT min(start_ns), max(end_ns) FROM kernel_rows WHERE {where}")
        )
        starts = [
            int(r[0])
            for r in con.execute(
                f"SELECT start_ns FROM kernel_rows WHERE {where} AND name_id = {int(marker)} ORDER BY start_ns, end_ns"
            ).fetchall()
        ]
        period = statistics.median(b - a for a, b in itertools.pairwise(starts))
        ends = [*starts[1:], min(int(last), int(starts[-1] + period))]
        if ends[-1] - starts[0] < MIN_COVERAGE * (int(last) - int(first)):
            continue
        name = con.execute(
            f"SELECT coalesce(short_name, name) FROM kernel_names WHERE report_id = {rid} AND name_id = {int(marker)}"
        ).fetchone()
        label = params.literal(str(name[0]) if name and name[0] is not None else f"kernel {marker}")
        device = "NULL" if dev == -1 else str(int(dev))
        rows += [
            f"({rid}, {i}, {label}, NULL, 'kernels', {int(dev)}, NULL, {device}, {s_}, {e}, {e - s_})"
            for i, (s_, e) in enumerate(zip(starts, ends))
        ]
    if rows:
        con.execute(
            "INSERT INTO steps (report_id, step, name, number, source, series, pid, device_id, start_ns, end_ns, "
            f"duration_ns) VALUES {', '.join(rows)}"
        )
    return len(rows)
