"""The soak's report (benchmarks/soak.py): its JSON-lines samples as a table of slopes and a plot.

    python benchmarks/soak.py --report OUT/soak.jsonl [--skip-s 600] [--plot OUT/soak.png]

The file's first line is the soak's record ({"meta": ...}: the commands, the commit, the machine);
each later line with a "t" is one sample: per run, per kind of process, the count and the sums of
RSS, PSS, open fds and threads; per run, its directory's bytes by part; the machine's /dev/shm.
A row of the table is one series (run, kind, metric): its value at the first sample after the
warm-up (`skip_s`), at the last sample, and the least-squares slope per hour over the samples after
the warm-up. A slope rather than first-against-last: a node's memory swings within a learner step,
and a fit over every sample after the warm-up averages the swing out where two samples would not.
Beside it the slope over the second half of those samples: a one-time step (an allocator taking a
new arena, a thread pool started at the first evaluation) lifts the whole slope but not the second
half's; growth shows in both.
A kind absent from a sample (an evaluator between rounds, an engine between restarts) counts 0 in
it; the count column gives the range of its process count over the samples after the warm-up.
"""
from __future__ import annotations

import json

MB = 1 << 20
PROCESS_METRICS = ("pss", "rss", "fds", "threads")
BYTES = {"pss", "rss", "tb", "checkpoints", "logs", "other", "bytes"}  # shown in MB


def load(path: str) -> tuple[dict, list[dict]]:
    """(the soak's record, its samples) from a JSON-lines file; a line cut short (the soak killed
    mid-write) ends the samples."""
    meta, samples = {}, []
    with open(path) as f:
        for line in f:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                break
            if "meta" in obj:
                meta = obj["meta"]
            elif "t" in obj:
                samples.append(obj)
    return meta, samples


def series(samples: list[dict]) -> dict[tuple[str, str, str], list[tuple[float, float]]]:
    """{(run, kind, metric): [(seconds, value), ...]} over the samples where the run had processes
    (it is sampled while its launcher lives): per process kind its count "n" and PROCESS_METRICS
    (0 in a sample where the kind had no process), per run its directory's parts (kind "run dir"),
    and the machine's /dev/shm (run "machine")."""
    kinds: dict[str, set[str]] = {}
    for s in samples:
        for run, r in s["runs"].items():
            kinds.setdefault(run, set()).update(r["procs"])
    out: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for s in samples:
        for run, r in ((run, r) for run, r in s["runs"].items() if r["procs"]):  # none: the run had ended
            for kind in kinds[run]:
                got = r["procs"].get(kind, {})
                for metric in ("n", *PROCESS_METRICS):
                    out.setdefault((run, kind, metric), []).append((s["t"], got.get(metric, 0)))
            for part, b in r["dir"].items():
                out.setdefault((run, "run dir", part), []).append((s["t"], b))
        for metric, v in s["machine"].items():
            out.setdefault(("machine", "/dev/shm", metric), []).append((s["t"], v))
    return out


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """The least-squares slope of value against time, per hour; None with fewer than two times."""
    if len({t for t, _ in points}) < 2:
        return None
    n = len(points)
    mt, mv = sum(t for t, _ in points) / n, sum(v for _, v in points) / n
    cov = sum((t - mt) * (v - mv) for t, v in points)
    var = sum((t - mt) ** 2 for t, _ in points)
    return cov / var * 3600


def rows(samples: list[dict], skip_s: float) -> list[dict]:
    """One row per series (the process count "n" goes into its kind's rows): run, kind, metric,
    n (the count's range after the warm-up, "" where not a process kind), at_skip, end, slope_h
    (None with fewer than two samples after the warm-up), pct_h (slope_h against at_skip) and
    late_slope_h (the slope over the second half of the samples after the warm-up)."""
    table = series(samples)
    out = []
    for (run, kind, metric), points in sorted(table.items()):
        after = [(t, v) for t, v in points if t >= skip_s]
        if metric == "n" or not after:
            continue
        counts = sorted({v for t, v in table.get((run, kind, "n"), []) if t >= skip_s})
        n = "" if not counts else str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        slope = slope_per_hour(after)
        half = (after[0][0] + after[-1][0]) / 2
        at_skip = after[0][1]
        out.append(dict(run=run, kind=kind, metric=metric, n=n, at_skip=at_skip, end=after[-1][1], slope_h=slope,
                        pct_h=None if slope is None or not at_skip else slope / at_skip,
                        late_slope_h=slope_per_hour([(t, v) for t, v in after if t >= half])))
    return out


