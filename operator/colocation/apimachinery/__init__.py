"""Kubernetes API conventions shared by every server in the project: Status errors, selectors.

Pure code with no I/O; the sandbox, the operator's aggregated API and the controllers build on it.
"""
