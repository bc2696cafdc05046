"""The canonical tables: the stable API that queries, rules and notebook users build on.

Every table and column is declared here once, with its type, unit and meaning. The DDL, the
schema reference page (docs/schema.md) and the test that keeps that page true all come from
these declarations. nsys / ncu schema drift is absorbed by the ingesters; nothing above them
ever sees a raw export table name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Col:
    name: str
    type: str
    unit: str
    doc: str


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    cols: tuple[Col, ...]
    source: str  # 'nsys', 'ncu' or 'workspace'
    view: str = ""  # a view's SELECT; empty for a stored table

    @property
    def col_names(self) -> list[str]:
        return [c.name for c in self.cols]

    def ddl(self) -> str:
        if self.view:
            return f'CREATE OR REPLACE VIEW "{self.name}" AS\n{self.view}'
        body = ",\n  ".join(f'"{c.name}" {c.type}' for c in self.cols)
        return f'CREATE TABLE IF NOT EXISTS "{self.name}" (\n  {body}\n)'


def _c(name: str, type_: str, unit: str, doc: str) -> Col:
    return Col(name, type_, unit, doc)


RID = _c("report_id", "INTEGER", "", "Workspace report id (`reports.report_id`).")
DEV = _c("device_id", "INTEGER", "", "CUDA device id the activity ran on.")
CTX = _c("context_id", "BIGINT", "", "CUDA context id (NULL when the export lacks it).")
STREAM = _c("stream_id", "BIGINT", "", "CUDA stream id.")
PID = _c("pid", "BIGINT", "", "Process id, decoded from nsys `globalPid`/`globalTid`.")
TID = _c("tid", "BIGINT", "", "Thread id, decoded from nsys `globalTid`.")
GPID = _c("global_pid", "BIGINT", "", "Raw nsys process key (`globalPid`); the exact join key.")
GTID = _c("global_tid", "BIGINT", "", "Raw nsys thread key (`globalTid`); the exact join key.")
START = _c("start_ns", "BIGINT", "ns", "Start, nanoseconds from the start of the capture session.")
END = _c("end_ns", "BIGINT", "ns", "End, nanoseconds from the start of the capture session.")
DUR = _c("duration_ns", "BIGINT", "ns", "end_ns - start_ns.")
CORR = _c(
    "correlation_id",
    "BIGINT",
    "",
    "CUPTI correlation id; joins GPU work to the API call that issued it (same pid).",
)
GRAPH = _c("graph_node_id", "BIGINT", "", "CUDA graph node id when launched from a graph, else NULL.")
# The first columns of every table of GPU activity, and of every table of host activity.
DEVICE_TIMELINE = (RID, DEV, CTX, STREAM, PID, GPID, START, END, DUR)
HOST_TIMELINE = (RID, PID, TID, GTID, START, END, DUR)
NAME = _c("name", "VARCHAR", "", "Demangled kernel name (falls back to the short name).")
SHORT_NAME = _c("short_name", "VARCHAR", "", "Short kernel name, as nsys prints it in summaries.")
NAME_ID = _c(
    "name_id",
    "BIGINT",
    "",
    "The name's id in the export's StringIds; joins `kernel_names` on (report_id, name_id).",
)
LAUNCH = (
    _c("grid_x", "INTEGER", "block", "Grid size, x."),
    _c("grid_y", "INTEGER", "block", "Grid size, y."),
    _c("grid_z", "INTEGER", "block", "Grid size, z."),
    _c("block_x", "INTEGER", "thread", "Block size, x."),
    _c("block_y", "INTEGER", "thread", "Block size, y."),
    _c("block_z", "INTEGER", "thread", "Block size, z."),
    _c("registers_per_thread", "INTEGER", "register", "Registers per thread."),
    _c("static_smem_bytes", "BIGINT", "byte", "Static shared memory per block."),
    _c("dynamic_smem_bytes", "BIGINT", "byte", "Dynamic shared memory per block."),
    _c("launch_type", "INTEGER", "", "CUPTI launch type (0 regular, 1 cooperative...)."),
    GRAPH,
)

TABLES: tuple[Table, ...] = (
    Table(
        "reports",
        "One row per ingested file. Activity flags say what the export contains, so a missing "
        "table reads as 'not captured', never as 'GPU idle'.",
        (
            _c("report_id", "INTEGER", "", "Workspace-unique id, assigned at ingest."),
            _c(
                "format",
                "VARCHAR",
                "",
                "The input format, named by the reader that read it: 'nsys' (SQLite export), 'nsys-rep', 'ncu' (CSV), 'ncu-rep', "
                "'kineto' (PyTorch profiler trace), 'nvml' or 'nvidia-smi' (power logs).",
            ),
            _c("source_path", "VARCHAR", "", "Absolute path of the ingested file."),
            _c(
                "sha256",
                "VARCHAR",
                "",
                "SHA-256 of the file's bytes (hex), for reports ingested before `content_hash`: their "
                "de-duplication key. NULL for the others.",
            ),
            _c("size_bytes", "BIGINT", "byte", "File size."),
            _c("tool_version", "VARCHAR", "", "Version of the nsys / ncu that wrote the file."),
            _c("schema_version", "VARCHAR", "", "nsys export schema version (NULL for ncu)."),
            _c("ingested_at", "TIMESTAMP", "", "When the ingest committed (UTC)."),
            _c(
                "activity_kinds",
                "VARCHAR[]",
                "",
                "Activity kinds with at least one row: kernel, memcpy, memset, cuda_api, "
                "graph (CUDA graph executions or events), sync, nvtx, osrt, mpi (nsys' MPI event "
                "tables), cpu_samples, stacks (call stacks, `stack_events`), gpu_info, processes, ncu_metrics, ncu_rules, gpu_metrics, "
                "memory (memory_events), power (power_samples), comm (comm_ops).",
            ),
            _c("has_kernels", "BOOLEAN", "", "The export holds kernel records."),
            _c("has_memcpy", "BOOLEAN", "", "The export holds memcpy records."),
            _c("has_cuda_api", "BOOLEAN", "", "The export holds CUDA API records."),
            _c("has_nvtx", "BOOLEAN", "", "The export holds NVTX ranges."),
            _c("session_start_utc_ns", "BIGINT", "ns", "Wall clock of session time 0 (UTC epoch ns)."),
            _c(
                "rank",
                "INTEGER",
                "",
                "Rank of the report's process in a distributed job (Kineto `distributedInfo`, or the "
                "rank number in the file name); NULL for a report that holds several ranks (see `ranks`).",
            ),
            _c(
                "world_size",
                "INTEGER",
                "",
                "Ranks in that job (Kineto `distributedInfo`, or its run's ranks).",
            ),
            _c("run_id", "INTEGER", "", "The run (`runs.run_id`) the report belongs to; NULL when none."),
            _c("local_rank", "INTEGER", "", "Rank among the job's processes on the same host, when known."),
            _c(
                "host",
                "VARCHAR",
                "",
                "Host name the report was captured on, when the file says (nsys `Hostname`).",
            ),
            _c(
                "rank_source",
                "VARCHAR",
                "",
                "How `rank` was found: 'distributedInfo' (Kineto), 'environment' (the RANK / "
                "SLURM_PROCID / OMPI_COMM_WORLD_RANK / PMI_RANK nsys recorded for the profiled process), "
                "'file name', 'processes' (one report holding several ranks: each process using a GPU "
                "a rank), 'order' (the order the files were given).",
            ),
            _c(
                "deferred_steps",
                "VARCHAR[]",
                "",
                "The reader's steps left for first use: a canonical table not copied yet from "
                "source_path (named as the table), `kernel_launch` (the kernels' launch columns), "
                "`steps` (the steps and host_waits, found together), `nvtx_kernels` while "
                "nvtx_ranges.kernels is not computed (even after --full: the first read of those "
                "columns computes them) and `nvtx_totals` (nvtx_summary's rows, worked out on "
                "its first run).",
            ),
            _c(
                "source_mtime_ns",
                "BIGINT",
                "ns",
                "Modification time of source_path when the ingest began (ns since the Unix epoch). "
                "A deferred table is copied without hashing the file again while its size and "
                "mtime are unchanged; otherwise the file must still have `content_hash` (or `sha256`).",
            ),
            _c(
                "content_hash",
                "VARCHAR",
                "",
                "Hash of the file's bytes, `xxh3_128-` and 32 hex digits (xxHash XXH3, 128 bits); with "
                "`size_bytes`, the de-duplication key. NULL for reports ingested before nsa kept it, "
                "which have `sha256`. A key for recognising a file seen before, not a defence against "
                "a file forged to collide.",
            ),
        ),
        "workspace",
    ),
    Table(
        "nsa_workspace",
        "The workspace's layout version (one row): nsa opens a workspace of an older version by "
        "running its numbered migrations, and refuses one made by a newer nsa.",
        (_c("schema_version", "INTEGER", "", "Layout version (nsight_analytics.workspace.SCHEMA_VERSION)."),),
        "workspace",
    ),
    Table(
        "kernel_rows",
        "The storage behind `kernels`: one row per GPU kernel execution (nsys "
        "CUPTI_ACTIVITY_KIND_KERNEL) with its name as an id into `kernel_names`, so a million "
        "rows carry no strings. Library queries read it; `kernels` is the same rows with names. "
        "The launch configuration columns (all but graph_node_id, which comes with the rows) are "
        "copied from the export the first time `kernels` is read (`nsa ingest --full`: at "
        "ingest); until then they are NULL here and the report lists `kernel_launch` in "
        "`reports.deferred_steps`.",
        (
            *DEVICE_TIMELINE,
            NAME_ID,
            CORR,
            *LAUNCH,
            _c("source_row", "BIGINT", "", "rowid of the kernel in the export's CUPTI_ACTIVITY_KIND_KERNEL."),
        ),
        "nsys",
    ),
    Table(
        "kernel_names",
        "Each distinct kernel name of a report with its short and mangled forms (nsys StringIds "
        "behind CUPTI_ACTIVITY_KIND_KERNEL), joined on (report_id, name_id). A million kernels "
        "share a few dozen names.",
        (
            RID,
            NAME_ID,
            NAME,
            SHORT_NAME,
            _c("mangled_name", "VARCHAR", "", "Mangled name when the export has it."),
            _c("kernels", "BIGINT", "count", "Kernel executions with this name."),
        ),
        "nsys",
    ),
    Table(
        "kernels",
        "GPU kernel executions (nsys CUPTI_ACTIVITY_KIND_KERNEL) with their names: a view of "
        "`kernel_rows` joined with `kernel_names`.",
        (
            *DEVICE_TIMELINE,
            NAME,
            SHORT_NAME,
            *LAUNCH[:9],
            CORR,
            *LAUNCH[9:],
            NAME_ID,
        ),
        "nsys",
        view="SELECT k.report_id, k.device_id, k.context_id, k.stream_id, k.pid, k.global_pid, "
        "k.start_ns, k.end_ns, k.duration_ns, n.name, n.short_name, k.grid_x, k.grid_y, k.grid_z, "
        "k.block_x, k.block_y, k.block_z, k.registers_per_thread, k.static_smem_bytes, "
        "k.dynamic_smem_bytes, k.correlation_id, k.launch_type, k.graph_node_id, k.name_id\n"
        "FROM kernel_rows AS k LEFT JOIN kernel_names AS n USING (report_id, name_id)",
    ),
    Table(
        "memcpy",
        "GPU memory copies (nsys CUPTI_ACTIVITY_KIND_MEMCPY).",
        (
            *DEVICE_TIMELINE,
            _c("bytes", "BIGINT", "byte", "Bytes copied."),
            _c(
                "direction",
                "VARCHAR",
                "",
                "HtoD, DtoH, DtoD, HtoH, PtoP, HtoA, AtoH, AtoA, AtoD, DtoA, UVM_HtoD, UVM_DtoH, "
                "UVM_DtoD, Unknown; an unlisted code reads 'code:N'.",
            ),
            _c(
                "src_memory",
                "VARCHAR",
                "",
                "Source memory: pageable, pinned, device, array, managed, device_static, "
                "managed_static, unknown, or 'code:N'.",
            ),
            _c("dst_memory", "VARCHAR", "", "Destination memory, same values as src_memory."),
            _c("src_device_id", "INTEGER", "", "Source device for device/peer copies."),
            _c("dst_device_id", "INTEGER", "", "Destination device for device/peer copies."),
            CORR,
            GRAPH,
        ),
        "nsys",
    ),
    Table(
        "memset",
        "GPU memsets (nsys CUPTI_ACTIVITY_KIND_MEMSET).",
        (
            *DEVICE_TIMELINE,
            _c("bytes", "BIGINT", "byte", "Bytes set."),
            _c("value", "BIGINT", "", "Value written."),
            _c("memory", "VARCHAR", "", "Memory set: same values as memcpy.src_memory."),
            CORR,
            GRAPH,
        ),
        "nsys",
    ),
    Table(
        "graph_executions",
        "CUDA graph executions on the GPU (nsys CUPTI_ACTIVITY_KIND_GRAPH_TRACE, written by the "
        "default `--cuda-graph-trace=graph`): one row per replay of a graph, its kernels not listed "
        "apart. GPU work like a kernel: every timeline query counts it as busy. With "
        "`--cuda-graph-trace=node` nsys lists the graph's kernels instead (kernel_rows with a "
        "graph_node_id) and this table is empty.",
        (
            *DEVICE_TIMELINE,
            _c("graph_id", "BIGINT", "", "Id of the graph (as created or captured)."),
            _c("graph_exec_id", "BIGINT", "", "Id of the executable graph instance that ran."),
            CORR,
        ),
        "nsys",
    ),
    Table(
        "gpu_timeline",
        "Every kernel, memcpy, memset and CUDA graph execution of a report (the rows of "
        "kernel_rows, memcpy, memset and graph_executions that have a start and do not end before "
        "it; query macro `nsa_gpu_activity` lists the same with labels), each with the running "
        "maxima of the ends of the activities before it on its device, in (start_ns, end_ns) "
        "order. Worked out from those tables the first time a query needs it, and again for a "
        "report whose GPU rows changed (nsight_analytics/ingest/timeline.py); not copied from the "
        "source file. The running maxima make an idle gap a filter (start_ns > prev_end_ns), the "
        "union of a device's busy intervals a plain sum (`nsa_union_ns(end_ns, start_ns, "
        "prev_end_ns)`) and the busy time up to an instant one ASOF join (busy_through_ns). Rows "
        "tied on both start and end are in no particular order.",
        (
            RID,
            _c("device_id", "INTEGER", "", "CUDA device id the activity ran on (NULL: one unnamed device)."),
            _c("kind", "VARCHAR", "", "'kernel', 'memcpy', 'memset' or 'graph' (a CUDA graph execution)."),
            START,
            END,
            _c("duration_ns", "BIGINT", "ns", "The source row's duration_ns."),
            PID,
            STREAM,
            CORR,
            _c("name_id", "BIGINT", "", "Kernels: the name's id in kernel_names; NULL for the others."),
            _c(
                "label",
                "VARCHAR",
                "",
                "The others' label as nsa_gpu_activity writes it ('memcpy HtoD', 'memset', 'CUDA "
                "graph 3'); NULL for kernels (their name: kernel_names by name_id).",
            ),
            _c(
                "prev_end_ns",
                "BIGINT",
                "ns",
                "Latest end of any activity before this one on the device (NULL for the first).",
            ),
            _c("prev_kernel_end_ns", "BIGINT", "ns", "Latest end of a kernel before this row on the device."),
            _c(
                "prev_graph_end_ns",
                "BIGINT",
                "ns",
                "Latest end of a CUDA graph execution before this row on the device.",
            ),
            _c(
                "prev_copy_end_ns",
                "BIGINT",
                "ns",
                "Latest end of a memcpy or memset before this row on the device.",
            ),
            _c(
                "comm",
                "BOOLEAN",
                "",
                "A communication kernel: one comm_ops holds (same report, GPU, stream and start, as "
                "the run queries match them); false for every other row. Worked out for what reads "
                "it (`-- reads gpu_timeline, gpu_comm`); NULL until then in reports with comm_ops.",
            ),
            _c(
                "prev_compute_end_ns",
                "BIGINT",
                "ns",
                "Latest end of compute before this row on the device: the kernels but the "
                "communication ones (comm), and CUDA graph executions (the run queries' compute). "
                "Worked out with comm.",
            ),
            _c(
                "busy_through_ns",
                "BIGINT",
                "ns",
                "Length of the union of the device's activities up to and including this row: "
                "at the last row starting at start_ns (last_at_start), the time the device was "
                "busy before start_ns plus the covered part of what started then.",
            ),
            _c(
                "end_through_ns",
                "BIGINT",
                "ns",
                "Latest end of the activities up to and including this row: greatest(end_ns, prev_end_ns).",
            ),
            _c(
                "last_at_start",
                "BOOLEAN",
                "",
                "The last row of the device starting at start_ns: its busy_through_ns and "
                "end_through_ns count every activity starting by then.",
            ),
            _c(
                "seq",
                "BIGINT",
                "",
                "Position of the row on its device in (start_ns, end_ns) order, from 1: rows tied "
                "on both in the order the running maxima count them, so the rows before this one "
                "are those with a smaller seq.",
            ),
            _c(
                "api_calls",
                "BIGINT",
                "",
                "CUDA API calls that launched it: cuda_api rows with the same report_id, pid and "
                "correlation_id (0: none in the trace). The api_ columns aggregate them. "
                "Worked out for what reads them (`-- reads gpu_timeline, gpu_launches`); NULL "
                "until then, and while the report's cuda_api rows are still in its export.",
            ),
            _c("api_start_ns", "BIGINT", "ns", "Earliest start of its launch calls."),
            _c("api_end_ns", "BIGINT", "ns", "Latest end of its launch calls."),
            _c(
                "api_global_tid",
                "BIGINT",
                "",
                "Host thread (global_tid) of its earliest launch call that has one.",
            ),
        ),
        "workspace",
    ),
    Table(
        "graph_events",
        "Host-side CUDA graph events (nsys CUDA_GRAPH_EVENTS and CUDA_GRAPH_NODE_EVENTS): graph "
        "and graph-node creation, with the ids that tie nodes to the kernels they ran.",
        (
            *HOST_TIMELINE,
            _c(
                "name",
                "VARCHAR",
                "",
                "Event name as nsys writes it ('Graph Creation', 'Graph Node Creation').",
            ),
            _c("graph_id", "BIGINT", "", "Graph id (graph events)."),
            _c("original_graph_id", "BIGINT", "", "The graph this one was cloned from, when cloned."),
            _c("graph_exec_id", "BIGINT", "", "Executable graph id, when the event concerns one."),
            _c(
                "graph_node_id", "BIGINT", "", "Graph node id (node events); joins kernel_rows.graph_node_id."
            ),
            _c("original_graph_node_id", "BIGINT", "", "The node this one was cloned from, when cloned."),
        ),
        "nsys",
    ),
    Table(
        "steps",
        "Iterations of the program's main loop (training steps, batches, decode steps), found "
        "the first time a query or rule needs them: NVTX ranges of one repeating family "
        "(`step N`, `train_step_N`, `ProfilerStep#N`, `iteration`, `batch_N`...); else the "
        "launches of a CUDA graph replayed in a loop (a decode loop without NVTX: on each process, "
        "the executable graph launched most often, at least 3 times, a step from one "
        "cudaGraphLaunch to the next); else the repeating kernel pattern on each GPU. The steps "
        "before the loop settles (warm-up: "
        "module loading, first allocations, autotuning) are flagged `steady = false`: "
        "start-up is what comes before the first steady step, the steady state the rest of the "
        "capture (query macro `nsa_steady`).",
        (
            RID,
            _c("step", "INTEGER", "", "0-based position of the step in its series (time order)."),
            _c(
                "name",
                "VARCHAR",
                "",
                "NVTX range name; for graph steps the launch call and the graph "
                "(`cudaGraphLaunch (graph exec 2)`, `cudaGraphLaunch (graph of 12 kernels)`); the marker "
                "kernel's name for kernel-pattern steps.",
            ),
            _c("number", "BIGINT", "", "The step number in the range name (`step 12` -> 12), else NULL."),
            _c(
                "source",
                "VARCHAR",
                "",
                "'nvtx' (host time of the ranges), 'graphs' (host time from one graph launch call to "
                "the next; the last step lasts the median period, at most to the end of the GPU work) "
                "or 'kernels' (GPU time of the pattern).",
            ),
            _c(
                "series",
                "BIGINT",
                "",
                "What the steps repeat on: the global_tid of the NVTX range or of the graph launches, "
                "or the device id for kernel steps.",
            ),
            _c(
                "pid",
                "BIGINT",
                "",
                "Process of the NVTX range or graph launches (NULL for kernel-pattern steps).",
            ),
            _c("device_id", "INTEGER", "", "GPU of kernel-pattern steps (NULL for NVTX and graph steps)."),
            START,
            END,
            DUR,
            _c(
                "steady",
                "BOOLEAN",
                "",
                "false for warm-up steps: every step before the first one no longer than 1.5x the "
                "median step of its series (of two steps, step 0 when 1.5x step 1); true after.",
            ),
        ),
        "nsys",
    ),
    Table(
        "cuda_api",
        "CUDA runtime and driver API calls on the host (nsys CUPTI_ACTIVITY_KIND_RUNTIME).",
        (
            *HOST_TIMELINE,
            _c("name", "VARCHAR", "", "API name without its version suffix (cudaLaunchKernel)."),
            CORR,
            _c("return_value", "BIGINT", "", "CUresult / cudaError_t returned."),
        ),
        "nsys",
    ),
    Table(
        "sync_events",
        "CUDA synchronisation activity seen by CUPTI (nsys CUPTI_ACTIVITY_KIND_SYNCHRONIZATION).",
        (
            *DEVICE_TIMELINE,
            _c(
                "sync_type",
                "VARCHAR",
                "",
                "event_synchronize, stream_wait_event, stream_synchronize, context_synchronize, "
                "unknown, or 'code:N'.",
            ),
            CORR,
            _c("event_id", "BIGINT", "", "CUDA event id for event syncs."),
        ),
        "nsys",
    ),
    Table(
        "nvtx_ranges",
        "NVTX push/pop and start/end ranges (nsys NVTX_EVENTS types 59/60). A range never "
        "closed has NULL end_ns and duration_ns. Copied on first use; `kernels`, `kernel_ns` and "
        "their `process_` forms are computed from the report's CUDA API calls and kernels the first "
        "time something reads them (the deferred step `nvtx_kernels`; a query declares "
        "`-- reads nvtx_ranges, nvtx_kernels`), NULL until then. nvtx_summary reads neither: "
        "its rows are nvtx_totals, worked out without copying the ranges.",
        (
            *HOST_TIMELINE,
            _c("name", "VARCHAR", "", "Range text: `text`, else the registered string `textId`."),
            _c(
                "base_name",
                "VARCHAR",
                "",
                "`name` without the per-call suffixes PyTorch's emit_nvtx appends (`, seq = N`, "
                "`, op_id = N`, then `, sizes = [...]` / `, input_op_ids = [...]`): "
                "'aten::to, seq = 12, op_id = 345' -> 'aten::to'. Equal to `name` otherwise.",
            ),
            _c("domain", "VARCHAR", "", "NVTX domain name; NULL for the default domain."),
            _c(
                "range_api",
                "VARCHAR",
                "",
                "The NVTX API that made it: 'push_pop' (nvtxRangePush/Pop) or 'start_end' (nvtxRangeStart/End).",
            ),
            _c("category", "BIGINT", "", "NVTX category id."),
            _c(
                "kernels",
                "BIGINT",
                "count",
                "Kernels launched inside the range: by CUDA API calls of the same thread "
                "(global_tid) starting between start_ns and end_ns, both included; NULL while open "
                "(nsys's definition: `nsys stats -r nvtx_kern_sum`, formerly nvtxkernsum).",
            ),
            _c("kernel_ns", "BIGINT", "ns", "Summed GPU time of those kernels (their duration_ns)."),
            _c(
                "process_kernels",
                "BIGINT",
                "count",
                "Kernels launched inside the range by any thread of its process (same pid): CUDA "
                "API calls starting between start_ns and end_ns, both included; NULL while open. "
                "Counts the work worker threads launch (PyTorch's autograd thread under a "
                "`backward` range pushed on the main thread), and also unrelated work other "
                "threads launch meanwhile.",
            ),
            _c("process_kernel_ns", "BIGINT", "ns", "Summed GPU time of those kernels (their duration_ns)."),
        ),
        "nsys",
    ),
    Table(
        "nvtx_totals",
        "NVTX ranges per report, domain and base name (nvtx_ranges.base_name): what the query "
        "nvtx_summary shows. Worked out on first use (the deferred step `nvtx_totals`) in one "
        "pass over the export's ranges, without copying them; from nvtx_ranges when those are "
        "in the workspace already (Kineto traces, `--full`). Ranges never closed count only in "
        "open_ranges. The kernel columns are the sums of nvtx_ranges' (same definitions).",
        (
            RID,
            _c("domain", "VARCHAR", "", "NVTX domain name; NULL for the default domain."),
            _c("name", "VARCHAR", "", "Range name without per-call suffixes (nvtx_ranges.base_name)."),
            _c(
                "names",
                "BIGINT",
                "count",
                "Distinct full range names (nvtx_ranges.name) folded into this row.",
            ),
            _c("ranges", "BIGINT", "count", "Closed ranges."),
            _c("open_ranges", "BIGINT", "count", "Ranges with no end (not closed before the capture ended)."),
            _c("total_ns", "BIGINT", "ns", "Summed duration of the closed ranges."),
            _c("avg_ns", "DOUBLE", "ns", "Mean duration of the closed ranges."),
            _c("median_ns", "DOUBLE", "ns", "Median duration of the closed ranges."),
            _c("min_ns", "BIGINT", "ns", "Shortest closed range."),
            _c("max_ns", "BIGINT", "ns", "Longest closed range."),
            _c(
                "kernels",
                "BIGINT",
                "count",
                "Kernels launched inside the ranges by their own threads (nvtx_ranges.kernels).",
            ),
            _c("kernel_ns", "BIGINT", "ns", "Summed GPU time of those kernels."),
            _c(
                "process_kernels",
                "BIGINT",
                "count",
                "Kernels launched inside the ranges by any thread of their process (nvtx_ranges.process_kernels).",
            ),
            _c("process_kernel_ns", "BIGINT", "ns", "Summed GPU time of those kernels."),
        ),
        "nsys",
    ),
    Table(
        "osrt_api",
        "OS runtime calls (nsys OSRT_API): sleeps, locks, I/O waits on the host.",
        (*HOST_TIMELINE, _c("name", "VARCHAR", "", "libc/pthread function.")),
        "nsys",
    ),
    Table(
        "host_waits",
        "Host threads waiting (found with the steps, on first use): NVTX ranges of communication libraries "
        "(`MPI_*`, `nccl*`, `ucp_*`, `shmem_*`, `gloo`, `c10d::`), the MPI calls that block until "
        "communication completes (nsys' MPI trace: blocking collectives, sends, receives, probes, "
        "waits, barriers and RMA synchronisation; not MPI_Init / MPI_Finalize, the non-blocking "
        "MPI_I* starts nor the MPI_Test* calls) and blocking OS runtime calls (sleeps, condition "
        "variables, semaphores, locks, poll/select, reads and receives). A GPU idle gap while the "
        "thread that launches the next work sits in one is that wait's.",
        (
            *HOST_TIMELINE,
            _c(
                "name",
                "VARCHAR",
                "",
                "Range name or MPI function (MPI_Allreduce), or libc/pthread function (pthread_cond_wait).",
            ),
            _c(
                "source",
                "VARCHAR",
                "",
                "'nvtx' (an NVTX range; its MPI_* ranges only when the export has no MPI event tables), "
                "'mpi' (nsys MPI_COLLECTIVES_EVENTS, MPI_P2P_EVENTS, MPI_START_WAIT_EVENTS, "
                "MPI_OTHER_EVENTS) or 'osrt' (OSRT_API).",
            ),
        ),
        "nsys",
    ),
    Table(
        "cpu_samples",
        "CPU samples (`nsys profile -s cpu`; nsys COMPOSITE_EVENTS), each with its backtraces "
        "(SAMPLING_CALLCHAINS) folded in: what a thread was running at ts_ns, which is what its "
        "time went to where no trace says (a C++ program's own code: `main` when the work is "
        "inlined). Copied on first use; no rows when the capture did not sample.",
        (
            RID,
            PID,
            TID,
            GTID,
            _c("ts_ns", "BIGINT", "ns", "When the sample was taken, on the report's timeline."),
            _c(
                "leaf",
                "VARCHAR",
                "",
                "The function executing (the backtrace's frame 0) as nsys names it: a symbol, or an "
                "address (0x7fc4e38ac2ec) where nsys could not resolve one.",
            ),
            _c(
                "leaf_module",
                "VARCHAR",
                "",
                "The binary or library of `leaf` (/usr/lib/x86_64-linux-gnu/libc.so.6).",
            ),
            _c(
                "function",
                "VARCHAR",
                "",
                "The innermost frame with a name: `leaf` when it is resolved, else the first caller "
                "nsys resolved (opal_progress under an address in libopen-pal); not an address nor "
                "an entry nsys adds ([Broken backtraces], [Unknown]). NULL when no frame has a name.",
            ),
            _c("function_module", "VARCHAR", "", "The binary or library of `function`."),
            _c(
                "function_depth",
                "INTEGER",
                "",
                "Frames between `leaf` and `function`: 0 when the leaf has a name.",
            ),
            _c(
                "frames",
                "VARCHAR[]",
                "",
                "The backtrace's frames, leaf first (symbols or addresses, as `leaf`); NULL when the "
                "sample has none.",
            ),
        ),
        "nsys",
    ),
    # --- call stacks: stack_frames, stacks, stack_events ---
    Table(
        "stack_frames",
        "The frames of a report's call stacks, each once (native, kernel and Python frames in one "
        "table): nsys backtraces (SAMPLING_CALLCHAINS, CUDA_CALLCHAINS, OSRT_CALLCHAINS), nsys Python "
        "frames (`--python-sampling`, `--python-backtrace=cuda`: NVTX extended payloads, exported "
        "with `--include-blobs=true`), PyTorch-profiler `python_function` events "
        "(`with_stack=True`) and the `Call stack` argument of older traces' ops. Copied on first use.",
        (
            RID,
            _c("frame_id", "BIGINT", "", "The frame's id in its report; joins `stacks.frame_id`."),
            _c(
                "kind",
                "VARCHAR",
                "",
                "'python' (a Python frame), 'native' (a user-mode machine-code frame) or 'kernel' "
                "(an operating-system kernel frame of a CPU sample).",
            ),
            _c(
                "function",
                "VARCHAR",
                "",
                "Function name: a Python function (`load_batch`, `<module>`), a symbol, an address "
                "where nsys could not resolve one (0x7fc4e38ac2ec), or a Kineto built-in "
                "(`<built-in method mul_ of Tensor object at 0x...>`).",
            ),
            _c(
                "file",
                "VARCHAR",
                "",
                "Python source file as the capture gives it (nsys: absolute; Kineto: relative to "
                "its sys.path entry, `torch/nn/modules/module.py`); NULL for native frames.",
            ),
            _c("line", "INTEGER", "", "Line in `file` (Python frames); NULL otherwise."),
            _c("module", "VARCHAR", "", "Binary or library of a native frame (/usr/lib/.../libc.so.6)."),
            _c(
                "user",
                "BOOLEAN",
                "",
                "The program's own code, not a library: false for Python files under site-packages / "
                "dist-packages, the standard library, built-ins and known packages (torch, numpy, "
                "transformers...); for native frames in system and vendor libraries (/usr, /lib, "
                "CUDA, libpython, libtorch), the kernel and nsys' injection libraries.",
            ),
        ),
        "nsys",
    ),
    Table(
        "stacks",
        "Call stacks as lists of frames, each distinct list once per report: one row per stack "
        "and depth. Copied on first use with `stack_frames`.",
        (
            RID,
            _c("stack_id", "BIGINT", "", "The stack's id in its report; joins `stack_events.stack_id`."),
            _c("depth", "INTEGER", "", "Position in the stack: 0 the innermost frame, callers above."),
            _c("frame_id", "BIGINT", "", "`stack_frames.frame_id` of the frame at that depth."),
        ),
        "nsys",
    ),
    Table(
        "stack_events",
        "What carried each stack: a CPU or Python sample, a CUDA or OS runtime call with its "
        "backtrace, a PyTorch-profiler Python frame. Copied on first use with `stack_frames`.",
        (
            RID,
            _c(
                "source",
                "VARCHAR",
                "",
                "'cpu_sample' (nsys `-s cpu`: native frames), 'python_sample' (nsys "
                "`--python-sampling`), 'cuda_call' (`--cudabacktrace`: the native stack of a CUDA "
                "API call), 'python_cuda' (`--python-backtrace=cuda`: its Python stack, below it the "
                "call's native frames up to the interpreter's when `--cudabacktrace` recorded them), "
                "'osrt_call' (an OS runtime call's backtrace), 'kineto_python' (a PyTorch "
                "profiler `python_function` event, its stack the frames enclosing it) or "
                "'kineto_callstack' (an op of a PyTorch 1.8-1.12 trace and its `Call stack` argument).",
            ),
            _c("start_ns", "BIGINT", "ns", "When the sample was taken, or the call or frame started."),
            _c(
                "end_ns",
                "BIGINT",
                "ns",
                "When the call or frame ended; NULL for samples (a sample is an instant).",
            ),
            PID,
            TID,
            GTID,
            _c(
                "stack_id",
                "BIGINT",
                "",
                "`stacks.stack_id`; NULL when the capture kept the event but not its frames (nsys "
                "Python samples exported without `--include-blobs=true`).",
            ),
            _c(
                "thread_state",
                "VARCHAR",
                "",
                "The thread's state when sampled: 'Running', 'Blocking Wait', 'Uninterruptible' "
                "(Python samples), 'Running', 'Interruptible'... (CPU samples); NULL for calls.",
            ),
            _c(
                "correlation_id",
                "BIGINT",
                "",
                "cuda_call and python_cuda: the CUDA API call's correlation id, which joins "
                "`cuda_api` (same pid) and the kernel or copy it launched.",
            ),
        ),
        "nsys",
    ),
    Table(
        "gpus",
        "GPUs of the capture (nsys TARGET_INFO_GPU).",
        (
            RID,
            DEV,
            _c("name", "VARCHAR", "", "Marketing name (NVIDIA H100 80GB HBM3)."),
            _c("bus_location", "VARCHAR", "", "PCI bus location."),
            _c("sm_count", "INTEGER", "", "Streaming multiprocessors."),
            _c("total_memory_bytes", "BIGINT", "byte", "Device memory."),
            _c("memory_bandwidth_bps", "BIGINT", "byte/s", "Peak DRAM bandwidth."),
            _c("clock_rate_hz", "BIGINT", "hz", "SM clock."),
            _c("compute_capability", "VARCHAR", "", "major.minor, e.g. 9.0."),
        ),
        "nsys",
    ),
    Table(
        "processes",
        "Processes of the capture (nsys PROCESSES).",
        (RID, PID, GPID, _c("name", "VARCHAR", "", "Process name.")),
        "nsys",
    ),
    Table(
        "ncu_kernels",
        "One row per kernel launch profiled by Nsight Compute; for a `--print-summary` export, "
        "one row per summarized kernel, standing for its `invocations` launches.",
        (
            RID,
            _c(
                "launch_id",
                "INTEGER",
                "",
                "ncu's `ID` column: launch index within the report. Summaries (`--print-summary "
                "per-kernel` or `per-gpu`) have no ID: the 0-based index of the kernel's row group "
                "in file order.",
            ),
            _c("name", "VARCHAR", "", "Kernel name as ncu wrote it (`Kernel Name`)."),
            _c("pid", "BIGINT", "", "Process id."),
            _c("process_name", "VARCHAR", "", "Process name."),
            _c("host_name", "VARCHAR", "", "Host name."),
            _c("device_id", "INTEGER", "", "CUDA device id."),
            _c("cc", "VARCHAR", "", "Compute capability, e.g. 9.0."),
            _c("grid", "VARCHAR", "", "Grid size as written, e.g. (128, 1, 1)."),
            _c("block", "VARCHAR", "", "Block size as written, e.g. (256, 1, 1)."),
            _c("context_id", "BIGINT", "", "CUDA context id."),
            _c("stream_id", "BIGINT", "", "CUDA stream id."),
            _c(
                "invocations",
                "BIGINT",
                "",
                "Launches a `--print-summary` row aggregates (`Invocations`); its metrics are "
                "their Average / Minimum / Maximum. NULL for per-launch exports (one launch).",
            ),
            _c(
                "demangled_name",
                "VARCHAR",
                "",
                "Full demangled name, namespaces and casts kept, as nsys's demangledName spells "
                "it (`.ncu-rep` reports; NULL for CSV exports).",
            ),
            _c(
                "mangled_name",
                "VARCHAR",
                "",
                "Mangled symbol, as nsys's mangledName (`.ncu-rep` reports; NULL for CSV exports).",
            ),
            _c(
                "nvtx_ranges",
                "VARCHAR",
                "",
                "NVTX push/pop ranges open on the launching thread, outermost first, joined by "
                "` > ` (`step 0 > optimizer`); ranges of a domain other than the default one are "
                "written `domain:range`. Needs `ncu --nvtx` (CSV exports: its NVTX columns); NULL without it.",
            ),
        ),
        "ncu",
    ),
    Table(
        "ncu_metrics",
        "One row per kernel and metric; values converted to base units. For a `--print-summary` "
        "export, `value` is the Average over the kernel's invocations.",
        (
            RID,
            _c("launch_id", "INTEGER", "", "Joins ncu_kernels.launch_id."),
            _c("section", "VARCHAR", "", "ncu section (Speed Of Light, Occupancy...)."),
            _c("metric_name", "VARCHAR", "", "Metric name (gpu__time_duration.sum) when known."),
            _c("metric_label", "VARCHAR", "", "Metric label (Duration) when known."),
            _c("unit", "VARCHAR", "", "Base unit: ns, byte, hz, byte/s, %, count, or as written."),
            _c(
                "value",
                "DOUBLE",
                "",
                "Numeric value in `unit` (summaries: the Average); NULL when not a number.",
            ),
            _c(
                "value_min",
                "DOUBLE",
                "",
                "Summaries: the Minimum over the invocations, in `unit`. NULL for per-launch exports.",
            ),
            _c(
                "value_max",
                "DOUBLE",
                "",
                "Summaries: the Maximum over the invocations, in `unit`. NULL for per-launch exports.",
            ),
            _c(
                "value_text",
                "VARCHAR",
                "",
                "The value exactly as written in the CSV (summaries: the Average cell).",
            ),
        ),
        "ncu",
    ),
    Table(
        "ncu_rules",
        "ncu rule results (guided analysis) when the export has rule rows.",
        (
            RID,
            _c("launch_id", "INTEGER", "", "Joins ncu_kernels.launch_id."),
            _c("section", "VARCHAR", "", "Section the rule belongs to."),
            _c("rule_name", "VARCHAR", "", "Rule name."),
            _c("rule_type", "VARCHAR", "", "OPT, INF, WRN or ERR."),
            _c("description", "VARCHAR", "", "Rule text."),
            _c("est_speedup", "DOUBLE", "%", "Estimated speedup."),
            _c("est_speedup_type", "VARCHAR", "", "local or global."),
        ),
        "ncu",
    ),
    Table(
        "ncu_metric_instances",
        "Per-instance values of ncu metrics that have them (per SM, per unit, per PC...): what a "
        "`--print-metric-instances values|details` export prints in parentheses after the value, "
        "and what a `.ncu-rep` holds for every instanced metric. `ncu_metrics` keeps the aggregate.",
        (
            RID,
            _c("launch_id", "INTEGER", "", "Joins ncu_kernels.launch_id."),
            _c("metric_name", "VARCHAR", "", "Metric name (gpu__time_duration.sum) when known."),
            _c("metric_label", "VARCHAR", "", "Metric label when known."),
            _c("instance", "INTEGER", "", "0-based position of the instance in ncu's order."),
            _c(
                "instance_key",
                "VARCHAR",
                "",
                "The instance's correlation id as written (an SM id, a PC address) when the source "
                "has one; NULL for value-only instances.",
            ),
            _c("unit", "VARCHAR", "", "Base unit, as ncu_metrics.unit."),
            _c("value", "DOUBLE", "", "Numeric value in `unit`; NULL when not a number."),
            _c("value_text", "VARCHAR", "", "The instance's value exactly as written."),
        ),
        "ncu",
    ),
    # --- ncu CSV extras (section body text, source page) go here ---
    Table(
        "ncu_section_text",
        "What ncu prints in a section's body besides its header metrics (`--print-details body|all`): "
        "chart and table items (entry 'item'), free text lines (entry 'text') and tables printed as CSV "
        "(entry 'table'), attached to their launch, and items to their section.",
        (
            RID,
            _c("launch_id", "INTEGER", "", "Joins ncu_kernels.launch_id."),
            _c(
                "section",
                "VARCHAR",
                "",
                "entry 'item': the item's section. NULL for 'text' and 'table': ncu's CSV does not "
                "name their section.",
            ),
            _c(
                "after_section",
                "VARCHAR",
                "",
                "entry 'text' and 'table': the section of the CSV row printed just before (with "
                "`--print-details all` a section's tables follow its own rows).",
            ),
            _c("entry", "VARCHAR", "", "'item' (a body metric), 'text' (a text line) or 'table'."),
            _c("seq", "INTEGER", "", "0-based position among the launch's body rows, in file order."),
            _c(
                "item", "VARCHAR", "", "Body item (chart or table) the metric belongs to (`Body Item Label`)."
            ),
            _c("metric_label", "VARCHAR", "", "entry 'item': the metric's label as written."),
            _c("unit", "VARCHAR", "", "entry 'item': base unit, as ncu_metrics.unit."),
            _c(
                "value",
                "DOUBLE",
                "",
                "entry 'item': the value (the aggregate when instances follow) in `unit`.",
            ),
            _c(
                "text",
                "VARCHAR",
                "",
                "The value as written (items), the line without its indent (text), or the table's CSV "
                "lines joined by newlines (table).",
            ),
        ),
        "ncu",
    ),
    Table(
        "ncu_source",
        "ncu's source page (`ncu -i REPORT --csv --page source`): per kernel, one row per CUDA source "
        "line (granularity 'line', `--print-source cuda,sass` of a -lineinfo build) and per SASS instruction "
        "(granularity 'sass'), with their warp stall samples. Per-reason samples are in ncu_source_stalls.",
        (
            RID,
            _c(
                "launch_id",
                "INTEGER",
                "",
                "The kernel's 0-based position in the export (the source page prints no launch ID); "
                "joins ncu_kernels of the same report.",
            ),
            _c("seq", "INTEGER", "", "0-based position of the row within the kernel's listing."),
            _c("granularity", "VARCHAR", "", "'line' (a CUDA source line) or 'sass' (an instruction)."),
            _c("file", "VARCHAR", "", "Source file (`File Path`); NULL without line info."),
            _c("line", "INTEGER", "", "Source line number; for a 'sass' row the line it was listed under."),
            _c("source", "VARCHAR", "", "granularity 'line': the CUDA source text of the line."),
            _c("address", "VARCHAR", "", "granularity 'sass': the instruction's address as written (hex)."),
            _c("sass", "VARCHAR", "", "granularity 'sass': the instruction (`@P0 EXIT`), indent removed."),
            _c("samples", "BIGINT", "sample", "Warp stall samples (`Warp Stall Sampling (All Samples)`)."),
            _c(
                "samples_not_issued",
                "BIGINT",
                "sample",
                "Samples of warps not issuing (`Warp Stall Sampling (Not-issued Samples)`).",
            ),
            _c("instructions_executed", "BIGINT", "inst", "Warp-level instructions executed."),
        ),
        "ncu",
    ),
    Table(
        "ncu_source_stalls",
        "Warp stall samples of one ncu_source row by stall reason (the source page's `stall_*` "
        "columns, in long form); reasons with no sample are left out.",
        (
            RID,
            _c("launch_id", "INTEGER", "", "Joins ncu_source.launch_id."),
            _c("seq", "INTEGER", "", "Joins ncu_source.seq."),
            _c(
                "reason",
                "VARCHAR",
                "",
                "Stall reason as ncu names the column, without `stall_` (long_sb, wait...).",
            ),
            _c("samples", "BIGINT", "sample", "Samples stalled on this reason."),
            _c("samples_not_issued", "BIGINT", "sample", "Of those, samples of warps not issuing."),
        ),
        "ncu",
    ),
    # --- Kineto (cpu_ops, ...) go here ---
    Table(
        "cpu_ops",
        "Host-side operations the PyTorch profiler records (Kineto categories `cpu_op`, "
        "`user_annotation`, `python_function`): aten ops, autograd functions, `record_function` "
        "ranges, `ProfilerStep#N`, Python frames. Ops nest by time on their thread; the kernels an "
        "op launched are those whose CUDA API call (cuda_api, same pid and tid) starts inside it.",
        (
            *HOST_TIMELINE,
            _c("name", "VARCHAR", "", "Op name (aten::mm, ProfilerStep#3, nn.Module: Linear_0)."),
            _c("category", "VARCHAR", "", "'cpu_op', 'user_annotation' or 'python_function'."),
            _c("external_id", "BIGINT", "", "Kineto `External id`: joins an op to its CUDA API calls."),
            _c(
                "sequence_number",
                "BIGINT",
                "",
                "Autograd sequence number: joins a forward op to its backward.",
            ),
            _c("fwd_thread_id", "BIGINT", "", "Backward ops: the thread id of their forward op."),
            _c("record_function_id", "BIGINT", "", "Kineto `Record function id`."),
            _c(
                "input_dims",
                "VARCHAR",
                "",
                "Input shapes as JSON (`record_shapes=True`), e.g. [[32, 512], [512]].",
            ),
            _c("input_types", "VARCHAR", "", 'Input dtypes as JSON, e.g. ["float", "float"].'),
            _c("flops", "BIGINT", "count", "Floating-point operations (`with_flops=True`), when estimated."),
            _c(
                "call_stack",
                "VARCHAR",
                "",
                "Kineto `Call stack` as written (torch 1.8-1.12 with `with_stack=True`): the op's Python "
                "stack as `;`-separated frames, e.g. `train.py(88): step;train.py(120): main`; NULL in newer "
                "traces, which record Python frames as `python_function` ops instead.",
            ),
        ),
        "kineto",
    ),
    Table(
        "flow_links",
        "Kineto flow events (`ph` s/f): `ac2g` joins a CUDA API call to the GPU activity it "
        "launched (as correlation_id does), `fwdbwd` a forward op to its backward op.",
        (
            RID,
            _c(
                "category",
                "VARCHAR",
                "",
                "Flow category (the event's `cat`): 'ac2g', 'fwdbwd', or as the trace names it.",
            ),
            _c("flow_id", "BIGINT", "", "The flow's id (the correlation id for ac2g)."),
            _c("src_pid", "BIGINT", "", "Process of the flow's start."),
            _c("src_tid", "BIGINT", "", "Thread of the flow's start."),
            _c("src_ns", "BIGINT", "ns", "Time of the flow's start."),
            _c("dst_pid", "BIGINT", "", "Process of the flow's end (NULL when the trace lacks it)."),
            _c("dst_tid", "BIGINT", "", "Thread of the flow's end."),
            _c("dst_ns", "BIGINT", "ns", "Time of the flow's end."),
        ),
        "kineto",
    ),
    Table(
        "memory_events",
        "Device (and host) memory allocations and frees over time: nsys "
        "CUDA_GPU_MEMORY_USAGE_EVENTS (`--cuda-memory-usage=true`) and the PyTorch profiler's "
        "`[memory]` events (`profile_memory=True`). Bytes held at a time = running sum of delta_bytes "
        "(or allocated_bytes where the source states it).",
        (
            RID,
            _c("device_id", "INTEGER", "", "CUDA device id; NULL for host memory."),
            PID,
            GPID,
            _c("tid", "BIGINT", "", "Thread id when the source has it."),
            _c("ts_ns", "BIGINT", "ns", "When it happened, on the report's timeline."),
            _c("operation", "VARCHAR", "", "'alloc' or 'free'."),
            _c("bytes", "BIGINT", "byte", "Size of the allocation (always >= 0)."),
            _c("delta_bytes", "BIGINT", "byte", "+bytes for an allocation, -bytes for a free."),
            _c("address", "BIGINT", "", "Address when the source has it."),
            _c(
                "memory",
                "VARCHAR",
                "",
                "'device', 'pinned', 'pageable', 'managed', 'host' or as the source names it.",
            ),
            _c(
                "allocated_bytes",
                "BIGINT",
                "byte",
                "Bytes allocated on this device/process after the event, when the source states it "
                "(Kineto `Total Allocated`); NULL otherwise.",
            ),
            _c(
                "reserved_bytes",
                "BIGINT",
                "byte",
                "Bytes reserved by the caching allocator after the event (Kineto `Total Reserved`).",
            ),
            _c("name", "VARCHAR", "", "What the source calls the allocation, when it says."),
        ),
        "nsys",
    ),
    # --- GPU metrics go here ---
    Table(
        "gpu_metrics",
        "GPU hardware metrics sampled by nsys (`--gpu-metrics-devices`; nsys GPU_METRICS and "
        "TARGET_INFO_GPU_METRICS), one row per sample and metric. Metric names differ per GPU and "
        "nsys version; `metric` is the stable canonical name (docs/gpu_metrics.md), `raw_name` "
        "what nsys called it. A sample describes [ts_ns, ts_ns + period_ns).",
        (
            RID,
            DEV,
            _c("ts_ns", "BIGINT", "ns", "Sample start, on the report's timeline."),
            _c(
                "period_ns",
                "BIGINT",
                "ns",
                "Time the sample covers: to the next sample of the same metric (the last one: "
                "the previous interval).",
            ),
            _c(
                "metric",
                "VARCHAR",
                "",
                "Canonical name: sm_active, sm_issue, tensor_active, warps_in_flight, "
                "unallocated_warps, dram_read, dram_write, dram_read_bytes, dram_write_bytes, "
                "pcie_rx, pcie_tx, nvlink_rx, nvlink_tx, gr_active, gpc_clock, sys_clock, ...; "
                "a metric without one keeps its raw name in lower case with underscores.",
            ),
            _c("raw_name", "VARCHAR", "", "The metric's name in the export (SMs Active [Throughput %])."),
            _c(
                "unit",
                "VARCHAR",
                "",
                "'%' (of the unit's peak over the sample), 'byte/s', 'hz', 'warp', or the raw unit.",
            ),
            _c("value", "DOUBLE", "", "The sample's value in `unit`."),
        ),
        "nsys",
    ),
    # --- power / energy go here ---
    Table(
        "power_samples",
        "GPU power samples from a power log ingested as its own report (an NVML sampler's CSV, "
        "`nvidia-smi --query-gpu=... --format=csv`). Times are UTC wall clock, so the samples line "
        "up with every report whose session they cover (`reports.session_start_utc_ns`); the "
        "`energy` query does that alignment.",
        (
            RID,
            _c("device_id", "INTEGER", "", "GPU index as the logger numbered it (NVML / nvidia-smi index)."),
            _c("ts_utc_ns", "BIGINT", "ns", "When the sample was taken, UTC epoch nanoseconds."),
            _c(
                "power_w",
                "DOUBLE",
                "W",
                "Power the driver reported (NVML power usage, nvidia-smi `power.draw`): on Ampere "
                "(except GA100) and newer GPUs an average over the last second.",
            ),
            _c("power_instant_w", "DOUBLE", "W", "Instantaneous power (nvidia-smi `power.draw.instant`)."),
            _c(
                "energy_j",
                "DOUBLE",
                "J",
                "The driver's total-energy counter (NVML total energy consumption) when logged: "
                "joules since the driver loaded; its deltas are the energy actually drawn.",
            ),
            _c("sm_clock_hz", "BIGINT", "hz", "SM clock."),
            _c("memory_clock_hz", "BIGINT", "hz", "Memory clock."),
            _c("gpu_util_pct", "DOUBLE", "%", "GPU utilisation the driver reported."),
            _c("memory_used_bytes", "BIGINT", "byte", "Device memory in use (nvidia-smi `memory.used`)."),
            _c("temperature_c", "DOUBLE", "C", "GPU temperature."),
            _c("source", "VARCHAR", "", "'nvml' or 'nvidia-smi'."),
        ),
        "power",
    ),
    # --- runs: the ranks of one distributed job, and their communication ---
    Table(
        "runs",
        "A run: the ranks of one job (one report per rank, or one report holding several ranks), "
        "analysed as one unit. `nsa ingest --run NAME FILES...` makes one; Kineto traces that carry "
        "`distributedInfo` and files named `...rank3...` form one without help.",
        (
            _c("run_id", "INTEGER", "", "Workspace-unique id, assigned when the run is made."),
            _c("name", "VARCHAR", "", "The run's name (`--run NAME`, else made from the file names)."),
            _c(
                "world_size",
                "INTEGER",
                "",
                "Ranks in the job (the traces' own world size, else the ranks seen).",
            ),
            _c("ranks_seen", "INTEGER", "", "Ranks of the job the workspace holds (rows of `ranks`)."),
            _c("hosts", "INTEGER", "", "Distinct hosts of those ranks (1 when unknown)."),
            _c(
                "rank_source",
                "VARCHAR",
                "",
                "How the ranks were found: 'distributedInfo', 'file name', 'processes', 'order'.",
            ),
            _c(
                "clock_source",
                "VARCHAR",
                "",
                "How the ranks' clocks were aligned: 'session start' (each report's wall-clock start, "
                "one host), 'collective ends' (the ends of matched collectives, hosts differ or no "
                "wall clock), 'one report' (all ranks in one capture: one clock).",
            ),
            _c(
                "clock_uncertainty_ns",
                "BIGINT",
                "ns",
                "How far two ranks' times may still be off after alignment: 0 within one report; the "
                "spread of the matched collective ends otherwise.",
            ),
            _c("created_at", "TIMESTAMP", "", "When the run was made (UTC)."),
        ),
        "workspace",
    ),
    Table(
        "ranks",
        "The ranks of each run: which report (and process and GPU of it) holds each rank, and the "
        "offset that puts the report's times on the run's common clock (time 0: the earliest "
        "rank's session start).",
        (
            _c("run_id", "INTEGER", "", "`runs.run_id`."),
            _c("rank", "INTEGER", "", "Global rank, 0-based."),
            _c("local_rank", "INTEGER", "", "Rank among the ranks of its host (NULL when unknown)."),
            _c("host", "VARCHAR", "", "Host name (NULL when unknown)."),
            RID,
            _c(
                "pid",
                "BIGINT",
                "",
                "The rank's process, when its report holds several ranks; else NULL (the whole report).",
            ),
            _c(
                "device_id",
                "INTEGER",
                "",
                "The GPU the rank's kernels ran on (the busiest one of its process).",
            ),
            _c(
                "rank_source",
                "VARCHAR",
                "",
                "How the rank was found: 'distributedInfo', 'file name', 'processes' (device order of "
                "the processes of one report), 'order'.",
            ),
            _c(
                "clock_offset_ns",
                "BIGINT",
                "ns",
                "Add to the report's start_ns / end_ns to place them on the run's clock.",
            ),
            _c(
                "seq_offset",
                "BIGINT",
                "",
                "Add to the rank's `comm_ops.seq` to number its collectives as the run does: a "
                "profiling window that opens at a different collective on each rank (PyTorch "
                "profiler schedules) shifts them; found from the aligned collective ends.",
            ),
        ),
        "workspace",
    ),
    Table(
        "comm_ops",
        "Communication kernels (NCCL, RCCL, NVSHMEM) of each report, with what their names and "
        "the profiler's arguments say: the collective, data type, algorithm and protocol (from "
        "`ncclDevKernel_AllReduce_Sum_f32_RING_LL`-style names), and message size and process "
        "group where Kineto records them (`Collective name`, `In msg nelems`, `dtype`, `Group "
        "size`, `Process Group Name`). Each op's `seq` orders it within its channel on its "
        "process, which is how `collectives` matches the same collective across ranks.",
        (
            *DEVICE_TIMELINE,
            CORR,
            _c("name", "VARCHAR", "", "Kernel name (`kernel_names.name`)."),
            _c(
                "library",
                "VARCHAR",
                "",
                "'nccl', 'rccl' (RCCL keeps NCCL's kernel names: 'rccl' only where the name says rccl, "
                "e.g. `..._rccl_bfloat16`) or 'nvshmem' (`nvshmem*` kernels, `*_on_stream_kernel` collectives).",
            ),
            _c(
                "op",
                "VARCHAR",
                "",
                "all_reduce, all_gather, reduce_scatter, reduce, broadcast, all_to_all, send_recv, "
                "send, recv, barrier, gather, scatter, or 'unknown' (`ncclDevKernel_Generic` without "
                "arguments, NVSHMEM kernels whose name says no collective). Kineto's `Collective name` "
                "wins over the kernel name (a `barrier` runs an AllReduce kernel; `send` and `recv` "
                "run SendRecv).",
            ),
            _c(
                "reduce_op",
                "VARCHAR",
                "",
                "sum, prod, min, max, minmax, premulsum, sumpostdiv, avg, as the kernel name says; NULL "
                "for collectives that do not reduce. NCCL builds its reduction kernels for Sum only and "
                "runs the other reductions through them, so 'sum' may be another reduction.",
            ),
            _c(
                "dtype",
                "VARCHAR",
                "",
                "Element type: f32, f16, bf16, f64, f8e4m3, f8e5m2, i8, u8, i16, i32, u32, i64, u64, bool, "
                "c64, ... From Kineto's `dtype` when recorded (the tensor's type), else from the name of "
                "a reduction kernel (NCCL 2.19+ runs signed-integer sums on its unsigned kernels: u32 "
                "may be i32); NULL otherwise: copy and point-to-point kernels move bytes, their "
                "`int8_t` is filler.",
            ),
            _c(
                "algorithm",
                "VARCHAR",
                "",
                "ring, tree, collnet, collnet_direct, collnet_chain, nvls, nvls_tree, pat, or a symmetric "
                "kernel's algorithm as written (`agxll_r`), as the kernel name says; NULL unknown. This is "
                "the kernel's specialisation: NCCL compiles a kernel for few algorithms and runs the "
                "others through it (from 2.19 every non-tree reduction kernel is named RING), so only "
                "'tree' is firm.",
            ),
            _c(
                "protocol",
                "VARCHAR",
                "",
                "ll, ll128, simple, as the kernel name says; NULL unknown. Also the kernel's "
                "specialisation: NCCL names its collective kernels LL and runs LL128 and SIMPLE work "
                "through them, so 'll' from a name says little.",
            ),
            _c("in_nelems", "BIGINT", "count", "Input elements (Kineto `In msg nelems`); NULL from nsys."),
            _c("out_nelems", "BIGINT", "count", "Output elements (Kineto `Out msg nelems`); NULL from nsys."),
            _c(
                "message_bytes",
                "BIGINT",
                "byte",
                "The collective's size as nccl-tests reports it: max(in_nelems, out_nelems) times the "
                "element size of `dtype`. The larger buffer because that is the whole message "
                "(all_gather's output, reduce_scatter's input; all_reduce's are equal), which the "
                "bus-bandwidth factors assume. NULL when the profiler recorded no counts (nsys).",
            ),
            _c("group_size", "INTEGER", "", "Ranks in the communicator (Kineto `Group size`); nsys: NULL."),
            _c(
                "process_group",
                "VARCHAR",
                "",
                "Process group name (Kineto `Process Group Name`); NULL from nsys (NCCL's own NVTX "
                "ranges, which name the communicator, are not read yet).",
            ),
            _c(
                "channel",
                "VARCHAR",
                "",
                "What ops are ordered on: 'pg ' || process_group when known, else 'stream N': the op's "
                "stream (device, stream id) numbered 1, 2, ... by first use among its process's "
                "communication streams (stream ids differ between ranks; the order of first use does not).",
            ),
            _c(
                "seq",
                "BIGINT",
                "",
                "Order of the op in its channel on its process (report_id, pid, channel), by start_ns: 0, "
                "1, ... from the channel's first op whose arguments the profiler recorded. A Kineto "
                "trace opens with kernels launched before its window, whose arguments it missed (a "
                "number that differs between ranks); they count back from it (-1: the op just before), "
                "so the same seq is the same collective on every rank. nsys: from 0.",
            ),
        ),
        "nsys",
    ),
    Table(
        "collectives",
        "Each rank's part of each collective of a run, matched across ranks: the same channel and "
        "`seq` on every rank is one collective. Times are on the run's clock (`ranks.clock_offset_ns`).",
        (
            _c("run_id", "INTEGER", "", "`runs.run_id`."),
            _c("channel", "VARCHAR", "", "`comm_ops.channel`."),
            _c(
                "seq", "BIGINT", "", "`comm_ops.seq`: with channel, the collective's identity within the run."
            ),
            _c("rank", "INTEGER", "", "The rank."),
            RID,
            PID,
            DEV,
            STREAM,
            _c("op", "VARCHAR", "", "`comm_ops.op`."),
            _c("dtype", "VARCHAR", "", "`comm_ops.dtype`."),
            _c("algorithm", "VARCHAR", "", "`comm_ops.algorithm`."),
            _c("protocol", "VARCHAR", "", "`comm_ops.protocol`."),
            _c("message_bytes", "BIGINT", "byte", "`comm_ops.message_bytes`."),
            _c("group_size", "INTEGER", "", "`comm_ops.group_size`."),
            _c("start_ns", "BIGINT", "ns", "Kernel start on the run's clock."),
            _c("end_ns", "BIGINT", "ns", "Kernel end on the run's clock."),
            DUR,
        ),
        "workspace",
        view="SELECT r.run_id, c.channel, c.seq + coalesce(r.seq_offset, 0) AS seq, r.rank, c.report_id, c.pid, c.device_id, c.stream_id, "
        "c.op, c.dtype, c.algorithm, c.protocol, c.message_bytes, c.group_size, "
        "c.start_ns + coalesce(r.clock_offset_ns, 0) AS start_ns, "
        "c.end_ns + coalesce(r.clock_offset_ns, 0) AS end_ns, c.duration_ns\n"
        "FROM comm_ops AS c JOIN ranks AS r ON r.report_id = c.report_id AND (r.pid IS NULL OR r.pid = c.pid)",
    ),
    # --- diff baselines go here ---
    Table(
        "diff_baselines",
        "Named baselines for `nsa diff`: `nsa diff --baseline NAME --save REPORT...` stores the "
        "report(s) under NAME (replacing what it held), `nsa diff --baseline NAME REPORT` compares "
        "a new run with them. One row per report, so a baseline can be a group (all ranks of a run).",
        (
            _c("name", "VARCHAR", "", "Baseline name (`main`, `release-1.2`)."),
            RID,
            _c("saved_at", "TIMESTAMP", "", "When the baseline was stored (UTC)."),
        ),
        "workspace",
    ),
)

BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}


# Columns worked out on first read rather than copied with their table: name -> (table, columns).
# What reads them names the set in its `-- reads` line beside the table (`-- reads nvtx_ranges,
# nvtx_kernels`), so that reading the table alone does not pay for them; the name is the deferred
# step that computes them (`reports.deferred_steps`).
COMPUTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "nvtx_kernels": ("nvtx_ranges", ("kernels", "kernel_ns", "process_kernels", "process_kernel_ns")),
    "gpu_launches": (
        "gpu_timeline",
        ("api_calls", "api_start_ns", "api_end_ns", "api_global_tid"),
    ),
    "gpu_comm": ("gpu_timeline", ("comm", "prev_compute_end_ns")),
}

STORED: tuple[Table, ...] = tuple(t for t in TABLES if not t.view)
VIEWS: tuple[Table, ...] = tuple(t for t in TABLES if t.view)


def ddl_statements() -> list[str]:
    """Tables first, then the views over them."""
    return [t.ddl() for t in (*STORED, *VIEWS)]