def _fmt(metric: str, v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    if metric in BYTES:  # kB below a MB: a run directory's logs at first
        unit, size = ("MB", MB) if abs(v) >= MB or v == 0 else ("kB", 1024)
        return f"{v / size:+.1f} {unit}" if signed else f"{v / size:.1f} {unit}"
    return f"{v:+.1f}" if signed else f"{v:g}"


def table(samples: list[dict], skip_s: float) -> str:
    """The rows as a Markdown table (what the benchmarks page shows)."""
    lines = [f"| run | kind | n | metric | at {skip_s / 60:.3g} min | end ({samples[-1]['t'] / 60:.1f} min) "
             "| slope / h | % / h | slope / h, 2nd half |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows(samples, skip_s):
        pct = "-" if r["pct_h"] is None else f"{r['pct_h']:+.2%}"
        lines.append(f"| {r['run']} | {r['kind']} | {r['n']} | {r['metric']} | {_fmt(r['metric'], r['at_skip'])} "
                     f"| {_fmt(r['metric'], r['end'])} | {_fmt(r['metric'], r['slope_h'], True)} | {pct} "
                     f"| {_fmt(r['metric'], r['late_slope_h'], True)} |")
    return "\n".join(lines)


def header(meta: dict, samples: list[dict], skip_s: float) -> str:
    """What made the table: the soak's command, each run's, the commit and machine."""
    out = [f"soak: {len(samples)} samples every {meta.get('every_s', '?')} s over {samples[-1]['t'] / 60:.1f} min, "
           f"slopes after the first {skip_s / 60:.3g} min; {meta.get('commit', '?')} on {meta.get('machine', '?')}",
           f"command: {meta.get('command', '?')}"]
    for run, r in meta.get("runs", {}).items():
        out.append(f"{run}: {r.get('command', 'attached')} (pid {r.get('pid')}, exit {r.get('exit', '?')})")
    return "\n".join(out)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


PANELS = [("pss", "PSS (MB)"), ("rss", "RSS (MB)"), ("fds", "open fds"), ("threads", "threads")]


def plot(samples: list[dict], skip_s: float, path: str) -> None:
    """One panel per metric (PSS, RSS, fds, threads per run and kind; the run directories' parts;
    /dev/shm), x in minutes, the end of the warm-up a dotted line."""
    plt = _plt()
    from matplotlib.lines import Line2D

    table = series(samples)
    runs = sorted({r for r, _, _ in table} - {"machine"})
    kinds = sorted({k for r, k, _ in table if r != "machine" and k != "run dir"})
    colour = {k: plt.cm.tab20(i % 20) for i, k in enumerate(kinds)}
    dash = {r: ("-", "--", ":", "-.")[i % 4] for i, r in enumerate(runs)}
    fig, axes = plt.subplots(3, 2, figsize=(13, 11), constrained_layout=True)
    for ax, (metric, label) in zip(axes.flat, PANELS):
        for (run, kind, m), pts in sorted(table.items()):
            if m == metric and kind != "run dir":
                ys = [v / MB if metric in BYTES else v for _, v in pts]
                ax.plot([t / 60 for t, _ in pts], ys, dash[run], color=colour[kind], lw=1.2)
        ax.set_title(label + " per run and kind of process (summed)", fontsize=10)
    ax = axes.flat[4]
    parts = ["tb", "checkpoints", "logs", "other"]
    for (run, _, part), pts in sorted((k, v) for k, v in table.items() if k[1] == "run dir"):
        ax.plot([t / 60 for t, _ in pts], [v / MB for _, v in pts], dash[run], color=plt.cm.tab10(parts.index(part)),
                label=f"{run}: {part}")
    ax.set_title("run directory (MB) by part", fontsize=10)
    ax.legend(fontsize=7)
    ax = axes.flat[5]
    ax.plot([t / 60 for t, _ in table[("machine", "/dev/shm", "bytes")]],
            [v / MB for _, v in table[("machine", "/dev/shm", "bytes")]], color="tab:blue", label="MB in use")
    ax.set_title("/dev/shm (the whole machine's)", fontsize=10)
    twin = ax.twinx()
    twin.plot([t / 60 for t, _ in table[("machine", "/dev/shm", "entries")]],
              [v for _, v in table[("machine", "/dev/shm", "entries")]], color="tab:orange", label="entries")
    ax.legend(loc="upper left", fontsize=7)
    twin.legend(loc="upper right", fontsize=7)
    for ax in axes.flat:
        ax.axvline(skip_s / 60, color="grey", ls=":", lw=1)
        ax.set_xlabel("minutes")
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=colour[k], label=k) for k in kinds]
    handles += [Line2D([], [], color="black", ls=dash[r], label=f"run: {r}") for r in runs]
    fig.legend(handles=handles, loc="outside lower center", ncol=6, fontsize=8)
    fig.suptitle("soak: memory, fds and threads per kind of process; run directories; /dev/shm "
                 f"(dotted: the end of the {skip_s / 60:.3g}-minute warm-up)", fontsize=11)
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")
