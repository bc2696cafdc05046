-- Roofline per ncu kernel launch and precision, as ncu's roofline charts draw it. The formulas
-- are those of the SpeedOfLight_RooflineChart and SpeedOfLight_Hierarchical{Single,Double,Half,
-- Tensor}RooflineChart sections of `--set full` (docs/roofline.md cites them). Work per second:
-- fp64/fp32 = (add + mul + 2 fma) thread instructions per cycle x SM frequency; fp16 = (2 hadd +
-- 2 hmul + 4 hfma) per cycle x SM frequency (packed half2); tensor = one row per tensor-core
-- path with work (sm__ops_path_tensor_*, the most specific paths the export has: op_* on Hopper
-- and later, else src_*), its operations per cycle x SM frequency. Traffic per level: DRAM
-- dram__bytes.sum.per_second; L2 32 x lts__lts2xbar_cycles_active.sum.per_second; L1 128 x
-- l1tex__lsu_writeback_active_mem_lgds (mem_lg before Hopper) .sum.per_second. Peaks: peak per
-- cycle x the unit's measured frequency, the DRAM peak from the device attributes when the
-- export lacks ncu's. A launch with no floating-point or tensor work (or without the counters)
-- gets one memory-only row (precision NULL): its bandwidths and roof_pct, no FLOP columns. The
-- kernel's position under the roof is the utilisation of its busiest resource: roof_pct =
-- max(flops / peak_flops, bytes_per_s / peak_bytes_per_s at each level); that resource is the
-- limiter, and a level is memory bound when its intensity is left of its ridge point.
-- reads ncu_kernels, ncu_metrics
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col launch_id INTEGER: ncu launch ID within the report.
-- col name VARCHAR: kernel name as ncu wrote it.
-- col duration_ns BIGINT: kernel duration, gpu__time_duration.sum (ns); for a summary row, the Average over its invocations.
-- col invocations BIGINT: launches a `--print-summary` row aggregates (its values are Averages); NULL for per-launch exports.
-- col precision VARCHAR: 'fp64', 'fp32', 'fp16' or 'tensor'; NULL for the memory-only row of a launch without floating-point work.
-- col tensor_path VARCHAR: the tensor-core path of a 'tensor' row, as ncu names it after sm__ops_path_tensor_ (op_hgmma_src_bf16_dst_fp32_sparsity_off); NULL otherwise.
-- col flops DOUBLE: achieved work (FLOP/s; tensor rows: tensor operations per second, 2 per multiply-add).
-- col flop_count DOUBLE: work done in the launch, flops x duration (FLOP).
-- col peak_flops DOUBLE: peak work at the SM frequency ncu measured (FLOP/s), the roof's flat part.
-- col peak_flops_max_clock DOUBLE: the same peak at the device's maximum SM clock, device__attribute_clock_rate (FLOP/s); the kernel ran at the measured one (ncu locks clocks to base by default).
-- col compute_pct DOUBLE: flops as a share of peak_flops (% of peak).
-- col dram_bytes_per_s DOUBLE: achieved DRAM bandwidth, dram__bytes.sum.per_second (byte/s).
-- col l2_bytes_per_s DOUBLE: achieved L2 bandwidth, 32 x lts__lts2xbar_cycles_active.sum.per_second (byte/s).
-- col l1_bytes_per_s DOUBLE: achieved L1 bandwidth (global/local/distributed shared), 128 x l1tex__lsu_writeback_active_mem_lgds.sum.per_second (byte/s).
-- col dram_bytes DOUBLE: bytes moved to and from DRAM in the launch, dram_bytes_per_s x duration (byte).
-- col l2_bytes DOUBLE: bytes L2 delivered in the launch, l2_bytes_per_s x duration (byte).
-- col l1_bytes DOUBLE: bytes L1 wrote back in the launch, l1_bytes_per_s x duration (byte).
-- col peak_dram_bytes_per_s DOUBLE: DRAM peak, dram__bytes.sum.peak_sustained x dram__cycles_elapsed.avg.per_second, else 2 x memory clock x bus width from the device attributes (byte/s).
-- col peak_l2_bytes_per_s DOUBLE: L2 peak, 32 x lts__lts2xbar_cycles_active.sum.peak_sustained x lts__cycles_elapsed.avg.per_second (byte/s).
-- col peak_l1_bytes_per_s DOUBLE: L1 peak, 128 x l1tex__lsu_writeback_active_mem_lgds.sum.peak_sustained x l1tex__cycles_elapsed.avg.per_second (byte/s).
-- col dram_intensity DOUBLE: arithmetic intensity against DRAM, flops / dram_bytes_per_s (FLOP/byte).
-- col l2_intensity DOUBLE: arithmetic intensity against L2 (FLOP/byte).
-- col l1_intensity DOUBLE: arithmetic intensity against L1 (FLOP/byte).
-- col dram_ridge DOUBLE: ridge point of the DRAM roof, peak_flops / peak_dram_bytes_per_s (FLOP/byte).
-- col l2_ridge DOUBLE: ridge point of the L2 roof (FLOP/byte).
-- col l1_ridge DOUBLE: ridge point of the L1 roof (FLOP/byte).
-- col dram_bound VARCHAR: 'memory' when dram_intensity is below dram_ridge, else 'compute' (where ncu's DRAM chart puts the point).
-- col l2_bound VARCHAR: the same against the L2 roof.
-- col l1_bound VARCHAR: the same against the L1 roof.
-- col limiter VARCHAR: the resource closest to its peak, the roof the kernel sits under: 'compute', 'dram', 'l2' or 'l1'.
-- col bound VARCHAR: 'compute' when the limiter is compute, else 'memory'.
-- col roof_pct DOUBLE: how close the launch came to its roof: the limiter's utilisation (% of roof).
-- col attainable_flops DOUBLE: the roof at this launch's intensities, min(peak_flops, intensity x peak bandwidth at each level) = flops / roof_pct (FLOP/s).
-- col time_at_roof_ns DOUBLE: the duration of the same work and traffic at the roof, duration x roof_pct / 100 (ns).
WITH m AS (
    SELECT
        report_id,
        launch_id,
        max(value) FILTER (WHERE metric_name = 'gpu__time_duration.sum') AS duration_ns,
        max(value) FILTER (WHERE metric_name = 'sm__cycles_elapsed.avg.per_second') AS sm_hz,
        max(value) FILTER (WHERE metric_name = 'smsp__cycles_elapsed.avg.per_second') AS smsp_hz,
        max(value) FILTER (WHERE metric_name = 'dram__cycles_elapsed.avg.per_second') AS dram_hz,
        max(value) FILTER (WHERE metric_name = 'lts__cycles_elapsed.avg.per_second') AS lts_hz,
        max(value) FILTER (WHERE metric_name = 'l1tex__cycles_elapsed.avg.per_second') AS l1_hz,
        -- device attributes: kHz and bits, as the CUDA driver reports them
        max(value) FILTER (WHERE metric_name = 'device__attribute_clock_rate') * 1e3 AS max_sm_hz,
        max(value) FILTER (WHERE metric_name = 'device__attribute_memory_clock_rate') * 1e3 AS mem_hz,
        max(value) FILTER (WHERE metric_name = 'device__attribute_global_memory_bus_width') AS bus_bits,
        max(value) FILTER (WHERE metric_name = 'dram__bytes.sum.per_second') AS dram_bps,
        max(value) FILTER (WHERE metric_name = 'dram__bytes.sum.peak_sustained') AS dram_peak_per_cycle,
        32 * max(value) FILTER (WHERE metric_name = 'lts__lts2xbar_cycles_active.sum.per_second') AS l2_bps,
        32 * max(value) FILTER (WHERE metric_name = 'lts__lts2xbar_cycles_active.sum.peak_sustained') AS l2_peak_per_cycle,
        -- L1 writeback: _mem_lgds from Hopper on, _mem_lg on Turing..Ada, unsuffixed before
        128 * coalesce(
            max(value) FILTER (WHERE metric_name = 'l1tex__lsu_writeback_active_mem_lgds.sum.per_second'),
            max(value) FILTER (WHERE metric_name = 'l1tex__lsu_writeback_active_mem_lg.sum.per_second'),
            max(value) FILTER (WHERE metric_name = 'l1tex__lsu_writeback_active.sum.per_second')
        ) AS l1_bps,
        128 * coalesce(
            max(value) FILTER (WHERE metric_name = 'l1tex__lsu_writeback_active_mem_lgds.sum.peak_sustained'),
            max(value) FILTER (WHERE metric_name = 'l1tex__lsu_writeback_active_mem_lg.sum.peak_sustained'),
            max(value) FILTER (WHERE metric_name = 'l1tex__lsu_writeback_active.sum.peak_sustained')
        ) AS l1_peak_per_cycle,
        max(value) FILTER (WHERE metric_name = 'smsp__sass_thread_inst_executed_op_dadd_pred_on.sum.per_cycle_elapsed') AS dadd,
        max(value) FILTER (WHERE metric_name = 'smsp__sass_thread_inst_executed_op_dmul_pred_on.sum.per_cycle_elapsed') AS dmul,
        max(value) FILTER (WHERE metric_name = 'smsp__sass_thread_inst_executed_op_dfma_pred_on.sum.per_cycle_elapsed') AS dfma,
        max(value) FILTER (WHERE metric_name = 'smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed') AS fadd,
        max(value) FILTER (WHERE metric_name = 'smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed') AS fmul,
        max(value) FILTER (WHERE metric_name = 'smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed') AS ffma,
        max(value) FILTER (WHERE metric_name = 'smsp__sass_thread_inst_executed_op_hadd_pred_on.sum.per_cycle_elapsed') AS hadd,
        max(value) FILTER (WHERE metric_name = 'smsp__sass_thread_inst_executed_op_hmul_pred_on.sum.per_cycle_elapsed') AS hmul,
        max(value) FILTER (WHERE metric_name = 'smsp__sass_thread_inst_executed_op_hfma_pred_on.sum.per_cycle_elapsed') AS hfma,
        max(value) FILTER (WHERE metric_name = 'sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained') AS dfma_peak,
        max(value) FILTER (WHERE metric_name = 'sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained') AS ffma_peak,
        max(value) FILTER (WHERE metric_name = 'sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained') AS hfma_peak
    FROM ncu_metrics
    WHERE ($report_id IS NULL OR report_id = $report_id)
    GROUP BY ALL
),
-- tensor-core paths: sm__ops_path_tensor_<path>.sum.per_cycle_elapsed / .sum.peak_sustained
tensor_metrics AS (
    SELECT
        report_id,
        launch_id,
        regexp_extract(metric_name, '^sm__ops_path_tensor_([a-z0-9_]+)\.sum\.', 1) AS tensor_path,
        max(value) FILTER (WHERE suffix(metric_name, '.sum.per_cycle_elapsed')) AS per_cycle,
        max(value) FILTER (WHERE suffix(metric_name, '.sum.peak_sustained')) AS peak_per_cycle
    FROM ncu_metrics
    WHERE ($report_id IS NULL OR report_id = $report_id)
      AND metric_name LIKE 'sm\_\_ops\_path\_tensor\_%' ESCAPE '\'
      AND (suffix(metric_name, '.sum.per_cycle_elapsed') OR suffix(metric_name, '.sum.peak_sustained'))
    GROUP BY ALL
),
-- op_* paths (Hopper on) split the src_* paths by instruction and sparsity: use them when the
-- launch has them, so no work is counted twice
tensor_paths AS (
    SELECT
        *,
        bool_or(starts_with(tensor_path, 'op_') AND per_cycle IS NOT NULL)
            OVER (PARTITION BY report_id, launch_id) AS has_op_paths
    FROM tensor_metrics
),
work AS (
    SELECT report_id, launch_id, 'fp64' AS precision, NULL AS tensor_path,
           (coalesce(dadd, 0) + coalesce(dmul, 0) + 2 * coalesce(dfma, 0)) * coalesce(smsp_hz, sm_hz) AS flops,
           2 * dfma_peak AS peak_per_cycle
    FROM m WHERE coalesce(dadd, 0) + coalesce(dmul, 0) + coalesce(dfma, 0) > 0
    UNION ALL
    SELECT report_id, launch_id, 'fp32', NULL,
           (coalesce(fadd, 0) + coalesce(fmul, 0) + 2 * coalesce(ffma, 0)) * coalesce(smsp_hz, sm_hz),
           2 * ffma_peak
    FROM m WHERE coalesce(fadd, 0) + coalesce(fmul, 0) + coalesce(ffma, 0) > 0
    UNION ALL
    SELECT report_id, launch_id, 'fp16', NULL,
           (2 * coalesce(hadd, 0) + 2 * coalesce(hmul, 0) + 4 * coalesce(hfma, 0)) * coalesce(smsp_hz, sm_hz),
           4 * hfma_peak
    FROM m WHERE coalesce(hadd, 0) + coalesce(hmul, 0) + coalesce(hfma, 0) > 0
    UNION ALL
    SELECT t.report_id, t.launch_id, 'tensor', t.tensor_path, t.per_cycle * coalesce(m.sm_hz, m.smsp_hz), t.peak_per_cycle
    FROM tensor_paths AS t JOIN m USING (report_id, launch_id)
    WHERE t.per_cycle > 0 AND starts_with(t.tensor_path, 'op_') = t.has_op_paths
),
-- every launch gets its work rows, or one memory-only row when it has none
rows_ AS (
    SELECT k.report_id, k.launch_id, k.name, k.invocations, w.precision, w.tensor_path, w.flops,
           w.peak_per_cycle
    FROM ncu_kernels AS k
    LEFT JOIN work AS w USING (report_id, launch_id)
    WHERE ($report_id IS NULL OR k.report_id = $report_id)
),
levels AS (
    SELECT
        r.*,
        m.duration_ns,
        r.peak_per_cycle * coalesce(m.sm_hz, m.smsp_hz) AS peak_flops,
        r.peak_per_cycle * m.max_sm_hz AS peak_flops_max_clock,
        m.dram_bps,
        m.l2_bps,
        m.l1_bps,
        coalesce(m.dram_peak_per_cycle * m.dram_hz, 2 * m.mem_hz * m.bus_bits / 8) AS peak_dram_bps,
        m.l2_peak_per_cycle * m.lts_hz AS peak_l2_bps,
        m.l1_peak_per_cycle * m.l1_hz AS peak_l1_bps
    FROM rows_ AS r
    LEFT JOIN m USING (report_id, launch_id)
),
utilisation AS (
    SELECT
        *,
        flops / nullif(peak_flops, 0) AS u_compute,
        dram_bps / nullif(peak_dram_bps, 0) AS u_dram,
        l2_bps / nullif(peak_l2_bps, 0) AS u_l2,
        l1_bps / nullif(peak_l1_bps, 0) AS u_l1
    FROM levels
),
roof AS (
    SELECT *, greatest(u_compute, u_dram, u_l2, u_l1) AS u_roof FROM utilisation
)
SELECT
    report_id,
    launch_id,
    name,
    CAST(round(duration_ns) AS BIGINT) AS duration_ns,
    invocations,
    precision,
    tensor_path,
    flops,
    flops * duration_ns * 1e-9 AS flop_count,
    peak_flops,
    peak_flops_max_clock,
    100 * u_compute AS compute_pct,
    dram_bps AS dram_bytes_per_s,
    l2_bps AS l2_bytes_per_s,
    l1_bps AS l1_bytes_per_s,
    dram_bps * duration_ns * 1e-9 AS dram_bytes,
    l2_bps * duration_ns * 1e-9 AS l2_bytes,
    l1_bps * duration_ns * 1e-9 AS l1_bytes,
    peak_dram_bps AS peak_dram_bytes_per_s,
    peak_l2_bps AS peak_l2_bytes_per_s,
    peak_l1_bps AS peak_l1_bytes_per_s,
    flops / nullif(dram_bps, 0) AS dram_intensity,
    flops / nullif(l2_bps, 0) AS l2_intensity,
    flops / nullif(l1_bps, 0) AS l1_intensity,
    peak_flops / nullif(peak_dram_bps, 0) AS dram_ridge,
    peak_flops / nullif(peak_l2_bps, 0) AS l2_ridge,
    peak_flops / nullif(peak_l1_bps, 0) AS l1_ridge,
    CASE WHEN u_compute IS NULL OR u_dram IS NULL THEN NULL WHEN u_compute < u_dram THEN 'memory' ELSE 'compute' END AS dram_bound,
    CASE WHEN u_compute IS NULL OR u_l2 IS NULL THEN NULL WHEN u_compute < u_l2 THEN 'memory' ELSE 'compute' END AS l2_bound,
    CASE WHEN u_compute IS NULL OR u_l1 IS NULL THEN NULL WHEN u_compute < u_l1 THEN 'memory' ELSE 'compute' END AS l1_bound,
    CASE
        WHEN u_roof IS NULL THEN NULL
        WHEN u_compute = u_roof THEN 'compute'
        WHEN u_dram = u_roof THEN 'dram'
        WHEN u_l2 = u_roof THEN 'l2'
        ELSE 'l1'
    END AS limiter,
    CASE WHEN u_roof IS NULL THEN NULL WHEN u_compute = u_roof THEN 'compute' ELSE 'memory' END AS bound,
    100 * u_roof AS roof_pct,
    flops / nullif(u_roof, 0) AS attainable_flops,
    duration_ns * u_roof AS time_at_roof_ns
FROM roof
ORDER BY report_id, launch_id, precision NULLS LAST, tensor_path
