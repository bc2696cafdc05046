-- Macros shared by the nsys queries; the query runner executes this file before any query.
-- Macro parameters are spelled nsa_* so they never shadow a column of the same name.

-- nsa_gpu_activity(nsa_rid): every kernel, memcpy, memset and CUDA graph execution of report
-- `nsa_rid` (all reports when NULL) as one table: report_id, device_id, pid, stream_id,
-- correlation_id, start_ns, end_ns, kind ('kernel', 'memcpy', 'memset', 'graph') and label (the
-- kernel name, 'memcpy HtoD', 'memset', 'CUDA graph 3'). A graph execution traced as one row
-- (nsys' default --cuda-graph-trace=graph) is GPU work like a kernel. Rows without a start or
-- with end < start are dropped: they cannot be placed on a timeline.
CREATE OR REPLACE MACRO nsa_gpu_activity(nsa_rid) AS TABLE
    SELECT k.report_id, k.device_id, k.pid, k.stream_id, k.correlation_id, k.start_ns, k.end_ns,
           'kernel' AS kind, coalesce(n.name, n.short_name, '(unnamed kernel)') AS label
    FROM kernel_rows AS k
    LEFT JOIN kernel_names AS n USING (report_id, name_id)
    WHERE (nsa_rid IS NULL OR k.report_id = nsa_rid) AND k.start_ns IS NOT NULL AND k.end_ns >= k.start_ns
    UNION ALL
    SELECT report_id, device_id, pid, stream_id, correlation_id, start_ns, end_ns,
           'memcpy' AS kind, 'memcpy ' || coalesce(direction, 'Unknown') AS label
    FROM memcpy
    WHERE (nsa_rid IS NULL OR report_id = nsa_rid) AND start_ns IS NOT NULL AND end_ns >= start_ns
    UNION ALL
    SELECT report_id, device_id, pid, stream_id, correlation_id, start_ns, end_ns,
           'memset' AS kind, 'memset' AS label
    FROM memset
    WHERE (nsa_rid IS NULL OR report_id = nsa_rid) AND start_ns IS NOT NULL AND end_ns >= start_ns
    UNION ALL
    SELECT report_id, device_id, pid, stream_id, correlation_id, start_ns, end_ns,
           'graph' AS kind, 'CUDA graph ' || coalesce(CAST(graph_id AS VARCHAR), '?') AS label
    FROM graph_executions
    WHERE (nsa_rid IS NULL OR report_id = nsa_rid) AND start_ns IS NOT NULL AND end_ns >= start_ns;

-- nsa_steady(nsa_rid): where the steady state of each report that has steps (table `steps`)
-- begins: report_id, start_ns (the first steady step starts; everything before is start-up, and
-- the steady state runs from here to the end of the capture), end_ns (the last step ends), steps
-- (all steps of the longest series), steady_steps, first_step / last_step (0-based positions) and source ('nvtx',
-- 'graphs' or 'kernels'). Reports without steps have no row: their queries fall back to the whole span.
-- steps / steady_steps count one series (the longest): a report holding several processes (a job
-- captured in one report) has a series per process, each the same loop.
CREATE OR REPLACE MACRO nsa_steady(nsa_rid) AS TABLE
    SELECT report_id,
           min(start_ns) FILTER (WHERE steady) AS start_ns,
           max(end_ns) AS end_ns,
           max(series_steps) AS steps,
           max(series_steady) AS steady_steps,
           arg_min(step, start_ns) FILTER (WHERE steady) AS first_step,
           arg_max(step, end_ns) AS last_step,
           any_value(source) AS source
    FROM (
        SELECT *,
               count(*) OVER (PARTITION BY report_id, series) AS series_steps,
               count(*) FILTER (WHERE steady) OVER (PARTITION BY report_id, series) AS series_steady
        FROM steps
        WHERE (nsa_rid IS NULL OR report_id = nsa_rid)
    )
    GROUP BY report_id
    HAVING max(series_steady) > 0;

-- nsa_window_gaps(nsa_rid, nsa_min_gap_ns): the idle gaps of each device that gpu-idle judges,
-- those of the steady state (a gap whose midpoint lies in it) or, without steps, after the first
-- kernel; at least nsa_min_gap_ns long. report_id, dev (device_id, -1 for none), and the activity
-- that ends the gap: pid, correlation_id (its launch call); gap_start_ns, gap_end_ns.
CREATE OR REPLACE MACRO nsa_window_gaps(nsa_rid, nsa_min_gap_ns) AS TABLE
    WITH
    act AS (
        -- the running maximum of earlier ends is stored (gpu_timeline): a gap is a filter
        SELECT report_id, coalesce(device_id, -1) AS dev, pid, correlation_id, start_ns, prev_end_ns AS prev_end
        FROM gpu_timeline
        WHERE nsa_rid IS NULL OR report_id = nsa_rid
    ),
    first_kernel AS (
        SELECT report_id, coalesce(device_id, -1) AS dev, min(start_ns) AS first_ns
        FROM kernel_rows
        WHERE nsa_rid IS NULL OR report_id = nsa_rid
        GROUP BY ALL
    )
    SELECT a.report_id, a.dev, a.pid, a.correlation_id, a.prev_end AS gap_start_ns, a.start_ns AS gap_end_ns
    FROM act AS a
    LEFT JOIN nsa_steady(nsa_rid) AS s USING (report_id)
    LEFT JOIN first_kernel AS f USING (report_id, dev)
    WHERE a.start_ns - a.prev_end >= greatest(nsa_min_gap_ns, 1)
        AND CASE
            WHEN s.report_id IS NOT NULL THEN a.prev_end + (a.start_ns - a.prev_end) // 2 >= s.start_ns
            ELSE a.start_ns > f.first_ns
        END;

-- nsa_gap_launches(nsa_rid, nsa_min_gap_ns): the gaps of nsa_window_gaps, one row each, with the
-- thread that launched the work ending the gap: report_id, dev, gap_start_ns, gap_end_ns and
-- global_tid, the thread of the CUDA API call with the ending activity's report_id, pid and
-- correlation_id (the earliest such call; NULL when none has a thread).
CREATE OR REPLACE MACRO nsa_gap_launches(nsa_rid, nsa_min_gap_ns) AS TABLE
    SELECT g.report_id, g.dev, g.gap_start_ns, any_value(g.gap_end_ns) AS gap_end_ns,
           arg_min(c.global_tid, c.start_ns) AS global_tid
    FROM nsa_window_gaps(nsa_rid, nsa_min_gap_ns) AS g
    LEFT JOIN cuda_api AS c
        ON c.report_id = g.report_id AND c.pid = g.pid AND c.correlation_id = g.correlation_id
        AND c.global_tid IS NOT NULL AND (nsa_rid IS NULL OR c.report_id = nsa_rid)
    GROUP BY g.report_id, g.dev, g.gap_start_ns;

-- nsa_blocking_call(api_name): how a CUDA API call blocks the calling host thread, or NULL when it
-- does not:
--   'synchronize': cuda/cu Device-, Thread-, Ctx-, Stream- and EventSynchronize (any _vN suffix;
--                  the per-thread default stream variant cudaStreamSynchronize_ptsz too), and
--                  ROCm's hip Device-, Stream-, Event- and CtxSynchronize (PyTorch traces on AMD);
--   'memcpy':      a synchronous copy: cudaMemcpy, cudaMemcpy2D/3D/Peer/ToSymbol..., cuMemcpy*,
--                  hipMemcpy* without `Async` in the name;
--   'memset':      a synchronous memset: cudaMemset, cudaMemset2D/3D, cuMemsetD8/16/32...,
--                  hipMemset* without `Async`.
-- cudaStreamWaitEvent (a GPU-side dependency), cudaEventQuery / cudaStreamQuery (polls) and every
-- *Async call are not blocking. Implicit synchronisation (cudaFree, cudaMalloc on some drivers,
-- an Async copy from pageable memory) is not counted.
CREATE OR REPLACE MACRO nsa_blocking_call(api_name) AS
    CASE
        WHEN api_name IS NULL OR contains(api_name, 'Async') THEN NULL
        -- contains / starts_with first: the same matches as the regular expressions
        -- ^(cu|cuda|hip)...Synchronize..., ^(cu|cuda|hip)Memcpy and ^(cu|cuda|hip)Memset, without
        -- running a regex on each of millions of cudaLaunchKernel rows
        WHEN contains(api_name, 'Synchronize')
             AND regexp_matches(api_name, '^(cu|cuda|hip)(Device|Thread|Ctx|Stream|Event)Synchronize(_ptsz)?(_v[0-9]+)?$')
            THEN 'synchronize'
        WHEN starts_with(api_name, 'cudaMemcpy') OR starts_with(api_name, 'cuMemcpy')
             OR starts_with(api_name, 'hipMemcpy') THEN 'memcpy'
        WHEN starts_with(api_name, 'cudaMemset') OR starts_with(api_name, 'cuMemset')
             OR starts_with(api_name, 'hipMemset') THEN 'memset'
    END;

-- nsa_union_ns(end, start, prev_max_end): the part of [start, end] not already covered by the
-- intervals before it, when rows are visited in start order and prev_max_end is the running
-- max of their ends (NULL for the first). Summed over the rows it is the length of the union:
-- one sorted pass, overlaps counted once.
CREATE OR REPLACE MACRO nsa_union_ns(nsa_end, nsa_start, nsa_prev_end) AS
    greatest(0, nsa_end - greatest(nsa_start, coalesce(nsa_prev_end, nsa_start)));

-- nsa_memory_held(): the memory events with a time, each with `seq` (its rowid: the order of
-- events at the same time) and held_bytes: what its report / device / process / memory holds
-- after it, the source's own count (allocated_bytes) where it states one, else the running sum
-- of delta_bytes. A filter on those partition columns may come after: the sums stay the same.
CREATE OR REPLACE MACRO nsa_memory_held() AS TABLE
    SELECT *,
           CAST(coalesce(allocated_bytes, sum(coalesce(delta_bytes, 0)) OVER (
               PARTITION BY report_id, device_id, pid, memory ORDER BY ts_ns, seq
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           )) AS BIGINT) AS held_bytes
    FROM (
        SELECT m.*, m.rowid AS seq
        FROM memory_events AS m
        WHERE m.ts_ns IS NOT NULL
    );

-- nsa_stack_described(nsa_used): what the stack attribution queries (gap_stacks, launch_stacks)
-- name for each stack of a set: nsa_used is the name of a table or CTE of distinct (report_id,
-- stack_id) rows (read with query_table). Per stack: user_function, user_file (the Python file, or
-- the binary of a native frame), user_line and user_frame_id of its innermost user frame
-- (stack_frames.user: the program's own code); library_frame, the frame that user frame was
-- calling (`name (file:line)` for a Python frame), or the innermost frame when the stack has no
-- user frame, NULL when the user frame is the innermost; callers, the user frames calling it,
-- innermost first (`train_step < main`). Only the set's stacks are read (a semi join): the cost
-- follows the stacks used, not the size of table stacks.
CREATE OR REPLACE MACRO nsa_stack_described(nsa_used) AS TABLE
    WITH
    framed AS (
        SELECT s.report_id, s.stack_id, s.depth, f.frame_id, f.user, f.function, f.file, f.line, f.kind, f.module
        FROM stacks AS s
        SEMI JOIN query_table(nsa_used) AS u ON u.report_id = s.report_id AND u.stack_id = s.stack_id
        JOIN stack_frames AS f ON f.report_id = s.report_id AND f.frame_id = s.frame_id
    ),
    innermost_user AS (
        SELECT report_id, stack_id, min(depth) AS depth FROM framed WHERE user GROUP BY ALL
    ),
    callers AS (
        SELECT c.report_id, c.stack_id, string_agg(c.function, ' < ' ORDER BY c.depth) AS callers
        FROM framed AS c
        JOIN innermost_user AS iu USING (report_id, stack_id)
        WHERE c.user AND c.depth > iu.depth
        GROUP BY ALL
    )
    SELECT u.report_id, u.stack_id, uf.function AS user_function, coalesce(uf.file, uf.module) AS user_file,
           uf.line AS user_line, uf.frame_id AS user_frame_id,
           CASE WHEN lf.kind = 'python' AND lf.file IS NOT NULL
               THEN lf.function || ' (' || lf.file || ':' || lf.line || ')' ELSE lf.function END AS library_frame,
           c.callers
    FROM query_table(nsa_used) AS u
    LEFT JOIN innermost_user AS iu USING (report_id, stack_id)
    LEFT JOIN callers AS c USING (report_id, stack_id)
    LEFT JOIN framed AS uf ON uf.report_id = u.report_id AND uf.stack_id = u.stack_id AND uf.depth = iu.depth
    LEFT JOIN framed AS lf ON lf.report_id = u.report_id AND lf.stack_id = u.stack_id
        AND lf.depth = coalesce(iu.depth - 1, 0);
