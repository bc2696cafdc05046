-- Where the host spent its CUDA API time during start-up, per report and category: the calls
-- that began before the steady state (nsa_steady: the first steady step) in module loading,
-- memory allocation, CUDA graph instantiation, context creation, or waiting for the GPU
-- (nsa_blocking_call). Calls in none of these are left out; reports without steps have no rows.
-- reads cuda_api, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col category VARCHAR: 'module loading', 'memory allocation', 'CUDA graph instantiation', 'context creation' or 'waiting for the GPU'.
-- col calls BIGINT: calls of the category before the steady state.
-- col total_ns BIGINT: their summed duration (ns).
WITH c AS (
    SELECT c.report_id,
           CASE
               WHEN regexp_matches(c.name, '^cu(Module|Library)(Load|GetFunction|GetKernel|GetGlobal)')
                    OR c.name IN ('cudaGetFuncBySymbol', 'cudaFuncGetAttributes', 'cuKernelGetFunction') THEN 'module loading'
               WHEN regexp_matches(c.name, '^(cuda(Malloc|Free|HostAlloc|HostRegister|MallocHost|FreeHost)|cuMem(Alloc|Free|Create|Map|AddressReserve|HostAlloc|HostRegister))')
                   THEN 'memory allocation'
               WHEN regexp_matches(c.name, '^cu(da)?GraphInstantiate') THEN 'CUDA graph instantiation'
               WHEN regexp_matches(c.name, '^(cuInit|cuCtxCreate|cuDevicePrimaryCtxRetain|cudaSetDevice)') THEN 'context creation'
               WHEN nsa_blocking_call(c.name) IS NOT NULL THEN 'waiting for the GPU'
           END AS category,
           c.duration_ns
    FROM cuda_api AS c JOIN nsa_steady($report_id) AS w ON w.report_id = c.report_id
    WHERE ($report_id IS NULL OR c.report_id = $report_id) AND c.start_ns < w.start_ns
)
SELECT report_id, category, count(*) AS calls, CAST(sum(duration_ns) AS BIGINT) AS total_ns
FROM c
WHERE category IS NOT NULL
GROUP BY ALL
ORDER BY report_id, total_ns DESC, category
