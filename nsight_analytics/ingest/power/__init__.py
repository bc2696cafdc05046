"""GPU power logs: NVML samples (reader_nvml.py) and nvidia-smi CSV (reader_smi.py)."""
