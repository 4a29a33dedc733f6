"""Benchmarks of the colocation project, run by `make bench` (`python -m benchmarks.run`).

Each benchmark measures real processes over real HTTPS, compares itself with a baseline measured
in the same run (our machines are noisy), and writes its own section of BENCHMARKS.md.
"""
