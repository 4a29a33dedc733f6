"""Batch cgroups: batch pods' kubernetes.io/batch-cpu and batch-memory written to their cgroups."""
