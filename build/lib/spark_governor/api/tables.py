"""Plain-text tables of API responses for the terminal (``spark-governor stats``, the demo)."""
from __future__ import annotations


def _fmt(value, scale: float = 1.0, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value * scale:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def stages_table(stages: list[dict]) -> str:
    """One row per stage template, summarised over the windows the API returned."""
    header = ["stage", "windows", "tasks", "service ms", "svc CV", "us/record", "latency ms",
              "interarr s", "ia CV", "util %", "records/s", "shuffle MB"]
    rows = []
    for s in stages:
        m = s.get("summary")
        if not m:
            rows.append([s["name"], "0"] + ["-"] * (len(header) - 2))
            continue
        rows.append([
            s["name"][:48], str(m["windows"]), str(m["tasks"]),
            _fmt(m["service"]["mean"], 1000), _fmt(m["service"]["cv"], 1, 2),
            _fmt(m["service_per_record"]["mean"], 1e6, 2), _fmt(m["latency"]["mean"], 1000),
            _fmt(m["interarrival"]["mean"], 1, 2), _fmt(m["interarrival"]["cv"], 1, 2),
            _fmt(m["utilization"], 100), _fmt(m["records_in_per_second"], 1, 0),
            _fmt((m["shuffle_read_bytes"] + m["shuffle_write_bytes"]) / 1e6, 1, 2),
        ])
    return _table(header, rows)


def batches_table(batches: dict) -> str:
    """Summary of the micro-batches: count, rows, durations and trigger interarrival."""
    items = batches["batches"]
    rows_total = sum(b["num_input_rows"] for b in items)
    d, ia = batches["duration"], batches["interarrival"]
    return _table(["batches", "input rows", "mean duration s", "duration CV", "mean interarrival s", "interarrival CV"],
                  [[str(len(items)), f"{rows_total:,}", _fmt(d["mean"], 1, 3), _fmt(d["cv"], 1, 2),
                    _fmt(ia["mean"], 1, 3), _fmt(ia["cv"], 1, 2)]])
