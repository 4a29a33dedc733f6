"""The sandbox: a Kubernetes API server on this machine, with the project's processes around it.

`server` is the in-memory API server proper and depends on colocation.apimachinery only; the
rest starts and supervises processes (operator replicas, node agents, simulated nodes) and wires
the server up for them.
"""
