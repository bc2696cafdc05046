-- Macros shared by the ncu queries; the query runner executes this file before any query.

-- nsa_kernel_key(name): a kernel name reduced so that nsys's and ncu's spellings of one kernel
-- compare equal. nsys writes the full demangled name; ncu drops namespaces and literal casts:
--   nsys: void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<...>,
--         std::array<char *, (unsigned long)2>>(int, T2, T3)
--   ncu:  void vectorized_elementwise_kernel<4, AUnaryFunctor<...>, array<char *, 2>>(int, T2, T3)
-- Rules, applied in this order:
--   1. drop every qualifier `x::`, whether a namespace (`at::native::`, `std::`, `c10::`), a
--      class or an anonymous namespace in any spelling (`(anonymous namespace)::` from
--      gcc/c++filt, `<unnamed>::` from nsys, `unnamed>::` from ncu);
--   2. drop C-style casts in front of literal template arguments: `(int)4` -> `4`,
--      `(unsigned long)2` -> `2`, `(bool)1` -> `1`, `(unsigned int)32` -> `32`;
--   3. spell booleans as digits (`true` -> `1`, `false` -> `0`), which is what rule 2 leaves;
--   4. drop a leading `void ` (ncu omits the return type of non-template kernels, nsys too,
--      but some exports keep it for templates only);
--   5. drop all whitespace (`char *` vs `char*`, `> >` vs `>>`).
-- Lambdas (`[lambda() (instance 2)]`) and parameter lists are kept: both tools print them alike.
CREATE OR REPLACE MACRO nsa_kernel_key(s) AS
    regexp_replace(
        regexp_replace(
            regexp_replace(
                regexp_replace(
                    regexp_replace(
                        regexp_replace(
                            s,
                            '(?:<unnamed>|unnamed>|\(anonymous namespace\)|[A-Za-z_][A-Za-z0-9_]*)::',
                            '', 'g'),
                        '\((?:(?:un)?signed\s+)?(?:long\s+long|long|int|short|char|bool|unsigned|signed)\)\s*(-?[0-9])',
                        '\1', 'g'),
                    '\btrue\b', '1', 'g'),
                '\bfalse\b', '0', 'g'),
            '^\s*void\s+', ''),
        '\s+', '', 'g');

-- nsa_ncu_stall_reasons(rid): one row per ncu launch and warp-stall reason of report `rid`
-- (all reports when NULL), from whichever stall metric family the export has. Families, best
-- first; a launch uses only its best family, so reasons are never counted twice:
--   1 smsp__average_warps_issue_stalled_<r>_per_issue_active.ratio  (warp cycles per issued
--     instruction; raw page and --set full)
--   2 smsp__average_warp_latency_issue_stalled_<r>.ratio             (same quantity, older name)
--   3 smsp__warp[s]_issue_stalled_<r>_per_warp_active.pct           (% of active warp cycles)
--   4 smsp__warps_issue_stalled_<r>.sum                              (stalled warp cycles)
--   5 smsp__pcsamp_warps_issue_stalled_<r>                           (PC samples; the
--     `_not_issued` variants are a subset and are skipped)
-- cycles_per_issue is the family-1/2 value, or for families 3-5 the reason's share times the
-- launch's total warp cycles per issued instruction (smsp__average_warp_latency_per_inst_issued
-- .ratio) when the export has it, else NULL. pcsamp's `no_instructions` is renamed
-- `no_instruction` to match the other families.
CREATE OR REPLACE MACRO nsa_ncu_stall_reasons(rid) AS TABLE
WITH classified AS (
    SELECT
        report_id,
        launch_id,
        value,
        CASE
            WHEN regexp_matches(metric_name, '^smsp__average_warps_issue_stalled_[a-z0-9_]+_per_issue_active\.ratio$') THEN 1
            WHEN regexp_matches(metric_name, '^smsp__average_warp_latency_issue_stalled_[a-z0-9_]+\.ratio$') THEN 2
            WHEN regexp_matches(metric_name, '^smsp__warps?_issue_stalled_[a-z0-9_]+_per_warp_active\.pct$') THEN 3
            WHEN regexp_matches(metric_name, '^smsp__warps_issue_stalled_[a-z0-9_]+\.sum$')
                AND NOT contains(metric_name, '_per_') THEN 4
            WHEN regexp_matches(metric_name, '^smsp__pcsamp_warps_issue_stalled_[a-z0-9_]+$')
                AND NOT suffix(metric_name, '_not_issued') THEN 5
        END AS family,
        regexp_replace(
            regexp_extract(
                metric_name,
                '^smsp__(?:average_warps_issue_stalled_|average_warp_latency_issue_stalled_|warps?_issue_stalled_|pcsamp_warps_issue_stalled_)([a-z0-9_]+?)(?:_per_issue_active\.ratio|\.ratio|_per_warp_active\.pct|\.sum)?$',
                1),
            '^no_instructions$', 'no_instruction') AS reason
    FROM ncu_metrics
    WHERE (rid IS NULL OR report_id = rid)
      AND metric_name LIKE 'smsp\_\_%stalled\_%' ESCAPE '\'
      AND value IS NOT NULL
),
best AS (
    SELECT report_id, launch_id, min(family) AS family
    FROM classified
    WHERE family IS NOT NULL
    GROUP BY ALL
),
total_latency AS (
    SELECT report_id, launch_id, max(value) AS cycles
    FROM ncu_metrics
    WHERE (rid IS NULL OR report_id = rid)
      AND metric_name = 'smsp__average_warp_latency_per_inst_issued.ratio'
    GROUP BY ALL
),
chosen AS (
    SELECT c.report_id, c.launch_id, c.family, c.reason, max(c.value) AS value
    FROM classified AS c
    JOIN best AS b USING (report_id, launch_id, family)
    GROUP BY ALL
),
shares AS (
    SELECT
        *,
        CASE WHEN sum(value) OVER w > 0 THEN 100.0 * value / sum(value) OVER w END AS share_pct
    FROM chosen
    -- summed in reason order over the whole partition: the same float sum on every run
    WINDOW w AS (
        PARTITION BY report_id, launch_id ORDER BY reason ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING
    )
)
SELECT
    s.report_id,
    s.launch_id,
    s.reason,
    CASE WHEN s.family <= 2 THEN s.value ELSE s.share_pct / 100.0 * t.cycles END AS cycles_per_issue,
    s.share_pct,
    row_number() OVER (PARTITION BY s.report_id, s.launch_id ORDER BY s.value DESC, s.reason) AS rank,
    CASE s.family
        WHEN 1 THEN 'smsp__average_warps_issue_stalled_*_per_issue_active.ratio'
        WHEN 2 THEN 'smsp__average_warp_latency_issue_stalled_*.ratio'
        WHEN 3 THEN 'smsp__warps_issue_stalled_*_per_warp_active.pct'
        WHEN 4 THEN 'smsp__warps_issue_stalled_*.sum'
        ELSE 'smsp__pcsamp_warps_issue_stalled_*'
    END AS source
FROM shares AS s
LEFT JOIN total_latency AS t USING (report_id, launch_id);
