"""ncu metric labels and the metric names behind them.

ncu's details page writes a human label (`Duration`) unless `--print-metric-name name` was given,
and the raw page and `--metrics` exports write only names. Queries select metrics by name, so a
labels-only export needs this table to be queryable at all. It was derived from two exports of
the same H100 kernels by ncu 2025.3.1 (`h100_ncu2025.3_details_base_units.csv`, labels, and
`h100_ncu2025.3_details_metric_names.csv`, names), row by row. The key includes the section
because one label can name different metrics in different sections (`Memory Throughput` is a
percentage under Speed Of Light and a byte rate under Memory Workload Analysis).
"""

from __future__ import annotations

LABEL_TO_NAME: dict[tuple[str, str], str] = {
    ("Compute Workload Analysis", "Executed Ipc Active"): "sm__inst_executed.avg.per_cycle_active",
    ("Compute Workload Analysis", "Executed Ipc Elapsed"): "sm__inst_executed.avg.per_cycle_elapsed",
    ("Compute Workload Analysis", "Issue Slots Busy"): "sm__inst_issued.avg.pct_of_peak_sustained_elapsed",
    ("Compute Workload Analysis", "Issued Ipc Active"): "sm__inst_issued.avg.per_cycle_active",
    ("Compute Workload Analysis", "SM Busy"): "sm__instruction_throughput.avg.pct_of_peak_sustained_elapsed",
    (
        "GPU Speed Of Light Throughput",
        "Compute (SM) Throughput",
    ): "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    ("GPU Speed Of Light Throughput", "DRAM Frequency"): "dram__cycles_elapsed.avg.per_second",
    (
        "GPU Speed Of Light Throughput",
        "DRAM Throughput",
    ): "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    ("GPU Speed Of Light Throughput", "Duration"): "gpu__time_duration.sum",
    ("GPU Speed Of Light Throughput", "Elapsed Cycles"): "gpc__cycles_elapsed.max",
    (
        "GPU Speed Of Light Throughput",
        "L1/TEX Cache Throughput",
    ): "l1tex__throughput.avg.pct_of_peak_sustained_active",
    (
        "GPU Speed Of Light Throughput",
        "L2 Cache Throughput",
    ): "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    (
        "GPU Speed Of Light Throughput",
        "Memory Throughput",
    ): "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    ("GPU Speed Of Light Throughput", "SM Active Cycles"): "sm__cycles_active.avg",
    ("GPU Speed Of Light Throughput", "SM Frequency"): "gpc__cycles_elapsed.avg.per_second",
    ("GPU and Memory Workload Distribution", "Average DRAM Active Cycles"): "dram__cycles_active.avg",
    ("GPU and Memory Workload Distribution", "Average L1 Active Cycles"): "l1tex__cycles_active.avg",
    ("GPU and Memory Workload Distribution", "Average L2 Active Cycles"): "lts__cycles_active.avg",
    ("GPU and Memory Workload Distribution", "Average SM Active Cycles"): "sm__cycles_active.avg",
    ("GPU and Memory Workload Distribution", "Average SMSP Active Cycles"): "smsp__cycles_active.avg",
    ("GPU and Memory Workload Distribution", "Total DRAM Elapsed Cycles"): "dram__cycles_elapsed.sum",
    ("GPU and Memory Workload Distribution", "Total L1 Elapsed Cycles"): "l1tex__cycles_elapsed.sum",
    ("GPU and Memory Workload Distribution", "Total L2 Elapsed Cycles"): "lts__cycles_elapsed.sum",
    ("GPU and Memory Workload Distribution", "Total SM Elapsed Cycles"): "sm__cycles_elapsed.sum",
    ("GPU and Memory Workload Distribution", "Total SMSP Elapsed Cycles"): "smsp__cycles_elapsed.sum",
    ("Instruction Statistics", "Avg. Executed Instructions Per Scheduler"): "smsp__inst_executed.avg",
    ("Instruction Statistics", "Avg. Issued Instructions Per Scheduler"): "smsp__inst_issued.avg",
    ("Instruction Statistics", "Executed Instructions"): "smsp__inst_executed.sum",
    ("Instruction Statistics", "Issued Instructions"): "smsp__inst_issued.sum",
    ("Launch Statistics", "# SMs"): "launch__sm_count",
    ("Launch Statistics", "# TPCs"): "launch__tpc_count",
    ("Launch Statistics", "Block Size"): "launch__block_size",
    ("Launch Statistics", "Cluster Scheduling Policy"): "launch__cluster_scheduling_policy",
    ("Launch Statistics", "Cluster Size"): "launch__cluster_size",
    ("Launch Statistics", "Driver Shared Memory Per Block"): "launch__shared_mem_per_block_driver",
    ("Launch Statistics", "Dynamic Shared Memory Per Block"): "launch__shared_mem_per_block_dynamic",
    ("Launch Statistics", "Enabled TPC IDs"): "launch__tpc_enabled",
    ("Launch Statistics", "Function Cache Configuration"): "launch__func_cache_config",
    ("Launch Statistics", "Grid Size"): "launch__grid_size",
    ("Launch Statistics", "Registers Per Thread"): "launch__registers_per_thread",
    ("Launch Statistics", "Shared Memory Configuration Size"): "launch__shared_mem_config_size",
    ("Launch Statistics", "Stack Size"): "launch__stack_size",
    ("Launch Statistics", "Static Shared Memory Per Block"): "launch__shared_mem_per_block_static",
    ("Launch Statistics", "Threads"): "launch__thread_count",
    ("Launch Statistics", "Uses Green Context"): "launch__uses_green_context",
    ("Launch Statistics", "Waves Per SM"): "launch__waves_per_multiprocessor",
    ("Memory Workload Analysis", "L1/TEX Hit Rate"): "l1tex__t_sector_hit_rate.pct",
    ("Memory Workload Analysis", "L2 Compression Input Sectors"): "lrc__ilc_input_sectors.sum",
    (
        "Memory Workload Analysis",
        "L2 Compression Ratio",
    ): "lrc__average_ilc_output_sector_compression_achieved_rate.pct",
    (
        "Memory Workload Analysis",
        "L2 Compression Success Rate",
    ): "lrc__average_ilc_input_sector_success_rate.pct",
    ("Memory Workload Analysis", "L2 Hit Rate"): "lts__t_sector_hit_rate.pct",
    ("Memory Workload Analysis", "L2 Persisting Size"): "launch__persisting_l2_cache_size",
    (
        "Memory Workload Analysis",
        "Local Memory Spilling Request Overhead",
    ): "derived__local_spilling_requests_pct",
    ("Memory Workload Analysis", "Local Memory Spilling Requests"): "derived__local_spilling_requests",
    (
        "Memory Workload Analysis",
        "Max Bandwidth",
    ): "gpu__compute_memory_request_throughput.avg.pct_of_peak_sustained_elapsed",
    (
        "Memory Workload Analysis",
        "Mem Busy",
    ): "gpu__compute_memory_access_throughput.avg.pct_of_peak_sustained_elapsed",
    ("Memory Workload Analysis", "Mem Pipes Busy"): "sm__memory_throughput.avg.pct_of_peak_sustained_elapsed",
    ("Memory Workload Analysis", "Memory Throughput"): "dram__bytes.sum.per_second",
    ("Occupancy", "Achieved Active Warps Per SM"): "sm__warps_active.avg.per_cycle_active",
    ("Occupancy", "Achieved Occupancy"): "sm__warps_active.avg.pct_of_peak_sustained_active",
    ("Occupancy", "Block Limit Barriers"): "launch__occupancy_limit_barriers",
    ("Occupancy", "Block Limit Registers"): "launch__occupancy_limit_registers",
    ("Occupancy", "Block Limit SM"): "launch__occupancy_limit_blocks",
    ("Occupancy", "Block Limit Shared Mem"): "launch__occupancy_limit_shared_mem",
    ("Occupancy", "Block Limit Warps"): "launch__occupancy_limit_warps",
    ("Occupancy", "Cluster Occupancy"): "launch__occupancy_cluster_pct",
    ("Occupancy", "Max Active Clusters"): "launch__cluster_max_active",
    ("Occupancy", "Max Cluster Size"): "launch__cluster_max_potential_size",
    ("Occupancy", "Overall GPU Occupancy"): "launch__occupancy_cluster_gpu_pct",
    ("Occupancy", "Theoretical Active Warps per SM"): "sm__maximum_warps_avg_per_active_cycle",
    ("Occupancy", "Theoretical Occupancy"): "sm__maximum_warps_per_active_cycle_pct",
    ("PM Sampling", "# Pass Groups"): "profiler__pmsampler_pass_groups",
    ("PM Sampling", "Maximum Buffer Size"): "profiler__pmsampler_buffer_size_bytes",
    ("PM Sampling", "Maximum Sampling Interval"): "profiler__pmsampler_interval_time",
    ("Scheduler Statistics", "Active Warps Per Scheduler"): "smsp__warps_active.avg.per_cycle_active",
    ("Scheduler Statistics", "Eligible Warps Per Scheduler"): "smsp__warps_eligible.avg.per_cycle_active",
    ("Scheduler Statistics", "Issued Warp Per Scheduler"): "smsp__issue_active.avg.per_cycle_active",
    ("Scheduler Statistics", "No Eligible"): "smsp__issue_inst0.avg.pct_of_peak_sustained_active",
    ("Scheduler Statistics", "One or More Eligible"): "smsp__issue_active.avg.pct_of_peak_sustained_active",
    ("Source Counters", "Avg. Divergent Branches"): "smsp__sass_branch_targets_threads_divergent.avg",
    ("Source Counters", "Branch Efficiency"): "smsp__sass_average_branch_targets_threads_uniform.pct",
    ("Source Counters", "Branch Instructions"): "smsp__inst_executed_op_branch.sum",
    ("Source Counters", "Branch Instructions Ratio"): "derived__smsp__inst_executed_op_branch_pct",
    (
        "Warp State Statistics",
        "Avg. Active Threads Per Warp",
    ): "smsp__thread_inst_executed_per_inst_executed.ratio",
    (
        "Warp State Statistics",
        "Avg. Not Predicated Off Threads Per Warp",
    ): "smsp__thread_inst_executed_pred_on_per_inst_executed.ratio",
    (
        "Warp State Statistics",
        "Warp Cycles Per Executed Instruction",
    ): "smsp__average_warps_active_per_inst_executed.ratio",
    (
        "Warp State Statistics",
        "Warp Cycles Per Issued Instruction",
    ): "smsp__average_warp_latency_per_inst_issued.ratio",
}
