"""PyTorch profiler (Kineto) Chrome trace JSON (reader.py)."""
