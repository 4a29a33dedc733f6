"""What the operator and the agent need from the Kubernetes API, and how they reach it."""
