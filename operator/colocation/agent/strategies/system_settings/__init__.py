"""System settings: the NodeSLO's systemStrategy written to /proc/sys/vm (only with --system-settings)."""
