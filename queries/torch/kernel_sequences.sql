-- Frequent kernel sequences: runs of `length` consecutive kernels on one stream (in start
-- order) with the same names, counted wherever they start (occurrences may overlap), like the
-- patterns Holistic Trace Analysis looks for before fusing or graph-capturing a region. The
-- most frequent first; a run of many tiny kernels repeating per layer or per parameter is the
-- first candidate for torch.compile or a CUDA graph.
-- reads kernel_names, kernel_rows
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param length INTEGER = 3: kernels per sequence (2 to 8).
-- param min_count BIGINT = 2: fewest occurrences a sequence needs.
-- col report_id INTEGER: workspace report id.
-- col sequence VARCHAR: the kernels' names, joined by ' -> '.
-- col length INTEGER: kernels in the sequence.
-- col occurrences BIGINT: times the sequence starts on a stream.
-- col kernel_ns BIGINT: summed GPU time of the kernels in all occurrences (ns).
-- col avg_ns DOUBLE: mean GPU time of one occurrence (ns).
-- each kernel with the (name, duration) pairs of the kernels after it on its stream (as many as
-- `length` asks), one lead per offset. A lead past the sequence's end repeats its last kernel's
-- (offset length - 1): an identical window expression, worked out once (a constant NULL would
-- still cost its own lead over every kernel), and a group key that splits no group, as it
-- equals that kernel's. x7 is always the last kernel's pair: a struct, NULL only past the
-- stream's end.
WITH k AS (
    SELECT report_id, name_id, duration_ns AS d0,
           lead({'n': name_id, 'd': duration_ns}, 1) OVER w AS x1,
           lead({'n': name_id, 'd': duration_ns}, least(2, least(greatest($length, 2), 8) - 1)) OVER w AS x2,
           lead({'n': name_id, 'd': duration_ns}, least(3, least(greatest($length, 2), 8) - 1)) OVER w AS x3,
           lead({'n': name_id, 'd': duration_ns}, least(4, least(greatest($length, 2), 8) - 1)) OVER w AS x4,
           lead({'n': name_id, 'd': duration_ns}, least(5, least(greatest($length, 2), 8) - 1)) OVER w AS x5,
           lead({'n': name_id, 'd': duration_ns}, least(6, least(greatest($length, 2), 8) - 1)) OVER w AS x6,
           lead({'n': name_id, 'd': duration_ns}, least(7, least(greatest($length, 2), 8) - 1)) OVER w AS x7
    FROM kernel_rows
    WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL
    WINDOW w AS (PARTITION BY report_id, device_id, stream_id ORDER BY start_ns, end_ns)
),
counted AS (
    SELECT report_id,
           list_value(name_id, x1.n, x2.n, x3.n, x4.n, x5.n, x6.n, x7.n)[1:least(greatest($length, 2), 8)] AS ids,
           count(*) AS occurrences,
           -- summed GPU time, NULL only when every duration is (a sum over the frame would be)
           CASE WHEN count(d0) + count(x1.d) + count(CASE WHEN $length >= 3 THEN x2.d END) + count(CASE WHEN $length >= 4 THEN x3.d END)
                   + count(CASE WHEN $length >= 5 THEN x4.d END) + count(CASE WHEN $length >= 6 THEN x5.d END)
                   + count(CASE WHEN $length >= 7 THEN x6.d END) + count(CASE WHEN $length >= 8 THEN x7.d END) > 0
               THEN coalesce(sum(d0), 0) + coalesce(sum(x1.d), 0)
                   + coalesce(sum(CASE WHEN $length >= 3 THEN x2.d END), 0) + coalesce(sum(CASE WHEN $length >= 4 THEN x3.d END), 0)
                   + coalesce(sum(CASE WHEN $length >= 5 THEN x4.d END), 0) + coalesce(sum(CASE WHEN $length >= 6 THEN x5.d END), 0)
                   + coalesce(sum(CASE WHEN $length >= 7 THEN x6.d END), 0) + coalesce(sum(CASE WHEN $length >= 8 THEN x7.d END), 0)
           END AS kernel_ns
    FROM k
    -- the sequence's last kernel is on the stream
    WHERE x7 IS NOT NULL
    GROUP BY report_id, name_id, x1.n, x2.n, x3.n, x4.n, x5.n, x6.n, x7.n
    HAVING count(*) >= $min_count
),
names AS (
    SELECT report_id, map(list(name_id), list(coalesce(name, short_name, '?'))) AS m
    FROM kernel_names
    WHERE $report_id IS NULL OR report_id = $report_id
    GROUP BY report_id
)
SELECT
    c.report_id,
    array_to_string(list_transform(c.ids, x -> coalesce(n.m[x], '?')), ' -> ') AS sequence,
    CAST(len(c.ids) AS INTEGER) AS length,
    c.occurrences,
    CAST(c.kernel_ns AS BIGINT) AS kernel_ns,
    c.kernel_ns / c.occurrences AS avg_ns
FROM counted AS c LEFT JOIN names AS n USING (report_id)
ORDER BY c.report_id, c.occurrences DESC, c.kernel_ns DESC, sequence
