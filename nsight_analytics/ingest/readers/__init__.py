"""One module per input format; each defines `READER` (see ../reader.py and docs/readers.md)."""
