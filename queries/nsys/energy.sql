-- GPU energy and average power of each report, from the power logs (table power_samples) whose
-- UTC span overlaps the report's session: the log's UTC times minus the report's
-- session_start_utc_ns put the samples on the report's timeline. Logs match the report's GPUs
-- by device id (NVML / nvidia-smi index = CUDA device id; power_device_id overrides).
-- The power signal: where the log has the driver's energy counter, the counter's increments
-- between its updates (so the energy is what the GPU drew: the power readings of Ampere and
-- newer GPUs are one-second averages that lag the load); otherwise each sample's power
-- (power_instant_w, else power_w) held until the next sample. A window gets each interval's
-- energy in proportion to the time it covers; error_j bounds what that assumption can be
-- wrong by: an interval the window covers a fraction f of can hold anywhere from none to all
-- of its energy, so each such interval adds max(f, 1 - f) of its energy.
-- Scopes: 'run': the report (session start to its last GPU activity or step) and, with steps,
-- 'steady' (the steady steps, nsa_steady); 'step': each step; 'range': NVTX ranges by name
-- (base_name, closed ranges other than the steps', host time, summed over instances); 'kernel':
-- by kernel name (and
-- 'memcpy HtoD', 'memset'...: nsa_gpu_activity), each interval's energy split over the work
-- running on its device in proportion to time run in it (concurrent work shares), and
-- '(idle)', the report's energy not given to any of it. A report with a UTC session start that
-- no power log covers gets one 'run' row with NULL energy and method 'no power log'.
-- reads graph_executions, kernel_names, kernel_rows, memcpy, memset, nvtx_ranges, power_samples, reports, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param power_device_id INTEGER = NULL: use this device of the power logs for every GPU of the report; NULL: the same device id.
-- param items_per_step DOUBLE = NULL: samples (or tokens) one step processes, for energy_per_item_j.
-- col report_id INTEGER: workspace report id.
-- col scope VARCHAR: 'run', 'step', 'range' or 'kernel'.
-- col name VARCHAR: 'report' or 'steady' (run), the step's name, the range's base name, the kernel name or '(idle)'.
-- col start_ns BIGINT: the window starts (ns, report timeline); the first instance for range and kernel.
-- col end_ns BIGINT: the window ends (ns); the last instance's end for range and kernel.
-- col energy_j DOUBLE: energy the report's GPUs drew in the window, summed over instances (J).
-- col avg_power_w DOUBLE: energy_j over the time the instances cover (W).
-- col samples BIGINT: power intervals (counter updates where the counter is used) the figure rests on.
-- col error_j DOUBLE: bound on the error of energy_j from the sample interval (J); see above.
-- col coverage DOUBLE: share of the window's time the power log covers (fraction); below 1 the energy is of that part only.
-- col instances BIGINT: 1 for 'report', the steps for 'steady', the steps of that name (1 unless several processes step), range instances, launches (kernel).
-- col energy_per_instance_j DOUBLE: energy_j / instances: joules per step for 'steady', per call for ranges and kernels (J).
-- col energy_per_item_j DOUBLE: joules per sample or token: energy_j / (steps * items_per_step), run and step scopes (J).
-- col readings_j DOUBLE: the power readings integrated over the same windows, each held until the next sample (J); run, step and range scopes. With the counter as energy_j this is the check on the integral: the two agree over long windows, and over short ones the one-second averages lag the load.
-- col interval_ns BIGINT: median length of the power intervals the row rests on: the resolution (ns).
-- col power_report_id INTEGER: the power log's report id (the smallest when several GPUs' logs differ); NULL when no log covers the report.
-- col method VARCHAR: 'energy counter', 'power readings', or 'no power log' (the report's one row then says so).
-- each report's GPUs and their last end, without the activities' labels (a million kernel names
-- are strings: carrying them through this costs more than the rest of the query)
WITH devices AS (
    SELECT report_id, device_id, max(end_ns) AS last_ns
    FROM (
        SELECT report_id, device_id, end_ns FROM kernel_rows
        WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
        UNION ALL
        SELECT report_id, device_id, end_ns FROM memcpy
        WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
        UNION ALL
        SELECT report_id, device_id, end_ns FROM memset
        WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
        UNION ALL
        SELECT report_id, device_id, end_ns FROM graph_executions
        WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
    )
    GROUP BY ALL
),
logged AS (SELECT DISTINCT report_id FROM power_samples),
target AS (
    SELECT r.report_id, r.session_start_utc_ns AS t0,
           greatest(coalesce(a.last_ns, 0), coalesce(s.last_ns, 0)) AS last_ns
    FROM reports AS r
    LEFT JOIN (SELECT report_id, max(last_ns) AS last_ns FROM devices GROUP BY ALL) AS a USING (report_id)
    LEFT JOIN (SELECT report_id, max(end_ns) AS last_ns FROM steps GROUP BY ALL) AS s USING (report_id)
    WHERE r.session_start_utc_ns IS NOT NULL AND ($report_id IS NULL OR r.report_id = $report_id)
      AND r.report_id NOT IN (SELECT report_id FROM logged)
),
logs AS (
    SELECT report_id AS power_report_id, device_id AS log_device, min(ts_utc_ns) AS lo, max(ts_utc_ns) AS hi,
           count(energy_j) = count(*) AS has_counter
    FROM power_samples GROUP BY ALL
),
-- each GPU of the report takes the log that covers most of the report's span (one with the
-- energy counter among equals); the GPUs meet the logs of their device id (a hash join, not a
-- reports x logs loop on the spans)
gpu_span AS MATERIALIZED (
    SELECT t.report_id, t.t0, t.last_ns, d.device_id, coalesce($power_device_id, d.device_id) AS log_device
    FROM target AS t
    JOIN (SELECT report_id, device_id FROM devices) AS d USING (report_id)
),
attached AS (
    SELECT t.report_id, t.t0, t.last_ns, t.device_id, l.power_report_id, l.log_device, l.has_counter
    FROM gpu_span AS t
    JOIN logs AS l ON l.log_device = t.log_device AND l.lo < t.t0 + t.last_ns AND l.hi > t.t0
    QUALIFY row_number() OVER (
        PARTITION BY t.report_id, t.device_id
        ORDER BY least(l.hi, t.t0 + t.last_ns) - greatest(l.lo, t.t0) DESC, l.has_counter DESC, l.power_report_id
    ) = 1
),
-- the labelled activity of the reports a power log covers only (the kernel scope's)
activity AS (
    SELECT a.* FROM nsa_gpu_activity($report_id) AS a WHERE a.report_id IN (SELECT report_id FROM attached)
),
points AS (
    SELECT a.report_id, a.device_id, a.power_report_id, a.has_counter,
           p.ts_utc_ns - a.t0 AS ts_ns, p.energy_j, coalesce(p.power_instant_w, p.power_w) AS watts,
           p.energy_j IS DISTINCT FROM lag(p.energy_j) OVER (
               PARTITION BY a.report_id, a.device_id ORDER BY p.ts_utc_ns) AS counter_moved
    FROM attached AS a
    JOIN power_samples AS p ON p.report_id = a.power_report_id AND p.device_id = a.log_device
),
-- two bases: the readings, each held until the next sample; the counter's increments between
-- its updates. `primary`: the one energy_j uses.
segs AS (
    SELECT * FROM (
        SELECT report_id, device_id, power_report_id, 'readings' AS basis, NOT has_counter AS "primary",
               ts_ns AS seg_start, lead(ts_ns) OVER w AS seg_end,
               watts * (lead(ts_ns) OVER w - ts_ns) / 1e9 AS seg_j
        FROM points
        WINDOW w AS (PARTITION BY report_id, device_id ORDER BY ts_ns)
        UNION ALL
        SELECT report_id, device_id, power_report_id, 'counter', true, ts_ns, lead(ts_ns) OVER c,
               lead(energy_j) OVER c - energy_j
        FROM points
        WHERE has_counter AND counter_moved
        WINDOW c AS (PARTITION BY report_id, device_id ORDER BY ts_ns)
    ) WHERE seg_end > seg_start AND seg_j IS NOT NULL
),
-- each series of intervals (a device's basis) numbered in time order: they do not overlap, so
-- what a window or an activity overlaps is a run of consecutive numbers, found by ASOF joins
-- on the intervals' starts (never a window x interval product per report)
numbered AS (
    SELECT *, dense_rank() OVER (ORDER BY report_id, device_id, basis) AS sid,
           row_number() OVER (PARTITION BY report_id, device_id, basis ORDER BY seg_start) AS idx
    FROM segs
),
seg AS (SELECT * FROM numbered WHERE "primary"),
span AS (
    SELECT report_id, min(seg_start) AS lo, max(seg_end) AS hi, min(power_report_id) AS power_report_id,
           CASE WHEN bool_and(basis = 'counter') THEN 'energy counter' ELSE 'power readings' END AS method
    FROM seg GROUP BY ALL
),
steady AS (SELECT * FROM nsa_steady($report_id)),
-- the windows: one row per instance; steps_in: the steps a run or step window holds
win AS (
    SELECT report_id, 'run' AS scope, 'report' AS name, 0::BIGINT AS start_ns, last_ns AS end_ns,
           (SELECT count(*) FROM steps AS s WHERE s.report_id = t.report_id) AS steps_in
    FROM target AS t
    UNION ALL
    SELECT report_id, 'run', 'steady', start_ns, end_ns, steady_steps FROM steady
    WHERE report_id IN (SELECT report_id FROM span)
    UNION ALL
    SELECT report_id, 'step', name, start_ns, end_ns, 1 FROM steps
    WHERE report_id IN (SELECT report_id FROM span)
    UNION ALL
    SELECT r.report_id, 'range', r.base_name, r.start_ns, r.end_ns, NULL FROM nvtx_ranges AS r
    ANTI JOIN steps AS s  -- the steps' own ranges are the step rows
        ON s.report_id = r.report_id AND s.start_ns = r.start_ns AND s.end_ns = r.end_ns AND s.name = r.name
    WHERE r.end_ns > r.start_ns AND r.report_id IN (SELECT report_id FROM span)
),
-- the window names numbered, so that the joins and groupings below carry integers
win_names AS (
    SELECT report_id, scope, name, row_number() OVER () AS wn FROM (SELECT DISTINCT report_id, scope, name FROM win)
),
-- each window against each series of its report: the interval holding its start (the last to
-- start at or before it) and, when the window reaches past that one, the intervals up to the
-- last starting before its end
probe AS (
    SELECT n.wn, w.start_ns, w.end_ns, x.sid
    FROM win AS w
    JOIN win_names AS n ON n.report_id = w.report_id AND n.scope = w.scope AND n.name IS NOT DISTINCT FROM w.name
    JOIN (SELECT DISTINCT report_id, sid FROM numbered) AS x ON x.report_id = w.report_id
),
win_first AS (
    SELECT p.*, s.idx AS i, s.seg_start AS i_start, s.seg_end AS i_end
    FROM probe AS p
    ASOF LEFT JOIN numbered AS s ON s.sid = p.sid AND p.start_ns >= s.seg_start
),
win_segs AS (
    SELECT wn, start_ns, end_ns, sid, i AS idx, i_start AS seg_start, i_end AS seg_end FROM win_first
    WHERE i IS NOT NULL AND end_ns <= i_end
    UNION ALL
    SELECT w.wn, w.start_ns, w.end_ns, w.sid, w.idx, s.seg_start, s.seg_end
    FROM (
        SELECT w.wn, w.start_ns, w.end_ns, w.sid, unnest(range(coalesce(w.i, 1), s.idx + 1)) AS idx
        FROM win_first AS w
        ASOF JOIN numbered AS s ON s.sid = w.sid AND w.end_ns > s.seg_start
        WHERE w.i IS NULL OR w.end_ns > w.i_end
    ) AS w
    JOIN numbered AS s USING (sid, idx)
),
-- per window name and power interval: the share of the interval its instances cover
cover AS (
    SELECT wn, sid, idx, sum((least(seg_end, end_ns) - greatest(seg_start, start_ns)) / (seg_end - seg_start)) AS f
    FROM win_segs
    WHERE seg_start < end_ns AND seg_end > start_ns
    GROUP BY ALL
),
win_energy AS (
    SELECT any_value(n.report_id) AS report_id, any_value(n.scope) AS scope, any_value(n.name) AS name,
           sum(s.seg_j * c.f) FILTER (WHERE s."primary") AS energy_j,
           sum(CASE WHEN c.f < 1 THEN s.seg_j * greatest(c.f, 1 - c.f) ELSE 0 END) FILTER (WHERE s."primary") AS error_j,
           count(*) FILTER (WHERE s."primary") AS samples,
           median(s.seg_end - s.seg_start) FILTER (WHERE s."primary") AS interval_ns,
           sum(s.seg_j * c.f) FILTER (WHERE s.basis = 'readings') AS readings_j
    FROM cover AS c
    JOIN numbered AS s USING (sid, idx)
    JOIN win_names AS n USING (wn)
    GROUP BY c.wn
),
windows AS (
    SELECT w.report_id, w.scope, w.name, min(w.start_ns) AS start_ns, max(w.end_ns) AS end_ns,
           sum(w.end_ns - w.start_ns) AS time_ns,
           sum(CASE WHEN sp.hi IS NULL THEN 0
                    ELSE greatest(0, least(w.end_ns, sp.hi) - greatest(w.start_ns, sp.lo)) END) AS covered_ns,
           CASE WHEN w.scope IN ('range', 'step') THEN count(*)
                WHEN w.name = 'steady' THEN max(w.steps_in) ELSE 1 END AS instances,
           CASE w.scope WHEN 'run' THEN max(w.steps_in) WHEN 'step' THEN count(*) END AS steps_in
    FROM win AS w
    LEFT JOIN span AS sp USING (report_id)
    GROUP BY w.report_id, w.scope, w.name
),
-- kernels: each interval's energy over the work running in it on its device, by time run
-- (the interval holding each activity's start; the few activities that reach past it, or start
-- in a hole of the log, meet the intervals up to the last starting before their end)
act_first AS (
    SELECT k.report_id, k.device_id, k.label, k.start_ns, k.end_ns,
           s.sid, s.idx AS i, s.seg_start, s.seg_end, s.seg_j
    FROM activity AS k
    ASOF LEFT JOIN seg AS s
        ON s.report_id = k.report_id AND s.device_id = k.device_id AND k.start_ns >= s.seg_start
),
act_segs AS (
    SELECT report_id, device_id, label, start_ns, end_ns, seg_start, seg_end, seg_j FROM act_first
    WHERE i IS NOT NULL AND end_ns <= seg_end
    UNION ALL
    SELECT a.report_id, a.device_id, a.label, a.start_ns, a.end_ns, s.seg_start, s.seg_end, s.seg_j
    FROM (
        SELECT a.report_id, a.device_id, a.label, a.start_ns, a.end_ns, l.sid,
               unnest(range(coalesce(a.i, 1), l.idx + 1)) AS idx
        FROM act_first AS a
        ASOF JOIN seg AS l ON l.report_id = a.report_id AND l.device_id = a.device_id AND a.end_ns > l.seg_start
        WHERE a.i IS NULL OR a.end_ns > a.seg_end
    ) AS a
    JOIN seg AS s USING (sid, idx)
),
pieces AS (
    SELECT report_id, device_id, label, seg_start, seg_j, seg_end - seg_start AS seg_ns,
           least(end_ns, seg_end) - greatest(start_ns, seg_start) AS o
    FROM act_segs
    WHERE seg_start < end_ns AND seg_end > start_ns
),
shares AS (
    SELECT report_id, device_id, label, seg_start, any_value(seg_j) AS seg_j, any_value(seg_ns) AS seg_ns,
           sum(o) / any_value(greatest(seg_ns, busy_ns)) AS share
    FROM (SELECT *, sum(o) OVER (PARTITION BY report_id, device_id, seg_start) AS busy_ns FROM pieces)
    GROUP BY ALL
),
kernel_energy AS (
    SELECT report_id, label AS name, sum(seg_j * share) AS energy_j,
           sum(CASE WHEN share < 1 THEN seg_j * greatest(share, 1 - share) ELSE 0 END) AS error_j,
           count(*) AS samples, median(seg_ns) AS interval_ns
    FROM shares GROUP BY ALL
),
-- the error of the idle remainder: intervals partly busy
idle_error AS (
    SELECT report_id, sum(CASE WHEN busy < 1 THEN seg_j * greatest(busy, 1 - busy) ELSE 0 END) AS error_j
    FROM (SELECT report_id, device_id, seg_start, any_value(seg_j) AS seg_j, sum(share) AS busy FROM shares GROUP BY ALL)
    GROUP BY ALL
),
kernel_runs AS (
    SELECT report_id, label AS name, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           sum(end_ns - start_ns) AS time_ns, count(*) AS instances
    FROM activity
    WHERE report_id IN (SELECT report_id FROM attached)
    GROUP BY ALL
),
kernel_out AS (
    SELECT k.report_id, 'kernel' AS scope, k.name, r.start_ns, r.end_ns, k.energy_j, k.error_j, k.samples,
           r.time_ns, r.time_ns AS covered_ns, r.instances, NULL::BIGINT AS steps_in,
           NULL::DOUBLE AS readings_j, k.interval_ns
    FROM kernel_energy AS k JOIN kernel_runs AS r USING (report_id, name)
),
run_out AS (
    SELECT w.report_id, w.scope, w.name, w.start_ns, w.end_ns, e.energy_j, e.error_j, coalesce(e.samples, 0) AS samples,
           w.time_ns, w.covered_ns, w.instances, w.steps_in, e.readings_j, e.interval_ns
    FROM windows AS w LEFT JOIN win_energy AS e USING (report_id, scope, name)
),
idle AS (
    SELECT r.report_id, 'kernel' AS scope, '(idle)' AS name, r.start_ns, r.end_ns,
           r.energy_j - coalesce(k.energy_j, 0) AS energy_j, r.error_j + coalesce(i.error_j, 0) AS error_j,
           r.samples, r.time_ns - coalesce(k.time_ns, 0) AS time_ns, r.covered_ns - coalesce(k.time_ns, 0) AS covered_ns,
           NULL::BIGINT AS instances, NULL::BIGINT AS steps_in, NULL::DOUBLE AS readings_j, r.interval_ns
    FROM run_out AS r
    LEFT JOIN (
        SELECT report_id, sum(energy_j) AS energy_j, sum(time_ns) AS time_ns FROM kernel_out GROUP BY ALL
    ) AS k USING (report_id)
    LEFT JOIN idle_error AS i USING (report_id)
    WHERE r.scope = 'run' AND r.name = 'report' AND r.report_id IN (SELECT report_id FROM span)
),
result AS (
    SELECT * FROM run_out
    UNION ALL SELECT * FROM kernel_out
    UNION ALL SELECT * FROM idle
)
SELECT r.report_id, r.scope, r.name, r.start_ns, r.end_ns, r.energy_j,
       r.energy_j / nullif(r.covered_ns, 0) * 1e9 AS avg_power_w,
       CAST(r.samples AS BIGINT) AS samples, r.error_j,
       r.covered_ns / nullif(r.time_ns, 0) AS coverage, CAST(r.instances AS BIGINT) AS instances,
       r.energy_j / nullif(r.instances, 0) AS energy_per_instance_j,
       r.energy_j / nullif(r.steps_in * $items_per_step, 0) AS energy_per_item_j,
       r.readings_j, CAST(r.interval_ns AS BIGINT) AS interval_ns,
       sp.power_report_id, coalesce(sp.method, 'no power log') AS method
FROM result AS r
LEFT JOIN span AS sp USING (report_id)
ORDER BY r.report_id, CASE r.scope WHEN 'run' THEN 1 WHEN 'step' THEN 2 WHEN 'range' THEN 3 ELSE 4 END,
         CASE WHEN r.scope = 'step' THEN r.start_ns END, r.energy_j DESC NULLS LAST, r.name
