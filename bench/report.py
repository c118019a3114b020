"""Turns the JSON lines of one bench/compare.sh run into bench/results/<date>.md and a PNG.

    python bench/report.py RESULTS.jsonl OUT.md OUT.png "ONE-LINE DESCRIPTION OF THE RUN"

Each line is the last line of a taskbroker-bench or bench/peers run, plus
`rep` (repetition number) and, for a run that failed, `failed: true`. Runs with
the same system, store, mode, config, workers and backlog are one point: its
median lifecycles/s, with the other columns taken from that median run.
A peer's phased run (`shape: phased`: enqueue everything, then drain) is shown
beside its overlapping point, not as a point of its own. Runs labelled
`latency ...` carry pick-up latency loops (`latency`: closed loop and open loops
at offered rates): they make the latency table (median p99 over the runs) and
OUT-latency.png (p99 against offered rate), not throughput points.
Uses matplotlib (compare.sh installs it into bench/.venv from PyPI).
"""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# An open loop whose sends were this late (p99, against their schedule) was paced
# by the load generator, not by the system: its row says so.
SENDER_LATE_MS = 50

SYSTEM_ORDER = {"taskbroker": 0, "graphile-worker": 1, "river": 2, "pg-boss": 3}


def key(r):
    config = r.get("config") or r["mode"]
    return (r["system"], r.get("store") or "?", r["mode"], config, r["workers"], r.get("backlog") or 0)


def sort_key(k):
    system, store, mode, config, workers, backlog = k
    return (SYSTEM_ORDER.get(system, 9), store != "sqlite", mode != "per-task", config, backlog, workers)


