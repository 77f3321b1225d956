"""asrbench: a reproducible speed and accuracy benchmark for OASR and its peers.

Run as `python -m benchmarks.asrbench --help`; see docs/benchmarking.md.
"""

SUITE_VERSION = "2.0"
"""Recorded in every run, validation and dataset card; bumped when what is measured changes."""
