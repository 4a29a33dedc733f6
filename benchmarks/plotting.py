"""matplotlib (the `bench` extra) for the benchmarks' PNG plots: loaded on demand, files only."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend; RuntimeError naming the extra when it is not installed."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("the plots need matplotlib: pip install -e '.[bench]'") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> Path:
    """Lay out, write `path` (its folder created) at the resolution of every plot here, and close."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path
