"""colocation: let batch workloads use the CPU and memory that latency-sensitive workloads leave idle."""

__version__ = "0.1.0"
