-- What the host did while the GPU idled: per report, device and host activity, the time the
-- thread that launched the work ending each idle gap spent in that activity inside the gap.
-- The gaps are the window's idle intervals at least min_gap_ns long (default: every one, however
-- short: the gaps between launches are where a launch-bound loop loses its time), the window
-- being the steady state (gaps whose midpoint lies after the first steady step, as `gaps` places
-- them) or, for reports without steps, everything after the device's first kernel. The
-- launching thread is the thread of the CUDA API call with the activity's report_id, pid and
-- correlation_id. Activities, by source:
--   cuda    CUDA API calls (cuda_api);
--   osrt    OS runtime calls (osrt_api: sleeps, waits, reads, writes, ioctl...);
--   mpi     the blocking MPI calls of nsys' MPI trace (host_waits with source 'mpi');
--   nvtx    NVTX ranges by base_name; a PyTorch-profiler trace's ranges are left out (they are
--           its cpu_ops again);
--   cpu_op  PyTorch-profiler ops and record_function ranges (cpu_ops cpu_op, user_annotation);
--   python  PyTorch-profiler Python frames (cpu_ops python_function, `with_stack=True`);
--   sample  CPU samples (cpu_samples), by function, each worth one sampling period: the 10th
--           percentile of the intervals between a report's consecutive samples on one thread
--           (a thread is sampled while it runs).
-- The ranges that are the steps (table steps: `step N`, ProfilerStep#N) are left out.
-- Each activity is clipped to the gaps of its own thread. in_gaps_ns merges the nested instances
-- of one name (recursion), so it never counts a moment twice for a name, and leaves out the
-- ranges, ops and frames that enclose two or more GPU launches (kernel, graph, copy or memset
-- launch calls) of their thread: ProfilerStep#N, a `forward` range, the Python frame of the loop
-- hold idle time only because they hold the whole step. Ranges, ops and frames nest, each source
-- on its own (a Python frame may start inside an op and end after it); self_ns is the time the
-- name was the innermost activity of its source, enclosing instances included, so within a
-- source nothing counts twice and the self_ns of its names add up to at most attributed_ns (for
-- samples: those in no traced activity). Across sources activities overlap (a sleep inside a
-- range): parent_* name the NVTX range or profiler op open just before an instance starts (the
-- innermost, another name), the one that holds most of its time. Linear: the gaps in one sorted
-- pass, the clipping by ASOF joins against the running total of gap time per thread (a second
-- only for activities that span a gap's start), the nesting by one sorted sweep per thread and
-- source over the activities that overlap the gaps, the union, the parents and the calls' totals
-- by one sorted pass per thread, summed per name and parent before any join. The sorts carry
-- numbers only: one key per launching thread and device, an activity's source with its name id
-- (calls) or row (ranges, ops and frames, whose names are looked up for those that overlap the
-- gaps only).
-- reads cpu_ops, cpu_samples, cuda_api, gpu_timeline, host_waits, kernel_rows, nvtx_ranges, osrt_api, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param min_gap_ns BIGINT = 0: shortest idle gap counted (ns); 0 counts all idle time.
-- param top_n INTEGER = 20: keep the N names with the most in_gaps_ns and the N with the most self_ns per report, device and source; all when NULL.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id of the gaps.
-- col source VARCHAR: cuda, osrt, mpi, nvtx, cpu_op, python or sample.
-- col name VARCHAR: call, range, op or frame name (`file.py(line): function` for Python frames); the sampled function (else its address).
-- col in_gaps_ns BIGINT: time the launching threads spent in it inside the gaps, instances enclosing two or more GPU launches left out (ns).
-- col self_ns BIGINT: time inside the gaps when it was the innermost activity of its source, all instances; calls: in_gaps_ns; samples: those in no traced activity (ns).
-- col instances BIGINT: its calls, ranges, frames or samples that overlap the gaps, enclosing ones included.
-- col depth INTEGER: activities of its source enclosing its outermost instance in the gaps; 0 for none and for calls.
-- col parent_source VARCHAR: nvtx or cpu_op: the source of the range or op around it that holds most of its time in the gaps; NULL when none.
-- col parent_name VARCHAR: that activity's name.
-- col parent_ns BIGINT: the part of in_gaps_ns spent inside that range or op (ns).
-- col idle_ns BIGINT: the device's idle time in the window's gaps (ns).
-- col attributed_ns BIGINT: the part of idle_ns whose launching thread is known (ns).
-- col traced_ns BIGINT: the part of attributed_ns the launching thread spent in a traced activity (enclosing ones left out); the rest is host code no source traced (ns).
-- col gaps BIGINT: the device's gaps in the window.
WITH
-- every gap of the window, with the thread that launched the work ending it (NULL: unknown)
gap AS (SELECT * FROM nsa_gap_launches($report_id, $min_gap_ns)),
totals AS (
    SELECT report_id, dev, sum(gap_end_ns - gap_start_ns) AS idle_ns, count(*) AS gaps
    FROM gap
    GROUP BY ALL
),
attributed AS (
    SELECT report_id, dev, sum(gap_end_ns - gap_start_ns) AS attributed_ns
    FROM gap
    WHERE global_tid IS NOT NULL
    GROUP BY ALL
),
-- the launching threads, one number (tk) per report, device and thread: the one key of the sorts
-- below (a thread that launched work on two devices is two); INTEGER, as the names' numbers below:
-- narrower rows through the sorts
threads AS (
    SELECT report_id, dev, global_tid,
           CAST(row_number() OVER (ORDER BY report_id, dev, global_tid) AS INTEGER) AS tk
    FROM (SELECT DISTINCT report_id, dev, global_tid FROM gap WHERE global_tid IS NOT NULL)
),
-- G(t), a thread's gap time before t: before_ns of the last gap starting at or before t, plus
-- the part of that gap before t
cum AS (
    SELECT t.tk, g.gap_start_ns, g.gap_end_ns,
           CAST(coalesce(sum(g.gap_end_ns - g.gap_start_ns) OVER w, 0) AS BIGINT) AS before_ns,
           lead(g.gap_start_ns) OVER (PARTITION BY t.tk ORDER BY g.gap_start_ns) AS next_start_ns
    FROM gap AS g
    JOIN threads AS t USING (report_id, dev, global_tid)
    WINDOW w AS (PARTITION BY t.tk ORDER BY g.gap_start_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
-- the activities' names as numbers (nid), so that the sorts and sums below carry no strings:
-- src 0 cuda, 1 osrt, 5 mpi (calls, flat; numbered here, from 1), 2 nvtx, 3 cpu_op, 4 python
-- (they nest; numbered below, negative, for those that overlap the gaps only)
sources AS (
    SELECT * FROM (VALUES (0, 'cuda'), (1, 'osrt'), (5, 'mpi'), (2, 'nvtx'), (3, 'cpu_op'), (4, 'python'))
        AS v(src, source)
),
call_names AS (
    SELECT src, name, row_number() OVER (ORDER BY src, name) AS nid
    FROM (
        SELECT DISTINCT 0 AS src, name FROM cuda_api WHERE $report_id IS NULL OR report_id = $report_id
        UNION ALL
        SELECT DISTINCT 1, name FROM osrt_api WHERE $report_id IS NULL OR report_id = $report_id
        UNION ALL
        SELECT DISTINCT 5, name FROM host_waits
        WHERE ($report_id IS NULL OR report_id = $report_id) AND source = 'mpi'
    )
    WHERE name IS NOT NULL
),
-- the activities of the launching threads, narrow for the sorts: tk, start_ns, end_ns and key,
-- the source (key % 8) and, for a call, its nid (key // 8; 0 for a NULL name) or, for a range,
-- op or frame, its rowid in its table (key // 8)
host AS (
    SELECT t.tk, c.start_ns, c.end_ns, coalesce(n.nid, 0) * 8 AS key
    FROM cuda_api AS c
    JOIN threads AS t ON t.report_id = c.report_id AND t.global_tid = c.global_tid
    LEFT JOIN call_names AS n ON n.src = 0 AND n.name = c.name
    WHERE ($report_id IS NULL OR c.report_id = $report_id) AND c.end_ns >= c.start_ns
    UNION ALL
    SELECT t.tk, o.start_ns, o.end_ns, coalesce(n.nid, 0) * 8 + 1 AS key
    FROM osrt_api AS o
    JOIN threads AS t ON t.report_id = o.report_id AND t.global_tid = o.global_tid
    LEFT JOIN call_names AS n ON n.src = 1 AND n.name = o.name
    WHERE ($report_id IS NULL OR o.report_id = $report_id) AND o.end_ns >= o.start_ns
    UNION ALL
    SELECT t.tk, w.start_ns, w.end_ns, coalesce(n.nid, 0) * 8 + 5 AS key
    FROM host_waits AS w
    JOIN threads AS t ON t.report_id = w.report_id AND t.global_tid = w.global_tid
    LEFT JOIN call_names AS n ON n.src = 5 AND n.name = w.name
    WHERE ($report_id IS NULL OR w.report_id = $report_id) AND w.source = 'mpi' AND w.end_ns >= w.start_ns
    UNION ALL
    SELECT t.tk, r.start_ns, r.end_ns, r.rowid * 8 + 2 AS key
    FROM nvtx_ranges AS r
    JOIN threads AS t ON t.report_id = r.report_id AND t.global_tid = r.global_tid
    ANTI JOIN (SELECT * FROM steps WHERE source = 'nvtx') AS s
        ON s.report_id = r.report_id AND s.series = r.global_tid AND s.start_ns = r.start_ns AND s.end_ns = r.end_ns
    WHERE ($report_id IS NULL OR r.report_id = $report_id) AND r.end_ns >= r.start_ns
        AND r.report_id NOT IN (SELECT DISTINCT report_id FROM cpu_ops)
    UNION ALL
    SELECT t.tk, p.start_ns, p.end_ns,
           p.rowid * 8 + CASE WHEN p.category = 'python_function' THEN 4 ELSE 3 END AS key
    FROM cpu_ops AS p
    JOIN threads AS t ON t.report_id = p.report_id AND t.global_tid = p.global_tid
    ANTI JOIN (SELECT * FROM steps WHERE source = 'nvtx') AS s
        ON s.report_id = p.report_id AND s.series = p.global_tid AND s.start_ns = p.start_ns AND s.end_ns = p.end_ns
    WHERE ($report_id IS NULL OR p.report_id = $report_id) AND p.end_ns >= p.start_ns
),
-- G at each activity's start; at its end too when it ends before the next gap starts (most do)
at_start AS (
    SELECT h.tk, h.key, h.start_ns, h.end_ns,
           coalesce(a.before_ns + least(greatest(h.start_ns - a.gap_start_ns, 0), a.gap_end_ns - a.gap_start_ns), 0) AS g_start,
           CASE
               WHEN a.gap_start_ns IS NOT NULL AND h.end_ns < coalesce(a.next_start_ns, 9223372036854775807)
                   THEN a.before_ns + least(greatest(h.end_ns - a.gap_start_ns, 0), a.gap_end_ns - a.gap_start_ns)
           END AS g_end_near
    FROM host AS h
    ASOF LEFT JOIN cum AS a ON a.tk = h.tk AND h.start_ns >= a.gap_start_ns
),
-- the rest (an activity that starts before the first gap or spans a gap's start): G at its end
at_end AS (
    SELECT x.tk, x.key, x.start_ns, x.end_ns, x.g_start,
           coalesce(b.before_ns + least(greatest(x.end_ns - b.gap_start_ns, 0), b.gap_end_ns - b.gap_start_ns), 0) AS g_end
    FROM (SELECT * FROM at_start WHERE g_end_near IS NULL) AS x
    ASOF LEFT JOIN cum AS b ON b.tk = x.tk AND x.end_ns >= b.gap_start_ns
),
overlapping AS (
    SELECT tk, key, start_ns, end_ns, g_start, g_end_near AS g_end
    FROM at_start
    WHERE g_end_near > g_start
    UNION ALL
    SELECT * FROM at_end WHERE g_end > g_start
),
-- the calls (cuda, osrt, mpi) that overlap the gaps
flat AS NOT MATERIALIZED (
    SELECT tk, CAST(key % 8 AS INTEGER) AS src, CAST(nullif(key // 8, 0) AS INTEGER) AS nid,
           start_ns, end_ns, g_start, g_end
    FROM overlapping
    WHERE key % 8 IN (0, 1, 5)
),
-- the ranges, ops and frames that overlap the gaps, with their names (row: rowid in their table),
-- looked up by a mark join (`rowid IN`, which hashes the overlapping rows: few) rather than a join
-- on rowid, which DuckDB's estimates (ASOF joins) make hash the whole table with its names
nested AS (
    SELECT o.tk, 2 AS src, o.key // 8 AS row, o.start_ns, o.end_ns, o.g_start, o.g_end,
           coalesce(r.base_name, r.name) AS name
    FROM (SELECT * FROM overlapping WHERE key % 8 = 2) AS o
    JOIN (
        SELECT * FROM (
            SELECT rowid, base_name, name,
                   rowid IN (SELECT key // 8 FROM overlapping WHERE key % 8 = 2) AS hit
            FROM nvtx_ranges
        )
        WHERE hit
    ) AS r ON r.rowid = o.key // 8
    UNION ALL
    SELECT o.tk, o.key % 8 AS src, o.key // 8 AS row, o.start_ns, o.end_ns, o.g_start, o.g_end, p.name
    FROM (SELECT * FROM overlapping WHERE key % 8 IN (3, 4)) AS o
    JOIN (
        SELECT * FROM (
            SELECT rowid, name, rowid IN (SELECT key // 8 FROM overlapping WHERE key % 8 IN (3, 4)) AS hit
            FROM cpu_ops
        )
        WHERE hit
    ) AS p ON p.rowid = o.key // 8
),
nested_names AS (
    SELECT src, name, CAST(-row_number() OVER (ORDER BY src, name) AS INTEGER) AS nid
    FROM (SELECT DISTINCT src, name FROM nested WHERE name IS NOT NULL)
),
names AS (SELECT * FROM call_names UNION ALL SELECT * FROM nested_names),
-- the launching threads' calls that put work on the GPU (kernel, graph, copy and memset
-- launches), on the threads with ranges, ops or frames in the gaps
launches AS (
    SELECT t.tk, c.start_ns
    FROM cuda_api AS c
    JOIN threads AS t ON t.report_id = c.report_id AND t.global_tid = c.global_tid
    SEMI JOIN (SELECT DISTINCT tk FROM nested) AS x ON x.tk = t.tk
    WHERE ($report_id IS NULL OR c.report_id = $report_id)
        AND (contains(c.name, 'Launch') OR contains(c.name, 'Memcpy') OR contains(c.name, 'Memset'))
        AND NOT contains(c.name, 'HostFunc')
),
-- the ranges, ops and frames that enclose two or more launches (calls never count as enclosing:
-- they stay in `flat`): the launches started before each one's start (kind 0, ahead of a launch
-- at the same time) and by its end (kind 2, after), counted in one pass per thread
enclosing AS (
    SELECT tk, src, row
    FROM (
        SELECT *, sum(CASE WHEN kind = 1 THEN 1 ELSE 0 END) OVER (
            PARTITION BY tk ORDER BY t, kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS n
        FROM (
            SELECT tk, start_ns AS t, 0 AS kind, src, row FROM nested
            UNION ALL
            SELECT tk, start_ns, 1, NULL, NULL FROM launches
            UNION ALL
            SELECT tk, end_ns, 2, src, row FROM nested
        )
        QUALIFY kind <> 1
    )
    GROUP BY ALL
    HAVING max(n) FILTER (WHERE kind = 2) - max(n) FILTER (WHERE kind = 0) >= 2
),
inside AS (
    SELECT x.tk, x.src, x.row, x.start_ns, x.end_ns, x.g_start, x.g_end, n.nid, e.row IS NOT NULL AS encloses
    FROM nested AS x
    LEFT JOIN nested_names AS n USING (src, name)
    LEFT JOIN enclosing AS e USING (tk, src, row)
),
-- in_gaps_ns: the instances that enclose no launches, the nested instances of one name merged
-- (from G at the latest end before an instance, where it overlaps that one)
kept AS (
    SELECT *,
           max(end_ns) OVER w AS prev_end,
           arg_max(g_end, end_ns) OVER w AS g_prev_end
    FROM inside
    WHERE NOT encloses
    WINDOW w AS (
        PARTITION BY tk, src, nid ORDER BY start_ns, end_ns DESC, row
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    )
),
merged AS (
    SELECT t.report_id, t.dev, k.src, k.nid,
           sum(CASE
               WHEN k.prev_end IS NULL OR k.start_ns >= k.prev_end THEN k.g_end - k.g_start
               WHEN k.end_ns <= k.prev_end THEN 0
               ELSE k.g_end - k.g_prev_end
           END) AS in_gaps_ns
    FROM kept AS k
    JOIN threads AS t USING (tk)
    GROUP BY ALL
),
-- the nesting, per thread and source (the activities of one source nest properly; across sources
-- they need not: a Python frame may start inside an op and end after it): one sweep over starts
-- (+1) and ends (-1), ends before starts at the same time, outer starts before inner ones, inner
-- ends before outer ones; calls (cuda, osrt, mpi) do not nest
events AS (
    SELECT tk, src, nid, start_ns AS t, 1 AS step, -end_ns AS tie, row AS key, g_start AS g
    FROM inside
    UNION ALL
    SELECT tk, src, nid, end_ns AS t, -1 AS step, -start_ns AS tie, -row AS key, g_end AS g
    FROM inside
),
sweep AS (
    SELECT *,
           sum(step) OVER w AS open_after,
           row_number() OVER w AS seq,
           lead(g) OVER w AS g_next
    FROM events
    WINDOW w AS (PARTITION BY tk, src ORDER BY t, step, tie, key)
),
starts AS (
    SELECT tk, src, nid, seq, open_after - 1 AS depth
    FROM sweep
    WHERE step = 1
),
-- after each event, the innermost open activity of the source: the latest to start at the depth
-- still open (nid NULL when none is)
innermost AS (
    SELECT s.tk, s.src, s.t, s.seq, s.g, s.g_next, o.nid
    FROM sweep AS s
    ASOF LEFT JOIN starts AS o
        ON o.tk = s.tk AND o.src = s.src AND o.depth = s.open_after - 1 AND s.seq >= o.seq
),
-- the parent: the innermost NVTX range or profiler op open just before an activity starts (its own
-- source's parent for a range or op), summed over the instances in in_gaps_ns; named_open is
-- what is innermost after each time, numbered in time per thread
named_open AS (
    SELECT *, row_number() OVER (PARTITION BY tk ORDER BY t) AS open_seq
    FROM innermost
    WHERE src IN (2, 3)
    QUALIFY row_number() OVER (PARTITION BY tk, t ORDER BY src DESC, seq DESC) = 1
),
-- one pass in time over each thread's activities (enclosing ones left out) and those times (after
-- the activities starting at the same time): before each activity, the furthest G an earlier one
-- reached (G grows with time) and the last named_open
cover AS (
    SELECT *,
           max(g_end) OVER w AS g_reach,
           max(open_seq) OVER w AS parent_seq
    FROM (
        SELECT tk, start_ns, src, nid, g_start, g_end, NULL AS open_seq
        FROM flat
        UNION ALL
        SELECT tk, start_ns, src, nid, g_start, g_end, NULL AS open_seq
        FROM inside
        WHERE NOT encloses
        UNION ALL
        SELECT tk, t, NULL, NULL, NULL, NULL, open_seq FROM named_open
    )
    -- (open_seq NULL for the activities: the named_open rows sort after those starting with them)
    WINDOW w AS (
        PARTITION BY tk ORDER BY start_ns, open_seq NULLS FIRST
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    )
    QUALIFY open_seq IS NULL
),
-- per thread, name and parent (parent_seq): the activities' time in the gaps (ns), how many
-- (n), and the part of it past the earlier activities' reach (new_ns: summed, the union of them,
-- the part of the gaps the thread spent in one of them)
cover_sums AS (
    SELECT tk, src, nid, parent_seq, sum(g_end - g_start) AS ns, count(*) AS n,
           sum(greatest(g_end - greatest(g_start, coalesce(g_reach, g_start)), 0)) AS new_ns
    FROM cover
    GROUP BY ALL
),
covered AS (
    SELECT t.report_id, t.dev, sum(c.new_ns) AS traced_ns
    FROM cover_sums AS c
    JOIN threads AS t USING (tk)
    GROUP BY ALL
),
parents AS (
    SELECT t.report_id, t.dev, k.src, k.nid, o.src AS parent_src, o.nid AS parent_nid,
           sum(k.ns) AS parent_ns
    FROM cover_sums AS k
    JOIN named_open AS o ON o.tk = k.tk AND o.open_seq = k.parent_seq
    JOIN threads AS t ON t.tk = k.tk
    WHERE o.nid IS NOT NULL AND (o.src <> k.src OR o.nid <> k.nid)
    GROUP BY ALL
),
-- self_ns and instances: the nesting's for ranges, ops and frames; cover_sums' for the calls
self AS (
    SELECT t.report_id, t.dev, i.src, i.nid, sum(i.g_next - i.g) AS self_ns
    FROM innermost AS i
    JOIN threads AS t USING (tk)
    WHERE i.nid IS NOT NULL AND i.g_next > i.g
    GROUP BY ALL
    UNION ALL
    SELECT t.report_id, t.dev, f.src, f.nid, sum(f.ns)
    FROM cover_sums AS f
    JOIN threads AS t USING (tk)
    WHERE f.src IN (0, 1, 5)
    GROUP BY ALL
),
shape AS (
    SELECT t.report_id, t.dev, s.src, s.nid, count(*) AS instances, min(s.depth) AS depth
    FROM starts AS s
    JOIN threads AS t USING (tk)
    GROUP BY ALL
    UNION ALL
    SELECT t.report_id, t.dev, f.src, f.nid, sum(f.n), 0
    FROM cover_sums AS f
    JOIN threads AS t USING (tk)
    WHERE f.src IN (0, 1, 5)
    GROUP BY ALL
),
top_parent AS (
    SELECT p.report_id, p.dev, p.src, p.nid, ps.source AS parent_source, pn.name AS parent_name, p.parent_ns
    FROM parents AS p
    JOIN sources AS ps ON ps.src = p.parent_src
    JOIN names AS pn ON pn.nid = p.parent_nid
    QUALIFY row_number() OVER (
        PARTITION BY p.report_id, p.dev, p.src, p.nid ORDER BY p.parent_ns DESC, parent_source, parent_name
    ) = 1
),
-- CPU samples of the launching threads inside the gaps, per function (the innermost named frame,
-- else the leaf address), each worth one sampling period: the 10th percentile of the intervals
-- between a report's consecutive samples on one thread (a thread is sampled while it runs)
period AS (
    SELECT report_id, quantile_disc(d, 0.1) AS period_ns
    FROM (
        SELECT report_id, ts_ns - lag(ts_ns) OVER (PARTITION BY report_id, global_tid ORDER BY ts_ns) AS d
        FROM cpu_samples
        WHERE $report_id IS NULL OR report_id = $report_id
    )
    WHERE d > 0
    GROUP BY ALL
),
sample_rows AS (
    SELECT t.tk, x.ts_ns, coalesce(x.function, x.leaf, '(no backtrace)') AS name
    FROM cpu_samples AS x
    JOIN threads AS t ON t.report_id = x.report_id AND t.global_tid = x.global_tid
    WHERE $report_id IS NULL OR x.report_id = $report_id
),
-- (the gaps of the sampled threads only: a capture without samples sorts none of them)
sampled AS (
    SELECT x.tk, x.ts_ns, x.name
    FROM sample_rows AS x
    ASOF JOIN (SELECT * FROM cum SEMI JOIN (SELECT DISTINCT tk FROM sample_rows) AS s USING (tk)) AS c
        ON c.tk = x.tk AND x.ts_ns >= c.gap_start_ns
    WHERE x.ts_ns < c.gap_end_ns
),
sample_parents AS (
    SELECT t.report_id, t.dev, 'sample' AS source, x.name, so.source AS parent_source, nm.name AS parent_name,
           count(*) AS samples
    FROM (
        SELECT x.tk, x.name, o.src, o.nid
        FROM sampled AS x
        ASOF JOIN named_open AS o ON o.tk = x.tk AND x.ts_ns >= o.t
    ) AS x
    JOIN threads AS t USING (tk)
    JOIN sources AS so ON so.src = x.src
    JOIN names AS nm ON nm.nid = x.nid
    GROUP BY t.report_id, t.dev, x.name, so.source, nm.name
    QUALIFY row_number() OVER (
        PARTITION BY t.report_id, t.dev, x.name ORDER BY count(*) DESC, so.source, nm.name
    ) = 1
),
sample_names AS (
    SELECT t.report_id, t.dev, 'sample' AS source, x.name, count(*) * any_value(p.period_ns) AS in_gaps_ns,
           count(*) FILTER (WHERE c.reach_ns IS NULL OR c.reach_ns <= x.ts_ns) * any_value(p.period_ns) AS untraced_ns,
           count(*) AS instances, any_value(p.period_ns) AS period_ns
    FROM sampled AS x
    JOIN threads AS t USING (tk)
    JOIN period AS p ON p.report_id = t.report_id
    -- reach_ns: the latest end of the activities started by then (a sample is traced when that
    -- is after it)
    ASOF LEFT JOIN (
        SELECT tk, start_ns,
               max(end_ns) OVER (
                   PARTITION BY tk ORDER BY start_ns RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
               ) AS reach_ns
        FROM (
            SELECT tk, start_ns, end_ns FROM flat
            UNION ALL
            SELECT tk, start_ns, end_ns FROM inside WHERE NOT encloses
        ) AS i
        SEMI JOIN (SELECT DISTINCT tk FROM sampled) AS s USING (tk)
    ) AS c ON c.tk = x.tk AND x.ts_ns >= c.start_ns
    GROUP BY t.report_id, t.dev, x.name
),
per_name AS (
    SELECT sh.report_id, sh.dev, so.source, nm.name,
           CASE WHEN src IN (0, 1, 5) THEN f.self_ns ELSE coalesce(m.in_gaps_ns, 0) END AS in_gaps_ns,
           coalesce(f.self_ns, 0) AS self_ns, sh.instances, sh.depth, tp.parent_source, tp.parent_name, tp.parent_ns
    FROM shape AS sh
    -- a NULL name (nid) matches none of these, as in a join on the name
    LEFT JOIN merged AS m USING (report_id, dev, src, nid)
    LEFT JOIN self AS f USING (report_id, dev, src, nid)
    LEFT JOIN top_parent AS tp USING (report_id, dev, src, nid)
    JOIN sources AS so USING (src)
    LEFT JOIN (SELECT nid, name FROM names) AS nm USING (nid)
    UNION ALL
    SELECT n.report_id, n.dev, n.source, n.name, n.in_gaps_ns, n.untraced_ns, n.instances, 0, sp.parent_source,
           sp.parent_name, sp.samples * n.period_ns
    FROM sample_names AS n
    LEFT JOIN sample_parents AS sp USING (report_id, dev, source, name)
)
SELECT
    p.report_id,
    CAST(nullif(p.dev, -1) AS INTEGER) AS device_id,
    p.source,
    p.name,
    CAST(p.in_gaps_ns AS BIGINT) AS in_gaps_ns,
    CAST(p.self_ns AS BIGINT) AS self_ns,
    CAST(p.instances AS BIGINT) AS instances,
    CAST(p.depth AS INTEGER) AS depth,
    p.parent_source,
    p.parent_name,
    CAST(p.parent_ns AS BIGINT) AS parent_ns,
    CAST(t.idle_ns AS BIGINT) AS idle_ns,
    CAST(a.attributed_ns AS BIGINT) AS attributed_ns,
    CAST(coalesce(c.traced_ns, 0) AS BIGINT) AS traced_ns,
    CAST(t.gaps AS BIGINT) AS gaps
FROM per_name AS p
JOIN totals AS t USING (report_id, dev)
JOIN attributed AS a USING (report_id, dev)
LEFT JOIN covered AS c USING (report_id, dev)
QUALIFY $top_n IS NULL
    OR row_number() OVER (PARTITION BY p.report_id, p.dev, p.source ORDER BY p.in_gaps_ns DESC, p.name) <= $top_n
    OR row_number() OVER (PARTITION BY p.report_id, p.dev, p.source ORDER BY p.self_ns DESC, p.name) <= $top_n
ORDER BY p.report_id, p.dev, p.source, p.in_gaps_ns DESC, p.self_ns DESC, p.name
