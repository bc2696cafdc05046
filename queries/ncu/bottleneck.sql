-- What each ncu kernel launch is bound by, beneath the two speed-of-light percentages: which
-- memory level is busiest and which pipe. ncu's Memory Throughput
-- (gpu__compute_memory_throughput) is the busiest of L1/TEX, L2 and DRAM, not DRAM's share, and
-- its Compute (SM) Throughput is the busiest of the SM's pipes and issue slots; a kernel at the
-- tensor-pipe peak can show a higher Memory Throughput than Compute from the shared memory that
-- feeds its tensor cores. Levels: DRAM gpu__dram_throughput (dram__throughput in older ncu), L2
-- lts__throughput, L1/TEX l1tex__throughput (elapsed; the details page prints the active-cycles
-- one), shared memory l1tex__data_pipe_lsu_wavefronts_mem_shared (a part of L1/TEX, named when
-- it makes at least 90% of it). Pipes: sm__pipe_<p>_cycles_active and
-- sm__inst_executed_pipe_<p>, % of peak sustained elapsed, the larger of the two per pipe;
-- tensor_* sub-pipes count as `tensor`, fmaheavy / fmalite / fma_type_* as `fma`, and the
-- `shared` pipe (fp16 and tensor work together) is left out. A column is NULL when the export
-- lacks its metrics (details pages have no pipe metrics; `--metrics` exports may have none).
-- reads ncu_kernels, ncu_metrics
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col launch_id INTEGER: ncu launch ID within the report.
-- col name VARCHAR: kernel name as ncu wrote it.
-- col duration_ns BIGINT: kernel duration, gpu__time_duration.sum (ns); for a summary row, the Average over its invocations.
-- col invocations BIGINT: launches a `--print-summary` row aggregates (its values are Averages); NULL for per-launch exports.
-- col compute_pct DOUBLE: Compute (SM) Throughput, sm__throughput.avg.pct_of_peak_sustained_elapsed (% of peak).
-- col memory_pct DOUBLE: Memory Throughput, gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed: the busiest memory unit (% of peak).
-- col dram_pct DOUBLE: DRAM throughput, gpu__dram_throughput (or dram__throughput).avg.pct_of_peak_sustained_elapsed (% of peak).
-- col l2_pct DOUBLE: L2 throughput, lts__throughput.avg.pct_of_peak_sustained_elapsed (% of peak).
-- col l1_pct DOUBLE: L1/TEX throughput, l1tex__throughput.avg.pct_of_peak_sustained_elapsed, else _active (% of peak).
-- col shared_pct DOUBLE: shared-memory wavefronts, l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed (% of peak).
-- col memory_level VARCHAR: the busiest level: 'dram', 'l2', 'l1' or 'shared' (L1/TEX busiest and shared memory at least 90% of it); NULL without level metrics.
-- col memory_level_pct DOUBLE: that level's throughput (% of peak).
-- col tensor_pct DOUBLE: tensor pipe, the busiest sm__pipe_tensor*_cycles_active / sm__inst_executed_pipe_tensor* (% of peak).
-- col fma_pct DOUBLE: FMA pipe (FP32 multiply-add), sm__pipe_fma_cycles_active / sm__inst_executed_pipe_fma (% of peak).
-- col pipe VARCHAR: the busiest pipe (of pipes tied, the last by name): 'tensor', 'fma', 'alu', 'fp64', 'lsu', 'xu', ...; NULL without pipe metrics.
-- col pipe_pct DOUBLE: that pipe's utilisation (% of peak).
WITH picked AS (
    SELECT report_id, launch_id, metric_name, value
    FROM ncu_metrics
    WHERE ($report_id IS NULL OR report_id = $report_id)
      AND value IS NOT NULL
      AND (metric_name IN (
              'gpu__time_duration.sum',
              'sm__throughput.avg.pct_of_peak_sustained_elapsed',
              'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed',
              'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed',
              'dram__throughput.avg.pct_of_peak_sustained_elapsed',
              'lts__throughput.avg.pct_of_peak_sustained_elapsed',
              'l1tex__throughput.avg.pct_of_peak_sustained_elapsed',
              'l1tex__throughput.avg.pct_of_peak_sustained_active',
              'l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed')
           OR metric_name LIKE 'sm\_\_pipe\_%\_cycles\_active.avg.pct\_of\_peak\_sustained\_elapsed' ESCAPE '\'
           OR metric_name LIKE 'sm\_\_inst\_executed\_pipe\_%.avg.pct\_of\_peak\_sustained\_elapsed' ESCAPE '\')
),
m AS (
    SELECT
        report_id,
        launch_id,
        max(value) FILTER (WHERE metric_name = 'gpu__time_duration.sum') AS duration_ns,
        max(value) FILTER (WHERE metric_name = 'sm__throughput.avg.pct_of_peak_sustained_elapsed') AS compute_pct,
        max(value) FILTER (
            WHERE metric_name = 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed'
        ) AS memory_pct,
        coalesce(
            max(value) FILTER (WHERE metric_name = 'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed'),
            max(value) FILTER (WHERE metric_name = 'dram__throughput.avg.pct_of_peak_sustained_elapsed')
        ) AS dram_pct,
        max(value) FILTER (WHERE metric_name = 'lts__throughput.avg.pct_of_peak_sustained_elapsed') AS l2_pct,
        coalesce(
            max(value) FILTER (WHERE metric_name = 'l1tex__throughput.avg.pct_of_peak_sustained_elapsed'),
            max(value) FILTER (WHERE metric_name = 'l1tex__throughput.avg.pct_of_peak_sustained_active')
        ) AS l1_pct,
        max(value) FILTER (
            WHERE metric_name = 'l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed'
        ) AS shared_pct
    FROM picked
    GROUP BY ALL
),
pipes AS (
    SELECT report_id, launch_id, pipe, max(value) AS pct
    FROM (
        SELECT
            report_id,
            launch_id,
            value,
            regexp_replace(
                regexp_replace(
                    regexp_extract(metric_name, '^sm__pipe_([a-z0-9_]+)_cycles_active\.avg', 1)
                    || regexp_extract(metric_name, '^sm__inst_executed_pipe_([a-z0-9_]+)\.avg', 1),
                    '^tensor.*$', 'tensor'),
                '^fma.*$', 'fma') AS pipe
        FROM picked
        WHERE metric_name LIKE 'sm\_\_%pipe\_%' ESCAPE '\'
    )
    WHERE pipe <> '' AND pipe <> 'shared'
    GROUP BY ALL
),
busiest_pipe AS (
    SELECT
        report_id,
        launch_id,
        arg_max(pipe, (pct, pipe)) AS pipe,  -- ties: the same pipe every run
        max(pct) AS pipe_pct,
        max(pct) FILTER (WHERE pipe = 'tensor') AS tensor_pct,
        max(pct) FILTER (WHERE pipe = 'fma') AS fma_pct
    FROM pipes
    GROUP BY ALL
),
levels AS (
    SELECT
        *,
        greatest(dram_pct, l2_pct, l1_pct) AS memory_level_pct,
        CASE
            WHEN greatest(dram_pct, l2_pct, l1_pct) IS NULL THEN NULL
            WHEN dram_pct = greatest(dram_pct, l2_pct, l1_pct) THEN 'dram'
            WHEN l2_pct = greatest(dram_pct, l2_pct, l1_pct) THEN 'l2'
            WHEN shared_pct >= 0.9 * l1_pct THEN 'shared'
            ELSE 'l1'
        END AS memory_level
    FROM m
)
SELECT
    k.report_id,
    k.launch_id,
    k.name,
    CAST(round(l.duration_ns) AS BIGINT) AS duration_ns,
    k.invocations,
    l.compute_pct,
    l.memory_pct,
    l.dram_pct,
    l.l2_pct,
    l.l1_pct,
    l.shared_pct,
    l.memory_level,
    CASE WHEN l.memory_level = 'shared' THEN l.shared_pct ELSE l.memory_level_pct END AS memory_level_pct,
    p.tensor_pct,
    p.fma_pct,
    p.pipe,
    p.pipe_pct
FROM ncu_kernels AS k
LEFT JOIN levels AS l USING (report_id, launch_id)
LEFT JOIN busiest_pipe AS p USING (report_id, launch_id)
WHERE ($report_id IS NULL OR k.report_id = $report_id)
ORDER BY k.report_id, k.launch_id
