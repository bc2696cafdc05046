-- NVTX ranges per report, domain and name: how many, how long (closed ranges only; ranges
-- never closed are counted in open_ranges and left out of every other column), and the GPU
-- time of the kernels launched inside them. Names are grouped without the per-call suffixes of
-- PyTorch's emit_nvtx (`aten::mm, seq = 7, op_id = 345` is counted as `aten::mm`; see
-- nvtx_ranges.base_name), so an op is one row, not one row per call; `names` says how many full
-- names a row folds, and nvtx_ranges.name keeps each of them.
-- A kernel belongs to a range when the CUDA API call that launched it (the cuda_api row with the
-- kernel's report_id, pid and correlation_id) started inside [range start, range end]; nested
-- ranges each count it. Two projections, by which thread made the call:
-- kernels / kernel_ns: the range's own thread (global_tid). nsys's definition (`nsys stats -r
-- nvtx_kern_sum`, formerly nvtxkernsum), and the right one for ranges pushed by the thread that
-- launches the work: a training loop's forward and optimizer phases, every emit_nvtx op range.
-- process_kernels / process_kernel_ns: any thread of the range's process (pid). The right one for
-- ranges around work that other threads launch: PyTorch runs backward on its autograd thread
-- while the `backward` range is on the main thread, so the same-thread columns show only the few
-- kernels the main thread launched itself. It over-counts when several threads of the process
-- run unrelated GPU work at the same time (everything they launch during the range is counted),
-- and an outer range on a worker thread takes in the main thread's launches too. Equal columns
-- mean no other thread of the process launched a kernel while the range was open.
-- The rows are worked out once per report, the first time this query runs (the table
-- nvtx_totals: where the ranges' names repeat, one aggregation over the export's ranges by their
-- raw name columns, the names looked up and folded once per distinct key after; where nearly every
-- range has a name of its own, as a sample of the export tells, the ranges named one by one and
-- summed by domain and base name; their kernels from running totals and ASOF joins, linear in
-- ranges + calls), without copying the ranges into nvtx_ranges.
-- reads nvtx_totals
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col domain VARCHAR: NVTX domain (NULL for the default domain).
-- col name VARCHAR: range name without per-call suffixes (nvtx_ranges.base_name).
-- col names BIGINT: distinct full range names (nvtx_ranges.name) folded into this row; 1 for most ranges.
-- col ranges BIGINT: closed ranges.
-- col open_ranges BIGINT: ranges with no end (not closed before the capture ended).
-- col total_ns BIGINT: summed range duration (ns).
-- col avg_ns DOUBLE: mean range duration (ns).
-- col median_ns DOUBLE: median range duration (ns).
-- col min_ns BIGINT: shortest range (ns).
-- col max_ns BIGINT: longest range (ns).
-- col kernels BIGINT: kernels launched inside the ranges by the ranges' own threads (as nsys counts).
-- col kernel_ns BIGINT: summed GPU time of those kernels (ns).
-- col process_kernels BIGINT: kernels launched inside the ranges by any thread of their process.
-- col process_kernel_ns BIGINT: summed GPU time of those kernels (ns).
SELECT
    report_id, domain, name, names, ranges, open_ranges, total_ns, avg_ns, median_ns, min_ns, max_ns,
    kernels, kernel_ns, process_kernels, process_kernel_ns
FROM nvtx_totals
WHERE ($report_id IS NULL OR report_id = $report_id)
ORDER BY report_id, total_ns DESC NULLS LAST, domain, name
