"""Nsight Compute: CSV exports (reader_csv.py) and .ncu-rep reports through ncu_report (reader_rep.py)."""
