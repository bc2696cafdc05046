-- GPU busy and idle time per report and device, from interval unions (overlapping work, e.g.
-- concurrent streams, is counted once). span_ns runs from the first start to the last end of
-- any kernel, memcpy or memset on the device; any_busy_ns is the union of all three (memsets
-- count as busy); idle_ns = span_ns - any_busy_ns; copy_only_ns is memcpy time during which no
-- kernel ran (union of kernels and copies minus the kernel union), i.e. copies not hidden
-- behind compute. Computed in one sorted pass per device (running max of earlier ends).
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col span_ns BIGINT: first start to last end of GPU activity on the device (ns).
-- col kernel_busy_ns BIGINT: time at least one kernel ran (ns).
-- col copy_busy_ns BIGINT: time at least one memcpy ran (ns).
-- col any_busy_ns BIGINT: time any kernel, memcpy or memset ran (ns).
-- col idle_ns BIGINT: span_ns - any_busy_ns: nothing ran (ns).
-- col copy_only_ns BIGINT: a memcpy ran and no kernel did (ns).
WITH a AS (
    -- each class's end, NULL outside the class, computed once before the window
    SELECT
        report_id,
        device_id,
        start_ns,
        end_ns,
        CASE WHEN kind = 'kernel' THEN end_ns END AS k_end,
        CASE WHEN kind = 'memcpy' THEN end_ns END AS c_end,
        CASE WHEN kind <> 'memset' THEN end_ns END AS kc_end
    FROM nsa_gpu_activity($report_id)
),
-- Three running maxima, not four: the latest earlier end among kernels and copies is the larger
-- of the two (greatest skips NULLs). Rows are ordered by start only: rows starting together add
-- max(their ends) - start to a union in any order, and a sort on one key is cheaper (1.31M rows:
-- 0.26 s -> 0.20 s on 2 cores).
w AS (
    SELECT
        *,
        max(k_end) OVER prev AS k_prev,
        max(c_end) OVER prev AS c_prev,
        max(end_ns) OVER prev AS all_prev
    FROM a
    WINDOW prev AS (
        PARTITION BY report_id, device_id ORDER BY start_ns
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    )
),
d AS (
    SELECT
        report_id,
        device_id,
        max(end_ns) - min(start_ns) AS span_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, k_prev)) FILTER (WHERE k_end IS NOT NULL), 0) AS kernel_busy_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, c_prev)) FILTER (WHERE c_end IS NOT NULL), 0) AS copy_busy_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, greatest(k_prev, c_prev))) FILTER (WHERE kc_end IS NOT NULL), 0)
            AS kc_busy_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, all_prev)), 0) AS any_busy_ns
    FROM w
    GROUP BY ALL
)
SELECT
    report_id,
    device_id,
    CAST(span_ns AS BIGINT) AS span_ns,
    CAST(kernel_busy_ns AS BIGINT) AS kernel_busy_ns,
    CAST(copy_busy_ns AS BIGINT) AS copy_busy_ns,
    CAST(any_busy_ns AS BIGINT) AS any_busy_ns,
    CAST(span_ns - any_busy_ns AS BIGINT) AS idle_ns,
    CAST(kc_busy_ns - kernel_busy_ns AS BIGINT) AS copy_only_ns
FROM d
ORDER BY report_id, device_id
