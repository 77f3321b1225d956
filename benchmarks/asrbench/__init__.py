"""asrbench: a reproducible speed and accuracy benchmark for OASR and its peers.

Run as `python -m benchmarks.asrbench --help`; see docs/benchmarking.md.
"""
