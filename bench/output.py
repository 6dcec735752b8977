"""Where benchmarks put their results: JSON reports and PNG plots under ``bench-results/``."""
from __future__ import annotations

import json
from pathlib import Path


def write_json(report: dict, path: str, indent: int = 1) -> None:
    """Write ``report`` as JSON to ``path``, creating its folder."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(report, indent=indent))


def save_figure(fig, path: str, dpi: int = 100) -> None:
    """Save a matplotlib figure as PNG to ``path`` (creating its folder) and close it."""
    import matplotlib.pyplot as plt

    if not path:
        plt.close(fig)
        raise ValueError("no path for the figure")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
