-- Kernel launch statistics per kernel name, as Holistic Trace Analysis computes them
-- (get_cuda_kernel_launch_stats): each kernel joined to the CUDA API call that launched it (same
-- report_id, pid and correlation_id); cpu_ns is the launch call's duration, gpu_ns the kernel's,
-- and the launch delay is kernel start - launch call end, 0 when negative: how long the work
-- waited in the stream's queue after the host issued it. Short kernels (gpu_ns < cpu_ns) are
-- launch-bound: the host spends longer issuing them than the GPU running them. Kernels whose
-- launch call is not in the trace, or that cannot be placed on a timeline (no start, or an end
-- before it), are left out. The launch calls are those the stored timeline (gpu_timeline) keeps
-- with each kernel: the earliest start and latest end of the calls with its key.
-- reads gpu_timeline, gpu_launches, kernel_names
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param delay_cutoff_ns BIGINT = 100000: launch delays longer than this are outliers (HTA's launch_delay_cutoff, 100 us) (ns).
-- col report_id INTEGER: workspace report id.
-- col name VARCHAR: kernel name.
-- col launches BIGINT: kernels of this name with their launch call.
-- col avg_cpu_ns DOUBLE: mean launch call duration (ns).
-- col avg_gpu_ns DOUBLE: mean kernel duration (ns).
-- col avg_delay_ns DOUBLE: mean launch delay (ns).
-- col median_delay_ns DOUBLE: median launch delay (ns).
-- col max_delay_ns BIGINT: longest launch delay (ns).
-- col short_kernels BIGINT: kernels shorter than their launch call (launch-bound).
-- col delay_outliers BIGINT: kernels whose launch delay exceeds delay_cutoff_ns.
WITH k AS (
    SELECT report_id, name_id, api_end_ns - api_start_ns AS cpu_ns, duration_ns AS gpu_ns,
           greatest(start_ns - api_end_ns, 0) AS delay_ns
    FROM gpu_timeline
    WHERE ($report_id IS NULL OR report_id = $report_id) AND kind = 'kernel' AND api_calls > 0
)
SELECT
    k.report_id,
    coalesce(any_value(n.name), any_value(n.short_name)) AS name,
    count(*) AS launches,
    avg(cpu_ns) AS avg_cpu_ns,
    avg(gpu_ns) AS avg_gpu_ns,
    avg(delay_ns) AS avg_delay_ns,
    median(delay_ns) AS median_delay_ns,
    max(delay_ns) AS max_delay_ns,
    count(*) FILTER (WHERE gpu_ns < cpu_ns) AS short_kernels,
    count(*) FILTER (WHERE delay_ns > $delay_cutoff_ns) AS delay_outliers
FROM k LEFT JOIN kernel_names AS n USING (report_id, name_id)
GROUP BY k.report_id, k.name_id
ORDER BY k.report_id, sum(delay_ns) DESC, launches DESC, name