def load(path):
    groups = defaultdict(list)
    phased = defaultdict(list)
    latency = defaultdict(list)
    failures = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if r.get("failed"):
            failures.append(r)
            continue
        if (r.get("label") or "").startswith("latency"):
            latency[(r["system"], r.get("store") or "?", r["workers"])].append(r)
        elif r.get("shape") == "phased":
            phased[key(r)].append(r["lifecycles_per_sec"])
        else:
            groups[key(r)].append(r)
    points = {}
    for k, runs in groups.items():
        runs.sort(key=lambda r: r["lifecycles_per_sec"])
        median = runs[(len(runs) - 1) // 2]  # the lower median for an even count
        points[k] = dict(median, runs=len(runs), all=[r["lifecycles_per_sec"] for r in runs])
        if k in phased:
            points[k]["phased"] = statistics.median_low(phased[k])
    return points, failures, latency_points(latency)


def latency_points(groups):
    """(system, store, workers) -> {loop key: the median run's loop by p99}, where the
    loop key is "closed" or the offered rate."""
    out = {}
    for k, runs in groups.items():
        loops = defaultdict(list)
        for r in runs:
            for loop in r.get("latency") or []:
                lk = "closed" if loop["loop"] == "closed" else loop["offered_rate"]
                if loop.get("p99_ms") is not None:
                    loops[lk].append(loop)
        out[k] = {lk: sorted(ls, key=lambda l: l["p99_ms"])[(len(ls) - 1) // 2] for lk, ls in loops.items()}
    return out


def fmt_rate(v):
    return "-" if v is None else f"{v:,.0f}"


def fmt_ms(v):
    return "-" if v is None else f"{v:.2f}"


def main_table(points):
    rows = [
        "| system | store | mode: configuration | workers | backlog | lifecycles/s | submit/s "
        "| dispatch p50 / p99 / max ms | broker RSS MiB | runs (lifecycles/s) | phased lifecycles/s |",
        "|---|---|---|---:|---:|---:|---:|---|---:|---|---:|",
    ]
    for k in sorted(points, key=sort_key):
        p = points[k]
        system, store, mode, config, workers, backlog = k
        conf = mode if config == mode else f"{mode}: {config}"
        dispatch = (
            "-"
            if p.get("dispatch_p50_ms") is None
            else f"{fmt_ms(p['dispatch_p50_ms'])} / {fmt_ms(p['dispatch_p99_ms'])} / {fmt_ms(p['dispatch_max_ms'])}"
        )
        rss = "-" if p.get("broker_rss_mb") is None else f"{p['broker_rss_mb']:.1f}"
        runs = ", ".join(fmt_rate(v) for v in p["all"])
        rows.append(
            f"| {system} | {store} | {conf} | {workers} | {backlog:,} | **{fmt_rate(p['lifecycles_per_sec'])}** "
            f"| {fmt_rate(p.get('submit_per_sec'))} | {dispatch} | {rss} | {runs} | {fmt_rate(p.get('phased'))} |"
        )
    return "\n".join(rows)


def best(points, pred):
    found = [(k, p) for k, p in points.items() if pred(k)]
    return max(found, key=lambda kp: kp[1]["lifecycles_per_sec"], default=(None, None))


def targets_table(points):
    tb = lambda store, mode: lambda k: k[0] == "taskbroker" and k[1] == store and k[2] == mode and k[5] == 0  # noqa: E731
    rows = ["| target | measured | met |", "|---|---|---|"]

    def add(target, measured, ok):
        rows.append(f"| {target} | {measured} | {'yes' if ok else 'no' if ok is not None else '?'} |")

    pg_b_k, pg_b = best(points, tb("postgres", "batched"))
    peer_k, peer = best(points, lambda k: k[0] != "taskbroker" and k[2] == "batched")
    if pg_b and peer:
        ratio = pg_b["lifecycles_per_sec"] / peer["lifecycles_per_sec"]
        add(
            "Postgres batched ahead of every peer's best (aim 1.5x)",
            f"{fmt_rate(pg_b['lifecycles_per_sec'])}/s ({pg_b_k[4]} workers) vs {peer_k[0]} {peer_k[3]} "
            f"{fmt_rate(peer['lifecycles_per_sec'])}/s ({peer_k[4]} workers): {ratio:.2f}x",
            ratio >= 1.0,
        )
    pt = points.get(("taskbroker", "postgres", "per-task", "per-task", 64, 0))
    gw = next((p for k, p in points.items() if k[0] == "graphile-worker" and k[2] == "per-task" and k[4] == 64), None)
    if pt and gw:
        ratio = pt["lifecycles_per_sec"] / gw["lifecycles_per_sec"]
        add(
            "Postgres per-task, 64 workers >= 2x graphile-worker defaults",
            f"{fmt_rate(pt['lifecycles_per_sec'])}/s vs {fmt_rate(gw['lifecycles_per_sec'])}/s: {ratio:.2f}x",
            ratio >= 2.0,
        )
    for mode, goal in (("batched", 20000), ("per-task", 8000)):
        k, p = best(points, tb("sqlite", mode))
        if p:
            add(
                f"SQLite {mode} >= {goal:,}/s",
                f"{fmt_rate(p['lifecycles_per_sec'])}/s ({k[4]} workers)",
                p["lifecycles_per_sec"] >= goal,
            )
    for store, goal in (("postgres", 5.0), ("sqlite", 2.0)):
        for mode in ("batched", "per-task"):
            k, p = best(points, tb(store, mode))
            if p and p.get("dispatch_p99_ms") is not None:
                add(
                    f"{store} dispatch p99 at half the peak <= {goal:g} ms ({mode})",
                    f"{fmt_ms(p['dispatch_p99_ms'])} ms at {fmt_rate(p.get('dispatch_rate'))}/s ({k[4]} workers)",
                    p["dispatch_p99_ms"] <= goal,
                )
    for k, p in sorted(points.items(), key=lambda kp: sort_key(kp[0])):
        if k[0] != "taskbroker" or k[5] == 0:
            continue
        base = points.get(k[:5] + (0,))
        if base:
            ratio = p["lifecycles_per_sec"] / base["lifecycles_per_sec"]
            add(
                f"{k[1]} {k[2]}, {k[5]:,}-task backlog >= 0.8x empty",
                f"{fmt_rate(p['lifecycles_per_sec'])}/s vs {fmt_rate(base['lifecycles_per_sec'])}/s: {ratio:.2f}x",
                ratio >= 0.8,
            )
        if p.get("broker_rss_mb") is not None:
            add(
                f"{k[1]} broker RSS < 100 MiB with {k[5]:,} tasks stored",
                f"{p['broker_rss_mb']:.1f} MiB",
                p["broker_rss_mb"] < 100,
            )
    return "\n".join(rows)


def short(n):
    if n >= 1_000_000:
        return f"{n / 1_000_000:g}M"
    return f"{n / 1000:g}k" if n >= 1000 else str(n)


def plot(points, png):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    series = defaultdict(list)
    for k, p in points.items():
        system, store, mode, config, workers, backlog = k
        if backlog == 0:
            name = f"taskbroker {store} {mode}" if system == "taskbroker" else f"{system}: {config}"
            series[name].append((workers, p["lifecycles_per_sec"]))
    for name, pts in sorted(series.items()):
        pts.sort()
        xs, ys = zip(*pts)
        style = "-o" if name.startswith("taskbroker") else "--s"
        ax1.plot(xs, ys, style, label=name, linewidth=2 if name.startswith("taskbroker") else 1)
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    workers = sorted({k[4] for k in points})
    ax1.set_xticks(workers, [str(w) for w in workers])
    ax1.set_xlabel("workers (concurrency)")
    ax1.set_ylabel("lifecycles/s (submit -> lease -> complete), log scale")
    ax1.set_title("Throughput vs worker count (empty queue)")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=7)

    backlog_series = defaultdict(list)
    with_backlog = {k[:5] for k in points if k[0] == "taskbroker" and k[5] > 0}
    for k, p in points.items():
        if k[:5] in with_backlog:
            backlog_series[f"taskbroker {k[1]} {k[2]}, {k[4]} workers"].append((k[5], p["lifecycles_per_sec"]))
    for name, pts in sorted(backlog_series.items()):
        pts.sort()
        xs, ys = zip(*pts)
        ax2.plot([max(x, 1) for x in xs], ys, "-o", label=name)
        for x, y in pts:
            ax2.annotate(f"{y:,.0f}", (max(x, 1), y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    ax2.set_xscale("symlog", linthresh=1000)
    sizes = sorted({x for pts in backlog_series.values() for x, _ in pts})
    ax2.set_xticks([max(x, 1) for x in sizes], [short(x) for x in sizes])
    ax2.set_xlabel("tasks already stored in another queue (0 = empty)")
    ax2.set_ylabel("lifecycles/s")
    ax2.set_ylim(bottom=0)
    ax2.set_title("Throughput vs backlog size")
    ax2.grid(True, alpha=0.3)
    if backlog_series:
        ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def latency_name(k):
    system, store, workers = k
    return f"taskbroker {store}" if system == "taskbroker" else system


def latency_sort(k):
    return (SYSTEM_ORDER.get(k[0], 9), k[1] != "sqlite", k[2])


def latency_rates(lat):
    return sorted({lk for loops in lat.values() for lk in loops if lk != "closed"})


def latency_table(lat):
    rates = latency_rates(lat)
    head = ["system", "workers", "closed loop p50 / p99 / max ms"]
    head += [f"open {fmt_rate(r)}/s: p50 / p99 / max ms (achieved/s)" for r in rates]
    rows = ["| " + " | ".join(head) + " |", "|---|---:|" + "---|" * (len(head) - 2)]
    for k in sorted(lat, key=latency_sort):
        loops = lat[k]

        def cell(lk):
            l = loops.get(lk)
            if l is None:
                return "-"
            text = f"{fmt_ms(l['p50_ms'])} / **{fmt_ms(l['p99_ms'])}** / {fmt_ms(l['max_ms'])}"
            if lk == "closed":
                return text
            late = (l.get("send_lag_p99_ms") or 0) > SENDER_LATE_MS
            return f"{text} ({fmt_rate(l.get('achieved_rate'))}){' (late sender)' if late else ''}"

        cells = [latency_name(k), str(k[2]), cell("closed")] + [cell(r) for r in rates]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot_latency(lat, png):
    fig, ax = plt.subplots(figsize=(7, 5))
    for k in sorted(lat, key=latency_sort):
        pts = sorted((lk, l["p99_ms"]) for lk, l in lat[k].items() if lk != "closed")
        if not pts:
            continue
        xs, ys = zip(*pts)
        tb = k[0] == "taskbroker"
        ax.plot(xs, ys, "-o" if tb else "--s", label=latency_name(k), linewidth=2 if tb else 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    rates = latency_rates(lat)
    if rates:
        ax.set_xticks(rates, [fmt_rate(r) for r in rates])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("offered rate, jobs/s (open loop)")
    ax.set_ylabel("pick-up latency p99, ms (send -> handler start), log scale")
    ax.set_title("Pick-up latency p99 against offered rate")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def targets_latency(points, lat):
    rows = ["| target | measured | met |", "|---|---|---|"]

    def add(target, measured, ok):
        rows.append(f"| {target} | {measured} | {'yes' if ok else 'no' if ok is not None else '?'} |")

    def loop(system, store, lk):
        for k, loops in lat.items():
            if k[0] == system and k[1] == store and lk in loops:
                return loops[lk]
        return None

    tb, gw = loop("taskbroker", "postgres", "closed"), loop("graphile-worker", "postgres", "closed")
    if tb and gw:
        add(
            "closed loop, Postgres: p50 and p99 below graphile-worker's (aim half)",
            f"p50 {fmt_ms(tb['p50_ms'])} vs {fmt_ms(gw['p50_ms'])} ms, p99 {fmt_ms(tb['p99_ms'])} vs {fmt_ms(gw['p99_ms'])} ms",
            tb["p50_ms"] < gw["p50_ms"] and tb["p99_ms"] < gw["p99_ms"],
        )
    sq = loop("taskbroker", "sqlite", "closed")
    if sq:
        add(
            "closed loop, SQLite: p50 <= 1 ms, p99 <= 3 ms",
            f"p50 {fmt_ms(sq['p50_ms'])} ms, p99 {fmt_ms(sq['p99_ms'])} ms",
            sq["p50_ms"] <= 1 and sq["p99_ms"] <= 3,
        )
    tb = loop("taskbroker", "postgres", 1000)
    peers = [(k[0], l[1000]) for k, l in lat.items() if k[0] != "taskbroker" and 1000 in l]
    if tb and peers:
        worst = min(p["p99_ms"] for _, p in peers)
        add(
            "open loop at 1,000/s: taskbroker Postgres p99 below every peer's",
            f"{fmt_ms(tb['p99_ms'])} ms vs " + ", ".join(f"{s} {fmt_ms(p['p99_ms'])}" for s, p in peers),
            tb["p99_ms"] < worst,
        )
    tb_k, tb_p = best(points, lambda k: k[0] == "taskbroker" and k[1] == "postgres" and k[2] == "batched" and k[5] == 0)
    gw_k, gw_p = best(points, lambda k: k[0] == "graphile-worker" and k[2] == "batched")
    if tb_p and gw_p:
        ratio = tb_p["lifecycles_per_sec"] / gw_p["lifecycles_per_sec"]
        add(
            "Postgres batched >= 1.2x graphile-worker's best, both overlapping (aim 1.5x)",
            f"{fmt_rate(tb_p['lifecycles_per_sec'])}/s ({tb_k[4]} workers) vs {fmt_rate(gw_p['lifecycles_per_sec'])}/s "
            f"({gw_k[4]} workers): {ratio:.2f}x",
            ratio >= 1.2,
        )
    return "\n".join(rows)


def main():
    jsonl, md, png, description = sys.argv[1:5]
    points, failures, lat = load(jsonl)
    plot(points, png)
    lat_png = Path(png).with_name(Path(png).stem + "-latency.png")
    if lat:
        plot_latency(lat, lat_png)
    parts = [
        f"# Benchmark run {Path(md).stem}",
        "",
        description,
        "",
        f"![throughput vs workers and vs backlog]({Path(png).name})",
        "",
        "## Results",
        "",
        "Lifecycles/s = tasks / (first submit -> last complete acknowledged). Every system runs the "
        "same shape: the workers start first, then the clock starts and the producers enqueue while "
        "the workers drain (peers: the same count, worker concurrency and Postgres cluster; their "
        "clock stops when no job is left unsettled). The last column is a peer's phased figure "
        "(enqueue everything, then drain: enqueue + drain time), for comparison with earlier runs. "
        "Dispatch latency: taskbroker only, Submit acknowledgement -> Lease reply of a waiting worker "
        "at half the run's peak rate. The bold number is the median of the runs listed.",
        "",
        main_table(points),
        "",
        *(
            [
                "## Pick-up latency",
                "",
                "From the enqueue call being sent to the handler starting (taskbroker: to the Lease reply "
                "reaching a waiting worker), in the load generator's process, best configuration of each "
                "system. Closed loop: one job at a time (send, wait until its handler starts, send the "
                "next). Open loop: jobs offered at a fixed rate whatever the answers, what is due every "
                "millisecond in one call; achieved = jobs started / (first send -> last start). Median "
                "run by p99 over the repetitions. \"late sender\": the load generator sent that loop's "
                f"jobs more than {SENDER_LATE_MS} ms behind schedule (p99), so the rate was not really offered.",
                "",
                f"![p99 pick-up latency against offered rate]({lat_png.name})",
                "",
                latency_table(lat),
                "",
                "## Targets: pick-up latency",
                "",
                targets_latency(points, lat),
                "",
            ]
            if lat
            else []
        ),
        "## Targets: throughput",
        "",
        targets_table(points),
        "",
    ]
    if failures:
        parts += ["## Failed runs", ""]
        parts += [f"- {f.get('label')}: {f.get('error', 'failed')}" for f in failures]
        parts.append("")
    parts += [f"Raw results: [{Path(jsonl).name}]({Path(jsonl).name}).", ""]
    Path(md).write_text("\n".join(parts))
    print(f"wrote {md} and {png}")


if __name__ == "__main__":
    main()
