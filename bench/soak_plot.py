"""Plots one soak CSV (taskbroker-bench --soak) as a PNG: broker RSS, dispatch
p50/p99, throughput, and the database's size over time.

    python bench/soak_plot.py SOAK.csv OUT.png "TITLE"

Uses matplotlib (bench/soak.sh installs it into bench/.venv from PyPI).
"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def column(rows, name):
    out = []
    for r in rows:
        v = r.get(name, "")
        out.append(float(v) if v not in ("", "NaN", "nan") else None)
    return out


def plot(ax, x, rows, names, ylabel):
    drew = False
    for name in names:
        ys = column(rows, name)
        pts = [(a, b) for a, b in zip(x, ys) if b is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=name, linewidth=1.2)
            drew = True
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if drew:
        ax.legend(fontsize=7, loc="upper left")
    ax.set_ylim(bottom=0)


def main():
    path, out, title = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(path) as f:
        rows = list(csv.DictReader(f))
    x = [float(r["elapsed_s"]) / 60 for r in rows]
    postgres = any(r.get("tasks_table_mb") for r in rows)
    fig, axes = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    plot(axes[0], x, rows, ["rss_mb"], "broker RSS (MiB)")
    plot(axes[1], x, rows, ["dispatch_p50_ms", "dispatch_p99_ms"], "dispatch (ms)")
    plot(axes[2], x, rows, ["throughput_per_s"], "tasks/s")
    if postgres:
        plot(
            axes[3],
            x,
            rows,
            ["tasks_table_mb", "tasks_index_mb", "attempts_table_mb", "attempts_index_mb"],
            "Postgres size (MiB)",
        )
        ax2 = axes[3].twinx()
        for name, style in (("tasks_dead_tuples", "--"), ("attempts_dead_tuples", ":")):
            ys = column(rows, name)
            ax2.plot(x, [y or 0 for y in ys], style, color="grey", label=name, linewidth=1)
        ax2.set_ylabel("dead tuples")
        ax2.legend(fontsize=7, loc="upper right")
        ax2.set_ylim(bottom=0)
    else:
        plot(axes[3], x, rows, ["sqlite_db_mb", "sqlite_wal_mb"], "SQLite files (MiB)")
    axes[3].set_xlabel("minutes")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
