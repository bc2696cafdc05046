-- Source hot spots per ncu kernel, from a source-page export (`ncu -i REPORT --csv --page source`):
-- the CUDA source lines with the most warp stall samples, or the SASS instructions when the
-- kernel has no line info (`--print-source sass`, or a build without -lineinfo), each with the
-- stall reason that holds most of its samples. share_pct is of all samples of the kernel's lines
-- (or instructions); rows without samples, and kernels without any, are left out.
-- reads ncu_kernels, ncu_source, ncu_source_stalls
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param top_n INTEGER = 5: keep the N rows with the most samples per kernel; all when NULL.
-- col report_id INTEGER: workspace report id.
-- col launch_id INTEGER: the kernel's 0-based position in the source export.
-- col name VARCHAR: kernel name as ncu wrote it.
-- col rank BIGINT: 1 for the line (instruction) with the most samples in the kernel.
-- col granularity VARCHAR: 'line' (a CUDA source line) or 'sass' (an instruction).
-- col file VARCHAR: source file; NULL without line info.
-- col line INTEGER: source line number; NULL without line info.
-- col address VARCHAR: instruction address (granularity 'sass'), as ncu wrote it.
-- col code VARCHAR: the CUDA source of the line, or the SASS instruction.
-- col samples BIGINT: warp stall samples on the row (sample).
-- col share_pct DOUBLE: the row's share of the kernel's samples (%).
-- col samples_not_issued BIGINT: samples of warps that were not issuing (sample).
-- col top_reason VARCHAR: stall reason with the most samples on the row (long_sb, wait, ...).
-- col top_reason_samples BIGINT: samples of that reason (sample).
WITH kernel_granularity AS (
    -- a kernel with line rows is ranked by line, else by instruction
    SELECT report_id, launch_id, CASE WHEN bool_or(granularity = 'line') THEN 'line' ELSE 'sass' END AS granularity
    FROM ncu_source
    WHERE ($report_id IS NULL OR report_id = $report_id)
    GROUP BY ALL
),
ranked AS (
    SELECT
        s.*,
        row_number() OVER (
            PARTITION BY s.report_id, s.launch_id ORDER BY s.samples DESC NULLS LAST, s.seq
        ) AS rank,
        100.0 * s.samples / nullif(sum(s.samples) OVER (PARTITION BY s.report_id, s.launch_id), 0) AS share_pct
    FROM ncu_source AS s
    JOIN kernel_granularity AS k USING (report_id, launch_id, granularity)
    WHERE s.samples > 0
),
top_reason AS (
    SELECT
        report_id,
        launch_id,
        seq,
        arg_max(reason, (samples, reason)) AS reason,
        max(samples) AS samples
    FROM ncu_source_stalls
    WHERE ($report_id IS NULL OR report_id = $report_id)
    GROUP BY ALL
)
SELECT
    r.report_id,
    r.launch_id,
    k.name,
    r.rank,
    r.granularity,
    r.file,
    r.line,
    r.address,
    CASE WHEN r.granularity = 'line' THEN r.source ELSE r.sass END AS code,
    r.samples,
    r.share_pct,
    r.samples_not_issued,
    t.reason AS top_reason,
    t.samples AS top_reason_samples
FROM ranked AS r
LEFT JOIN top_reason AS t USING (report_id, launch_id, seq)
LEFT JOIN ncu_kernels AS k USING (report_id, launch_id)
WHERE ($top_n IS NULL OR r.rank <= $top_n)
ORDER BY r.report_id, r.launch_id, r.rank
