"""Nsight Systems: SQLite exports (reader_sqlite.py) and .nsys-rep reports through nsys (reader_rep.py)."""
