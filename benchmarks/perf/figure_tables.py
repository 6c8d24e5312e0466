"""Markdown for the figure blocks of README.md and docs/, rendered from benchmarks/results/*.json only.

Each renderer takes a loaded results file and returns the block's text; `readme_figures` puts it between
`<!-- figures:NAME -->` and `<!-- /figures:NAME -->`. A results file of a failed run renders as that failure.
"""

import json
from typing import Any, Callable

from benchmarks.perf.results import RESULTS_DIR, best_by_concurrency, loaded_at_start

Report = dict[str, Any]


def load(name: str) -> Report:
    path = RESULTS_DIR / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python -m benchmarks.perf {name}`")
    report = json.loads(path.read_text())
    if not isinstance(report, dict) or not {"benchmark", "status", "command", "machine"} <= report.keys():
        raise ValueError(f"{path} was not written by benchmarks.perf.results: run `python -m benchmarks.perf {name}`")
    return {**report, "results_file": f"benchmarks/results/{name}.json"}


def _n(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def _rate(x: float) -> str:
    return _n(x, 1 if x < 100 else 0)


def source(report: Report) -> str:
    m = report["machine"]
    flags = m.get("cpu_flags")
    bf16 = ("bf16 flags not recorded" if flags is None else
            "with native bf16" if flags.get("avx512_bf16") or flags.get("amx_bf16") else "without native bf16")
    loaded = (f" (**loaded**: above its {m['cores']} cores, so other work had them; rerun before relying on its "
              f"rates)" if loaded_at_start(m) else "")
    where = report.get("results_file", f"benchmarks/results/{report['benchmark']}.json")
    return (f"`{where}`, from `{report['command']}` on {m['cores']} cores of "
            f"{m['cpu']} ({bf16}), load average {m['load_average_at_start']} at the start{loaded}")


def _failed(report: Report) -> str | None:
    if report["status"] == "ok":
        return None
    return f"The last run **failed**: {report.get('error', '').splitlines()[0][:300]} ({source(report)})."


def main_output(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    dtype = r["settings"]["vllm_dtype"]
    return (f"```text\n{r['output'].rstrip()}\n```\n\n"
            f"Wall time **{_n(r['command_wall_s'])} s** for the whole command, of which the collection took "
            f"{_n(r['collection_s'], 1)} s ({r['rollouts']} rollouts, mean reward {r['mean_reward']}); vLLM ran in "
            f"{dtype}. Source: {source(r)}; setup had been done.")


def glance(_: Report) -> str:
    rows = ["| benchmark | ratio | rates behind it | load at start |", "|---|---|---|---|"]
    col = load("collector")
    if col["status"] == "ok":
        tp = best_by_concurrency(col["throughput"])  # the rounds the ratios compare
        rss = col["full_stack_rss"]
        rows.append(f"| collector peak RSS, {_n(rss[-1]['rows'])} vs {_n(rss[0]['rows'])} rows (full stack) | "
                    f"**{rss[-1]['peak_rss_mb'] / rss[0]['peak_rss_mb']:.2f}x** | {rss[0]['peak_rss_mb']} → "
                    f"{rss[-1]['peak_rss_mb']} MB; {_rate(tp[min(tp)]['rollouts_per_s'])} rollouts/s at {min(tp)} "
                    f"concurrent | {col['machine']['load_average_at_start']} |")
        if inst := col.get("instant_agent_rss"):
            rows.append(f"| collector peak RSS, {_n(inst[-1]['rows'])} vs {_n(inst[0]['rows'])} rows (instant agent) | "
                        f"**{inst[-1]['peak_rss_mb'] / inst[0]['peak_rss_mb']:.2f}x** | {inst[0]['peak_rss_mb']} → "
                        f"{inst[-1]['peak_rss_mb']} MB | {col['machine']['load_average_at_start']} |")
    ref = load("nemo_gym_reference")
    if ref["status"] == "ok":
        for run in ref["runs"]:
            ours, theirs = run["ours"], run["nemo_gym_0_4_0"]
            rows.append(f"| nemo_gym vs NeMo Gym 0.4.0, {_n(run['rows'])} rows at {run['concurrency']} concurrent | "
                        f"**{ours['rollouts_per_s'] / theirs['rollouts_per_s']:.1f}x** rollouts/s | "
                        f"{_rate(ours['rollouts_per_s'])} vs {_rate(theirs['rollouts_per_s'])} rollouts/s; collector "
                        f"{ours['peak_rss_mb']} vs {theirs['peak_rss_mb']} MB | "
                        f"{ref['machine']['load_average_at_start']} |")
            if colocated := run.get("ours_colocated"):
                rows.append(f"| the same, nemo_gym's servers in one process (`+colocate_servers=true`) | "
                            f"**{colocated['rollouts_per_s'] / theirs['rollouts_per_s']:.1f}x** rollouts/s | "
                            f"{_rate(colocated['rollouts_per_s'])} vs {_rate(theirs['rollouts_per_s'])} rollouts/s | "
                            f"{ref['machine']['load_average_at_start']} |")
    sat = load("saturation")
    if sat["status"] == "ok":
        rows.append(f"| full stack vs a direct client on real vLLM | **{sat['ratios']['stack_vs_direct_client']:.2f}** "
                    f"| {sat['stack_rollouts_per_s']} vs {sat['direct_requests_per_s']} requests/s | "
                    f"{sat['machine']['load_average_at_start']} |")
    asy = load("async_collector")
    if asy["status"] == "ok":
        speed = asy["ratios"]["speedup_over_sync"]
        rows.append(f"| asynchronous vs synchronous RL loop (max age 1) | **{speed['async_age_1']:.2f}x** "
                    f"(ideal {asy['ratios']['ideal_speedup']:.2f}x) | {asy['runs']['sync']['seconds']} vs "
                    f"{asy['runs']['async_age_1']['seconds']} s | {asy['machine']['load_average_at_start']} |")
    return "\n".join(rows) + ("\n\nEvery figure comes from a results file in `benchmarks/results/`; "
                              "[docs/performance.md](docs/performance.md) has them all.")


def _concurrency_ratios(r: Report) -> tuple[int, dict[str, float], dict[str, float]]:
    """The first concurrency, and each one's best rollouts/s and its CPU-ms per rollout against it."""
    base = r["throughput"][0]["concurrency"]
    return (base, r["ratios"][f"rollouts_per_s_vs_{base}_concurrent"],
            r["ratios"].get(f"cpu_ms_per_rollout_vs_{base}_concurrent", {}))


ROLES = ("collector", "example_single_tool_call_simple_agent", "policy_model", "example_single_tool_call", "stub_chat")


def _by_role(by_process: dict[str, float]) -> list[float]:
    """CPU-ms per rollout of the benchmark stack's processes in a fixed order: collector, agent, model server,
    environment, stub model."""
    return [by_process.get(role, 0.0) for role in ROLES]


def collector(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    base, rates, cpu = _concurrency_ratios(r)
    best = best_by_concurrency(r["throughput"])[base]
    by_process = "cpu_ms_per_rollout_by_process" in r["throughput"][0]
    out = [f"Source: {source(r)}.", "",
           f"| full stack, instant model | rollouts/s | vs best at {base} | cpu-ms/rollout |"
           + (" of which collector / agent / model server / environment / stub |" if by_process else "") + " load |",
           "|---|---|---|---|" + ("---|" if by_process else "") + "---|"]
    for row in r["throughput"]:
        cells = [f"{row['concurrency']} concurrent, {_n(row['succeeded'])} rows", _n(row["rollouts_per_s"]),
                 f"{row['rollouts_per_s'] / best['rollouts_per_s']:.2f}x", f"{row['cpu_ms_per_rollout']:.2f}"]
        if by_process:
            cells.append(" / ".join(f"{ms:.2f}" for ms in _by_role(row["cpu_ms_per_rollout_by_process"])))
        out.append("| " + " | ".join([*cells, row["load_average"]]) + " |")
    line = ", ".join(f"{c}: **{rates[c]:.2f}x** rollouts/s"
                     + (f", {cpu[c]:.2f}x CPU-ms per rollout" if c in cpu else "") for c in rates if int(c) != base)
    out += ["", f"Best run of each concurrency against the best at {base} in flight: {line}."]
    if "stack_vs_bare_client" in r["ratios"]:
        bare = "; ".join(f"with {client}'s client " + ", ".join(f"{c}: **{ratio:.2f}**" for c, ratio in by_c.items())
                         for client, by_c in r["ratios"]["stack_vs_bare_client"].items())
        # Since http_clients.bare_requests_per_s: the bare client's rate in a round is the median of its runs there
        median_of = len(r["throughput"][0].get("bare_client_runs", {}).get("aiohttp", []))
        bare_rate = f"; the bare client's rate the median of its {median_of} runs in that round" if median_of else ""
        out += ["", "Full stack rollouts/s over a bare client's chat requests/s straight to the same stub, at the same "
                f"concurrency, in the same round (best run of the stack{bare_rate}): {bare}."]
    if "stack_vs_bare_same_requests" in r["ratios"]:
        same = r["ratios"]["stack_vs_bare_same_requests"]
        short = next((key for key in r["ratios"] if key.startswith("stack_vs_bare_same_requests_")), None)
        cells = ", ".join(f"{c}: **{ratio:.2f}**" for c, ratio in same["aiohttp"].items())
        tail = (f"; {short.removeprefix('stack_vs_bare_same_requests_').replace('_', ' ')}: "
                f"**{r['ratios'][short]['aiohttp']:.2f}**" if short else "")
        out += ["", "The same against the time the bare aiohttp client takes to send the stack's own model requests "
                f"(two per rollout; 1.0 would mean the stack costs nothing beyond them): {cells}{tail}."]
    if cpu_rows := r.get("cpu_by_rows"):
        out += ["", "| CPU per rollout, 256 concurrent | rows | cpu-ms/rollout beyond a run's fixed cost | "
                "vs smallest | rollouts/s | load |", "|---|---|---|---|---|---|"]
        first = cpu_rows[0]["cpu_ms_per_rollout_beyond_fixed"]
        for row in cpu_rows:
            out.append(f"| full stack | {_n(row['rows'])} | {row['cpu_ms_per_rollout_beyond_fixed']:.3f} | "
                       f"{row['cpu_ms_per_rollout_beyond_fixed'] / first:.2f}x | {_n(row['rollouts_per_s'])} | "
                       f"{row['load_average']} |")
        out += ["", f"A run's fixed cost (the CPU of a run of one row, all processes, the collector's start among it): "
                f"{cpu_rows[0]['fixed_cpu_ms']:.0f} CPU-ms, taken out of each row above."]
    out += ["", "| collector peak RSS (VmHWM) | rows | peak RSS | vs smallest | rollouts/s | load |",
            "|---|---|---|---|---|---|"]
    for label, key in (("full stack", "full_stack_rss"), ("instant test agent", "instant_agent_rss")):
        rows = r.get(key, [])
        for row in rows:
            out.append(f"| {label}, {row['concurrency']} concurrent | {_n(row['rows'])} | {row['peak_rss_mb']} MB | "
                       f"{row['peak_rss_mb'] / rows[0]['peak_rss_mb']:.2f}x | {_n(row['rollouts_per_s'])} | "
                       f"{row['load_average']} |")
    out += ["", "| resume scan of the output file | lines | size | time |", "|---|---|---|---|"]
    for row in r["resume_scan"]:
        out.append(f"| `scan_done` | {_n(row['rows'])} | {row['size_mb']} MB | {row['seconds']} s |")
    return "\n".join(out)


def saturation(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s = r["settings"]
    same = "the same" if r["same_tokens_every_phase"] else "different"
    return (f"Full stack / direct client: **{r['ratios']['stack_vs_direct_client']:.3f}** (goal ≥ 0.95): "
            f"{r['stack_rollouts_per_s']} rollouts/s vs {r['direct_requests_per_s']} requests/s, {s['rows']} rows, "
            f"{s['concurrency']} concurrent, {s['max_tokens']} max tokens, greedy, {s['rounds']} alternating rounds; "
            f"every phase generated {same} number of tokens ({r['phases']['direct'][0]['tokens']:,} in the first). "
            f"Load average {r['load_average_at_end']} at the end. Source: {source(r)}.")


def automatic_level(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s = r["settings"]
    lines = ["| run | direct client | " + " | ".join(f"fixed {n}" for n in s["fixed"])
             + " | automatic | automatic / best fixed | direct / automatic time |",
             "|---|---|" + "---|" * len(s["fixed"]) + "---|---|---|"]
    for name in ("short", "long"):
        run = r[name]
        seconds = run["mean_seconds"]
        lines.append(f"| {run['rows']} rows | {seconds['direct']} s | "
                     + " | ".join(f"{seconds[f'fixed {n}']} s" for n in s["fixed"])
                     + f" | {seconds['automatic']} s | **{run['automatic_vs_best_fixed']:.3f}** | "
                       f"{run['direct_vs_automatic_time']:.3f} |")
    reason = r["long"]["phases"]["automatic"][-1]["concurrency_at_end"]["reason"]
    return ("\n".join(lines) + f"\n\nMean collection time over {s['rounds']} rounds in reversing order, one real vLLM "
            f"({s['max_tokens']} max tokens, greedy), automatic below a ceiling of {s['ceiling']}; goals: automatic / "
            f"best fixed ≥ {r['targets']['automatic_vs_best_fixed_at_least']}, direct / automatic time ≥ "
            f"{r['targets']['direct_vs_automatic_time_at_least']}. The long run's last level change: {reason}. "
            f"Load average {r['load_average_at_end']} at the end. Source: {source(r)}.\n")


def http_clients(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    rate, cpu, s = r["mean_requests_per_s"], r["mean_client_cpu_ms_per_request"], r["settings"]
    out = [f"{_n(s['requests'])} requests at {s['concurrency']} concurrent, {s['rounds']} rounds taken in turn. "
           f"Source: {source(r)}.", "",
           "| client | client cpu-ms/request | over ours | requests/s |", "|---|---|---|---|"]
    for name in cpu:
        ratio = "1.00x" if name == "nemo_gym" else \
            f"**{r['ratios'][f'{name}_vs_nemo_gym_client_cpu_per_request']:.2f}x**"
        out.append(f"| {name} | {cpu[name]} | {ratio} | {_n(rate[name])} |")
    return "\n".join(out)


def fresh_clone(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    out = [f"Source: {source(r)}.", "",
           "| ref | commit | `bash scripts/main.sh`, s | install (`scripts/setup.sh`), s | main job, s | load at end |",
           "|---|---|---|---|---|---|"]
    out += [f"| {run['ref']} | {run['commit']} | {_n(run['wall_s'])} | {_n(run['install_s'])} | "
            f"{_n(run['main_job_s'])} | {run['load_average_at_end']} |" for run in r["runs"]]
    first, last = r["runs"][0], r["runs"][-1]
    out += ["", f"On a fresh clone, {last['ref']} ({last['commit']}) takes **{r['ratios']['last_vs_first_wall']:.2f}x** "
                f"the time of {first['ref']}, one after the other in one run, {r['settings']['limit']} rollouts each "
                f"(goal at most 0.5)."]
    return "\n".join(out)


def agent_workers(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s = r["settings"]
    out = [f"Source: {source(r)}.", "",
           "| workers (agent and model server) | round | rollouts/s | cpu-ms/rollout (whole stack) | "
           "of which collector / agent / model server / environment / stub | agent cpu-ms/rollout, each process (the launcher first) | "
           "load at start |", "|---|---|---|---|---|---|---|"]
    rows = [(setting, index, run) for setting in r["by_workers"] for index, run in enumerate(setting["runs"])]
    for setting, index, run in sorted(rows, key=lambda row: (row[1], row[0]["workers"])):
        each = " + ".join(f"{ms:.2f}" for ms in run["agent_cpu_ms_per_rollout_by_process"])
        roles = " / ".join(f"{ms:.2f}" for ms in _by_role(run["cpu_ms_per_rollout_by_server"]))
        out.append(f"| {setting['workers']} | {index + 1} | {_rate(run['rollouts_per_s'])} | "
                   f"{run['cpu_ms_per_rollout']:.2f} | {roles} | {each} | {run['load_average_at_start']} |")
    base = s["workers"][0]
    ratios = ", ".join(f"{workers} workers: **{r['ratios'][f'{workers}_workers_over_{base}']:.2f}x**"
                       for workers in s["workers"][1:])
    out += ["", f"Best round of each setting over the best with {base} worker: {ratios} rollouts/s "
                f"({_n(s['rows'])} rows at {s['concurrency']} in flight, {s['rounds']} rounds taken in turn, "
                f"{r['machine']['cores']} cores for every process of the stack)."]
    return "\n".join(out)


def colocated(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    out = [f"Source: {source(r)}.", "",
           "| servers | rows | in flight | round | rollouts/s | cpu-ms/rollout | bare client, requests/s (median of "
           f"{r['settings']['bare_runs_per_round']}) | stack / bare client, same requests | load |",
           "|---|---|---|---|---|---|---|---|---|"]
    for run in r["runs"]:
        out.append(f"| {run['layout']} | {_n(run['rows'])} | {run['concurrency']} | {run['round'] + 1} | "
                   f"{_rate(run['rollouts_per_s'])} | {run['cpu_ms_per_rollout']:.3f} | "
                   f"{_rate(run['bare_aiohttp_requests_per_s'])} | {run['stack_vs_bare_same_requests']:.3f} | "
                   f"{run['load_average']} |")
    out.append("")

    def spread(summary: dict[str, float], unit: str = "") -> str:
        return f"{summary['median']:.2f}{unit} ({summary['min']:.2f}-{summary['max']:.2f})"

    for case, ratios in r["ratios"].items():
        rows, concurrency = case.split("_rows_")
        bare = ratios["stack_vs_bare_same_requests"]
        out.append(f"* {_n(int(rows))} rows at {concurrency.removesuffix('_concurrent')} in flight, medians over "
                   f"the rounds (their range): colocated / apart "
                   f"**{spread(ratios['rollouts_per_s_colocated_vs_apart'], 'x')}** rollouts/s, "
                   f"**{spread(ratios['cpu_ms_per_rollout_colocated_vs_apart'], 'x')}** CPU-ms per rollout; stack / "
                   f"bare client {spread(bare['apart'])} apart and {spread(bare['colocated'])} colocated.")
    return "\n".join(out)


def viewer(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    small, large = r["runs"][0], r["runs"][-1]
    sizes = (f"{_n(small['rows'])} rows ({small['file_mb']:.0f} MB) | "
             f"{_n(large['rows'])} rows ({large['file_mb']:.0f} MB)")

    def line(label: str, phase: str, figure: str, unit: str, ratio: bool = True) -> str:
        a, b = small[phase][figure], large[phase][figure]
        return f"| {label} | {a} {unit} | {b} {unit} | " + (f"{b / a:.2f} |" if ratio else "|")

    requests = [("a page sorted by reward", "sorted_by_reward_desc"), ("a reward filter", "filter_reward_0"),
                ("a deep page", "deep_page"), ("text search matching nothing (reads every row)",
                                               "text_search_no_match")]
    out = [f"Source: {source(r)}.", "", f"| | {sizes} | largest / smallest |", "|---|---|---|---|",
           line("first open (builds the index): wall time to the first page", "cold", "time_to_first_page_s", "s"),
           line("first open: CPU seconds to the first page", "cold", "cpu_s_to_first_page", "s"),
           *([line("first open: wall time to the overview's metrics (computed after the index)", "cold",
                   "time_to_overview_s", "s")] if "time_to_overview_s" in large["cold"] else []),
           line("reopen (index reused): wall time to the first page", "warm", "time_to_first_page_s", "s"),
           line("peak RSS, first open", "cold", "peak_rss_mb", "MB"),
           line("peak RSS, reopen and one of each request", "warm", "peak_rss_mb", "MB")]
    out += [f"| reopen: {label} | {small['warm']['request_s'][key]} s | {large['warm']['request_s'][key]} s | |"
            for label, key in requests]
    out += ["", f"Load average at the start of each size: {small['load_average']} and {large['load_average']}."]
    return "\n".join(out)


def cpu_profile(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    rounds = r["rounds"]
    first, last = rounds[0], rounds[-1]
    names = list(last["processes"])
    out = [f"Source: {source(r)}.", "",
           "| process | " + " | ".join(f"cpu-ms/rollout at {x['concurrency']}" for x in rounds)
           + f" | {last['concurrency']} / {first['concurrency']} |", "|---|" + "---|" * (len(rounds) + 1)]
    for name in names:
        cells = [f"{x['processes'].get(name, {}).get('cpu_ms_per_rollout', 0.0):.3f}" for x in rounds]
        base = first["processes"].get(name, {}).get("cpu_ms_per_rollout")
        ratio = f"{last['processes'][name]['cpu_ms_per_rollout'] / base:.2f}x" if base else "-"
        out.append(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")
    out.append("| whole stack | " + " | ".join(f"{x['cpu_ms_per_rollout']:.3f}" for x in rounds)
               + f" | {last['cpu_ms_per_rollout'] / first['cpu_ms_per_rollout']:.2f}x |")
    out += ["", "| rollouts/s | " + " | ".join(_rate(x["rollouts_per_s"]) for x in rounds) + " | |", "",
            f"Samples by the library running (py-spy, innermost Python frame), at {first['concurrency']} and "
            f"{last['concurrency']} in flight:", "",
            f"| process | at {first['concurrency']} | at {last['concurrency']} |", "|---|---|---|"]
    for name in names:
        cells = []
        for x in (first, last):
            shares = x["processes"].get(name, {}).get("by_library", {})
            # Dotted, as modules: a page's slashed names are paths that must exist.
            cells.append(", ".join(f"{lib.replace('/', '.')} {share:.0%}" for lib, share in list(shares.items())[:4])
                         or "-")
        out.append(f"| {name} | {cells[0]} | {cells[1]} |")
    if baseline := r.get("baseline"):
        then = {x["concurrency"]: x for x in baseline["rounds"]}
        out += ["", f"Now against commit {baseline['commit']} (profiled the same way, minutes apart, in the same run):",
                "", "| process | " + " | ".join(f"at {x['concurrency']}: then → now" for x in rounds) + " |",
                "|---|" + "---|" * len(rounds)]
        for name in names:
            cells = []
            for x in rounds:
                before = then[x["concurrency"]]["processes"].get(name, {}).get("cpu_ms_per_rollout")
                after = x["processes"].get(name, {}).get("cpu_ms_per_rollout", 0.0)
                cells.append(f"{before:.3f} → {after:.3f} (**{after / before:.2f}x**)" if before else "-")
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        out.append("| whole stack | " + " | ".join(
            f"{then[x['concurrency']]['cpu_ms_per_rollout']:.3f} → {x['cpu_ms_per_rollout']:.3f} "
            f"(**{x['cpu_ms_per_rollout'] / then[x['concurrency']]['cpu_ms_per_rollout']:.2f}x**)" for x in rounds)
            + " |")
    return "\n".join(out)


def nemo_gym_reference(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    out = [f"Source: {source(r)}.", "",
           "| rows, concurrency | nemo_gym rollouts/s, one process per server | NeMo Gym 0.4.0 rollouts/s | ratio | "
           "nemo_gym, servers in one process | ratio | collector peak RSS, ours vs theirs | load |",
           "|---|---|---|---|---|---|---|---|"]
    for run in r["runs"]:
        ours, theirs = run["ours"], run["nemo_gym_0_4_0"]
        colocated = run.get("ours_colocated")  # measured since colocate_servers exists
        beside = (f"{_rate(colocated['rollouts_per_s'])} | "
                  f"**{colocated['rollouts_per_s'] / theirs['rollouts_per_s']:.1f}x**" if colocated else "- | -")
        out.append(f"| {_n(run['rows'])}, {run['concurrency']} | {_rate(ours['rollouts_per_s'])} | "
                   f"{_rate(theirs['rollouts_per_s'])} | **{ours['rollouts_per_s'] / theirs['rollouts_per_s']:.1f}x** | "
                   f"{beside} | {ours['peak_rss_mb']} vs {theirs['peak_rss_mb']} MB | {theirs['load_average']} |")
    out.append("")
    for run in r["runs"]:
        layouts = [(label, run[key]) for key, label in (("ours", "one process per server"),
                                                        ("ours_colocated", "servers in one process"))
                   if "collection_rollouts_per_s" in run.get(key, {})]  # recorded since the collection's own rate
        out += [f"* {_n(run['rows'])} rows, ours, {label}: {_rate(ours['collection_rollouts_per_s'])} rollouts/s "
                f"during the collection; {ours['wall_s'] - run['rows'] / ours['collection_rollouts_per_s']:.2f} s of "
                f"the command's {ours['wall_s']:.2f} s were start-up and aggregation." for label, ours in layouts]
    return "\n".join(out)


def hosted_api(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    settings, stub = r["settings"], r["settings"]["stub"]
    out = [f"Stub hosted API: {stub['requests_per_minute']:,} requests and {stub['tokens_per_minute']:,} tokens a "
           f"minute (a burst of {stub['burst_s']:g} s of each), latencies lognormal with a median of "
           f"{stub['latency_median_s']:g} s, time scale {stub['time_scale']:g}; {settings['rows']:,} weather rollouts "
           f"of {settings['calls_per_rollout']} model calls, at most {settings['concurrency']} in flight. Goodput: "
           f"{settings['goodput']}. Source: {source(r)}.", "",
           "| run | goodput | 429s per rollout | requests per model call | rollout attempts per rollout | "
           "failed rollouts | first rollout after | wall |", "|---|---|---|---|---|---|---|---|"]
    labels = {"ours_limits_configured": "nemo_gym, limits configured", "ours_limits_learned": "nemo_gym, limits "
              "learned (none configured)", "nemo_gym_0_4_0": "NeMo Gym 0.4.0"}
    def given(value: float | None, digits: int, unit: str = "") -> str:
        return "n/a" if value is None else f"{value:.{digits}f}{unit}"

    for name, label in labels.items():
        run = r["runs"][name]
        out.append(f"| {label} | **{given(run['goodput_after_first_minute'], 3)}** | "
                   f"{given(run['requests_429_per_rollout'], 3)} | {given(run['endpoint_requests_per_model_call'], 3)} | "
                   f"{given(run.get('rollout_attempts_per_rollout'), 3)} | {run['failed_rollouts']} | "
                   f"{given(run['time_to_first_rollout_s'], 1, ' s')} | {run['wall_s']:.0f} s |")
    out += ["", "A wrong model name (the stub renamed under the running stacks):", "",
            "| collector | stopped after | exit status | requests sent | files written | stderr lines | last line |",
            "|---|---|---|---|---|---|---|"]
    names = {"ours_ng_collect_rollouts": "nemo_gym ng_collect_rollouts",
             "ours_ng_e2e_collect_rollouts": "nemo_gym ng_e2e_collect_rollouts",
             "nemo_gym_0_4_0": "NeMo Gym 0.4.0 ng_collect_rollouts"}
    for name, label in names.items():
        run = r["wrong_model_name"][name]
        last = run["stderr_last_line"].replace("|", "\\|")
        out.append(f"| {label} | {run['seconds_until_stopped']:.1f} s | {run['exit_status']} | "
                   f"{run['requests_sent']:,} | {'yes' if run['files_written'] else 'no'} | {run['stderr_lines']} | "
                   f"`{last[:160]}` |")
    return "\n".join(out)


def aggregate(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    end = f"; load average {r['load_average_at_end']} at the end" if "load_average_at_end" in r else ""
    out = [f"Source: {source(r)}{end}.", "",
           "| rollouts | input | time | collector peak RSS | resources server peak RSS | load |",
           "|---|---|---|---|---|---|"]
    for run in r["runs"]:
        out.append(f"| {_n(run['rollouts'])} | {run['input']}, {run['input_mb']} MB, round {run['round']} | "
                   f"{run['seconds']} s, {run['cpu_s']} CPU-s | {run['peak_rss_mb']} MB | "
                   f"{run['resources_server_peak_rss_mb']} MB | {run['load_average']} |")
    ratios = {k: v for k, v in r["ratios"].items() if not isinstance(v, dict)}
    out += ["", "Ratios: " + ", ".join(f"{k.replace('_', ' ')} **{v}**" for k, v in ratios.items()) + "."]
    return "\n".join(out)


def _mean(phases: list[dict[str, Any]]) -> float:
    return sum(p["tokens_per_s"] for p in phases) / len(phases)


def _phase_loads(phases: dict[str, list[dict[str, Any]]]) -> str:
    return ", ".join(f"{name.replace('_', ' ')} {'/'.join(p['load_average'].split()[0] for p in runs)}"
                     for name, runs in phases.items())


def experience(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s, p, ratios = r["settings"], r["phases"], r["ratios"]
    return "\n".join([
        f"Source: {source(r)}; {s['rounds']} round(s) of alternating phases; 1-minute load average at the end of "
        f"each phase: {_phase_loads(p)}.", "",
        "| what | ratio | tokens/s behind it | baseline in the same run |", "|---|---|---|---|",
        f"| per-sample turns vs batched turns, {s['samples']} number-guessing games sampled at temperature 1, up to "
        f"{s['sampled_max_new_tokens']} tokens a turn | **{ratios['per_sample_vs_batched']['sampled']:.2f}x** (goal "
        f"1.5x) | {_mean(p['sampled_per_sample']):.1f} vs {_mean(p['sampled_batched']):.1f} | batched turns |",
        f"| the same games played greedily (both modes play identical games) | "
        f"{ratios['per_sample_vs_batched']['greedy']:.2f}x | {_mean(p['greedy_per_sample']):.1f} vs "
        f"{_mean(p['greedy_batched']):.1f} | batched turns |",
        f"| experience layer vs a plain client sending the same token prompts to `/v1/completions`, greedy, "
        f"{s['greedy_max_new_tokens']} tokens | **{ratios['layer_vs_direct_client']:.3f}** (goal 0.9) | "
        f"{_mean(p['layer']):.1f} vs {_mean(p['direct']):.1f} | direct client |"])


def async_collector(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s, runs, speed = r["settings"], r["runs"], r["ratios"]["speedup_over_sync"]
    idle = ", ".join(f"{name.replace('_', ' ')} {run['vllm_idle_fraction']:.0%}" for name, run in runs.items())
    return "\n".join([
        f"Source: {source(r)}.", "",
        f"Trajectory collector vs synchronous generate-then-train, {s['steps']} steps of {s['prompts_per_step']} "
        f"prompts x {s['generations_per_prompt']} completions, training step = one step's generation time "
        f"({s['train_step_s']} s): **{speed['async_age_1']:.2f}x** wall clock at max age 1, "
        f"{speed['async_age_2']:.2f}x at max age 2 (ideal {r['ratios']['ideal_speedup']:.2f}x; goal 1.8x); "
        f"synchronous loop {runs['sync']['seconds']} s. Share of time vLLM ran no request: {idle}. The trainer "
        f"waited {runs['async_age_1']['trainer_wait_s_total']} s in all at max age 1 and "
        f"{runs['async_age_2']['trainer_wait_s_total']} s at max age 2. 1-minute load average at the end of each "
        f"run: " + ", ".join(f"{name.replace('_', ' ')} {run['load_average'].split()[0]}" for name, run in runs.items())
        + "."])


def benchmark_runs(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    out = [f"Source: {source(r)}; temperature {r['settings']['temperature']}, 32 in parallel.", "",
           "| benchmark | rollouts | mean reward (95% CI) | reward by level | pass@k | collection (whole command) |",
           "|---|---|---|---|---|---|"]
    for name, run in r["runs"].items():
        km = run["key_metrics"]
        levels = ", ".join(f"{k.replace('_', ' ')} {v:.3f}" for k, v in run.get("reward_by_level", {}).items())
        passk = ", ".join(f"{k} {v:.2f}" for k, v in km.items() if k.startswith("pass@") and "[" not in k)
        outcomes = ", ".join(f"{v} {k}" for k, v in run.get("outcomes", {}).items())
        out.append(f"| {name} | {run['rollouts']}{' (programs: ' + outcomes + ')' if outcomes else ''} | "
                   f"{run['mean_reward']:.3f} ({km['ci95_low/reward']:.3f}–{km['ci95_high/reward']:.3f}) | {levels} | "
                   f"{passk} | {run['collection_s']} s ({run['command_wall_s']} s) |")
    return "\n".join(out)


def environment_runs(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed

    def own(name: str, m: dict[str, float]) -> str:
        if name == "multiple_choice":
            chosen = ", ".join(f"{k.split('/')[0].removeprefix('chosen_')} {v:.2f}" for k, v in m.items()
                               if k.startswith("chosen_"))
            right = ", ".join(f"{k.split('/')[0].removeprefix('expected_answer_')} {v:.2f}" for k, v in m.items()
                              if k.startswith("expected_answer_"))
            return f"chosen: {chosen}; accuracy where the right option is {right}"
        if name == "instruction_following":
            kinds = sorted((v, k.removeprefix("mean/followed:")) for k, v in m.items() if k.startswith("mean/followed:"))
            return (f"instruction-level accuracy {m['instruction_level_accuracy']:.3f}; kinds followed most: "
                    + ", ".join(f"{k} {v:.2f}" for v, k in kinds[::-1][:3]))
        return f"orders agree {m.get('mean/judge_orders_agree', float('nan')):.2f}"

    out = [f"Source: {source(r)}; temperature {r['settings']['temperature']}, 32 in parallel.", "",
           "| benchmark | rollouts scored (failed) | mean reward (95% CI) | the environment's own metrics | "
           "collection (whole command) |", "|---|---|---|---|---|"]
    for name, run in r["runs"].items():
        failed_runs = ", ".join(f"{n} {k}" for k, n in run["failed"].items()) or "none"
        out.append(f"| {name} | {run['rollouts']} ({failed_runs}) | {run['mean_reward']:.3f} "
                   f"({run['ci95'][0]:.3f}–{run['ci95'][1]:.3f}) | {own(name, run['own_metrics'])} | "
                   f"{run['collection_s']} s ({run['command_wall_s']} s) |")
    return "\n".join(out)


# block name -> (results file it reads, renderer)
def grpo_learning(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s, held, push = r["settings"], r["held_out"], r["weight_push"]
    return "\n".join([
        f"Source: {source(r)}; load average {r['load_average_at_end']} at the end.", "",
        f"The example GRPO trainer, {s['steps']} steps of {s['prompts_per_step']} prompts x "
        f"{s['generations_per_prompt']} completions (lr {s['learning_rate']}, max trajectory age "
        f"{s['max_trajectory_age']}, {s['model']}), on {s['training_rows']} one-digit sums; held-out mean reward on "
        f"the other {s['held_out_rows']}: sampled at temperature 1 ({s['held_out_samples_per_row']} per row) "
        f"**{held['sampled']['before']:.3f} -> {held['sampled']['after']:.3f}**, greedy "
        f"**{held['greedy']['before']:.3f} -> {held['greedy']['after']:.3f}** (goal +0.15). A weight push (write "
        f"+ load into vLLM) took {push['mean_s']} s on average (at most {push['max_s']} s), "
        f"**{push['share_of_step']:.1%}** of a {push['mean_step_s']} s step (goal at most 10%).", "",
        "![GRPO reward curve](img/grpo_learning.png)"])


def grpo_vs_trl(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s, reach, held = r["settings"], r["reach"], r["held_out"]
    ratio = ("never reached it" if reach["ours_over_trl"] is None else
             f"reached it after {reach['ours_s']} s, TRL after {reach['trl_s']} s: **{reach['ours_over_trl']}x** "
             f"TRL's time (goal at most 0.5; {reach['ours_over_trl_end']}x TRL's {reach['trl_end_s']} s of training)")

    def held_out(side: str) -> str:
        return (f"{side} greedy {held['start']['greedy']:.3f} -> {held[side]['greedy']:.3f}, sampled "
                f"{held['start']['sampled']:.3f} -> {held[side]['sampled']:.3f}")

    return "\n".join([
        f"Source: {source(r)}; load average {r['load_average_at_end']} at the end.", "",
        f"A {s['budget_s']:.0f} s budget each, {s['prompts_per_step']} prompts x {s['generations_per_prompt']} "
        f"completions a step (lr {s['learning_rate']}, {s['model']}): ours ({s['ours_mode']}) ran "
        f"{len(r['ours']['steps'])} steps, TRL "
        f"{len(r['trl']['steps'])}. TRL's final training reward (mean of its last {reach['window_steps']} steps) is "
        f"{reach['trl_final_reward']}; ours {ratio}. Held-out mean reward on {s['held_out_rows']} rows, one "
        f"evaluator for both: {held_out('ours')}; {held_out('trl')}.", "",
        "![GRPO vs TRL reward curves](img/grpo_vs_trl.png)"])


def grpo_async_vs_sync(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s, runs, ratios = r["settings"], r["runs"], r["ratios"]
    rows = [f"| {name.replace('_', ' ')} | {run['mean_step_s']} | {run['vllm_idle_fraction']:.0%} | "
            f"{run['trainer_idle_fraction']:.0%} | {run['mean_wait_s']} / {run['mean_train_s']} / "
            f"{run['mean_refit_wait_s']} / {run['mean_push_s']} | {run['mean_token_mult_prob_error']} | "
            f"{run['load_average_at_end'].split()[0]} |" for name, run in runs.items()]
    return "\n".join([
        f"Source: {source(r)}; load average {r['load_average_at_end']} at the end.", "",
        f"{s['timed_steps']} timed steps of {s['prompts_per_step']} prompts x {s['generations_per_prompt']} "
        f"completions ({s['max_new_tokens']} tokens, lr {s['learning_rate']}, {s['model']}), real training and a "
        f"weight push every step. Synchronous over asynchronous (max age {s['max_trajectory_age']}) per step, vLLM "
        f"and the trainer on a core each: **{ratios['sync_over_async_pinned']}x** (goal 1.6x); synchronous on both "
        f"cores shared over the same asynchronous run: {ratios['sync_shared_over_async_pinned']}x.", "",
        "| run | s per step | vLLM idle | trainer idle | wait / train / refit wait / push (s) | "
        "token_mult_prob_error | load at end |",
        "|---|---|---|---|---|---|---|", *rows, "",
        "![async vs sync GRPO](img/grpo_async_vs_sync.png)"])


def grpo_off_policy(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s, runs, noise = r["settings"], r["runs"], r["noise_distance"]
    rows = []
    for name, run_ in runs.items():
        m = run_["summary"]
        distance = r["distance_from_age0"].get(name)
        if distance is not None:
            versus = f"**{distance}** ({distance / noise:.2f}x noise)" if noise else f"**{distance}**"
        else:
            versus = "baseline" if run_["seed"] == s["seed"] else f"{noise} (the noise)"
        rows.append(f"| {run_['age']} | {'on' if run_['importance_sampling'] else 'off'} | {run_['seed']} | "
                    f"{m['mean_reward']} | {m['final_reward']} | {versus} | {m['mean_age']} | "
                    f"{m['mean_importance_weight']} | {m['mean_clipped_fraction']} | {m['mean_step_s']} |")
    return "\n".join([
        f"Source: {source(r)}; load average {r['machine']['load_average_at_end']} at the end.", "",
        f"{s['steps']} steps of {s['prompts_per_step']} prompts x {s['generations_per_prompt']} completions each run "
        f"(lr {s['learning_rate']}, {s['model']}, importance-sampling cap {s['importance_sampling_cap']}). Distance: "
        f"mean absolute difference of the {s['trailing_window']}-step trailing mean reward from the age-0 run "
        f"without correction, per step; noise: the same distance between two age-0 runs that differ only by seed.", "",
        f"| max age | correction | seed | mean reward | last {s['final_steps']} steps | distance from age 0 | "
        f"mean age | mean importance weight | clipped fraction | s per step |",
        "|---|---|---|---|---|---|---|---|---|---|", *rows, "",
        "![GRPO off-policy](img/grpo_off_policy.png)"])


def _largest_steps(transport: dict[str, Any]) -> str:
    shares = sorted(transport["steps_share"].items(), key=lambda item: -item[1])[:2]
    return ", ".join(f"{step.replace('_', ' ')} {share:.0%}" for step, share in shares)


def weight_push(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s, models = r["settings"], r["models"]
    rows = [f"| {name} | {m['parameters'] / 1e6:,.0f}M | {m['disk']['mean_s']} ({_largest_steps(m['disk'])}) | "
            f"{m['disk']['bytes_per_push'] / 1e9:.2f} GB | {m['gloo']['mean_s']} ({_largest_steps(m['gloo'])}) | "
            f"{m['gloo']['bytes_per_push'] / 1e9:.2f} GB | **{m['gloo_over_disk']}x** | {m['cpu_repack']['s']} "
            f"({m['cpu_repack']['over_disk']}x disk) |" for name, m in models.items()]
    first = next(iter(models.values()))
    return "\n".join([
        f"Source: {source(r)}; load average {r['machine']['load_average_at_end']} at the end.", "",
        f"Mean of {s['pushes_per_transport']} pushes per transport into one vLLM replica, {s['dtype']} on both "
        f"sides, after a first push of each (the first gloo push also sets up its process group: "
        f"{first['gloo']['rendezvous_s']} s for {next(iter(models))}). A disk push is the trainer's write plus vLLM's "
        f"reload; its bytes are written and read back. Goal for the bundled model: gloo at most 0.3x disk. CPU "
        f"repack (median of {len(first['cpu_repack']['runs_s'])}): packing the model's matrices into oneDNN's format "
        f"on one thread, as vLLM's CPU layers do after every load; both transports' last step pays it, so it is a "
        f"floor under gloo / disk on this CPU.", "",
        "| model | parameters | disk push, s (largest steps) | disk bytes | gloo push, s (largest steps) | gloo bytes | "
        "gloo / disk | CPU repack, s |", "|---|---|---|---|---|---|---|---|", *rows])


def fleet(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    ratios, profile = r["ratios"], r["settings"]["profile"]
    out = [f"Simulated replicas: {profile['name']}, {profile['max_num_seqs']} sequences and "
           f"{profile['kv_cache_tokens']:,} KV-cache tokens each. The first tables are simulated time (the same on "
           f"any machine); the CPU table is our real stack on this machine. Source: {source(r)}.", "",
           "| replicas | rows | setting | in flight | rollouts/s | slot utilization | prefix-cache hits | "
           "vs best fixed |",
           "|---|---|---|---|---|---|---|---|"]
    best = {(row["replicas"], row["workload"]): row["rollouts_per_s"] for row in r["utilization"]
            if row["setting"].startswith("best fixed")}
    for row in r["utilization"]:
        hits = f"{row['prefix_hit_rate']:.2f}" if row["workload"] == "multi-turn" else "-"
        vs = row["rollouts_per_s"] / best[(row["replicas"], row["workload"])]
        setting = f"**{row['setting']}**" if row["setting"].startswith("automatic") else row["setting"]
        out.append(f"| {row['replicas']} | {row['workload']} | {setting} | {_n(row['level'])} | "
                   f"{_rate(row['rollouts_per_s'])} | {row['utilization']:.3f} | {hits} | {vs:.3f} |")
    out += ["", "| routing, 8 replicas, multi-turn, their slots in flight | rollouts/s | slot utilization | "
            "prefix-cache hits | sessions moved |", "|---|---|---|---|---|"]
    for row in r["routing"]:
        out.append(f"| {row['setting']} | {_rate(row['rollouts_per_s'])} | {row['utilization']:.3f} | "
                   f"{row['prefix_hit_rate']:.3f} | {_n(row['moved'])} |")
    out += ["", f"Load-aware over hash routing: **{ratios['load_aware_vs_hash_one_slower']:.2f}x** with one replica "
            f"2x slower, **{ratios['load_aware_vs_hash_all_equal']:.3f}x** with all equal; prefix-cache hits "
            f"{ratios['prefix_hits_load_aware_vs_hash_all_equal']:.3f}x hash routing's (all equal)."]
    fo = r["failover"]
    killed = fo["killed"]
    out += ["", f"A replica killed at {killed['at_s']:.0f} s of {fo['window_s'][1]:.0f} s and back at "
            f"{killed['back_at_s']:.0f} s (8 replicas, multi-turn, automatic level): {_n(fo['succeeded'])} rollouts "
            f"collected, {fo['duplicates']} twice, {fo['failed']} failed, {_n(fo['retried'])} attempts run again "
            f"({_n(fo['in_flight_at_end'])} still in flight when the run ended). Slot utilization "
            f"{fo['utilization_before']:.3f} the minute before, {fo['utilization_while_down']:.3f} while it was down "
            f"(7 of 8 replicas' slots: at most 0.875), {fo['utilization']:.3f} from a minute after its return; "
            f"rollouts/s {_rate(fo['rollouts_per_s_before'])}, {_rate(fo['rollouts_per_s_while_down'])} and "
            f"{_rate(fo['rollouts_per_s'])}.", ""]
    if r["cpu"]:
        out += ["| replicas | automatic level | rows in flight (measured) | our CPU per 1,000 rollouts/s | the fleet's "
                "rollouts/s | cores for that fleet | CPU ms per rollout by process |", "|---|---|---|---|---|---|---|"]
        for row in r["cpu"]:
            parts = ", ".join(f"{name} {ms:.2f}" for name, ms in row["cpu_ms_per_rollout_by_process"].items())
            out.append(f"| {row['replicas']} | {_n(row['automatic_level'])} | {_n(row['rows_in_flight'])} | "
                       f"**{row['cores_per_1000_rollouts_per_s']:.2f} cores** | {_rate(row['fleet_rollouts_per_s'])} | "
                       f"{row['cores_for_this_fleet']:.2f} | {parts} |")
        out.append("")
    out.append("![fleet utilization over time](img/fleet_utilization.png)")
    return "\n".join(out)


def _ejection(row: dict[str, Any]) -> str:
    if row["time_to_eject_s"] is None:
        return "not ejected"
    return f"{row['time_to_eject_s']:.2f} s ({row['time_to_eject_simulated_s']:.1f} s simulated)"


def _missing(row: dict[str, Any]) -> str:
    stopped = " (still in flight when the benchmark stopped the run)" if row["stopped_by_benchmark"] else ""
    return f"{row['missing']}{stopped}"


def chaos(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s, t = r["settings"], r["targets"]
    out = [f"{s['replicas']} simulated replicas, {s['workload']} rows ({s['time_scale']:g} simulated seconds per "
           f"second), {s['in_flight']} rows in flight, {s['rows']:,} rows per run; a fault from the start is set "
           f"before the stack starts, one mid-run once {s['fault_at']:.0%} of the rows are done (a killed replica "
           f"comes back once it is out and {s['killed_back_after']:.0%} more are done). Throughput: from the fault (at "
           f"least {s['throughput_window'][0]:.0%} of the rows) to {s['throughput_window'][1]:.0%}, over a fleet of "
           f"the healthy replicas alone in the same run. Targets: every rollout exactly once, {t['failed_rollouts']} "
           f"failed, throughput at least {t['throughput_vs_healthy_at_least']}, ejected within "
           f"{t['time_to_eject_s_at_most']:g} s. Source: {source(r)}.", "",
           "| fault | faulty | from | exactly once | failed rollouts | missing at the end | time to eject | "
           "throughput vs healthy-only |", "|---|---|---|---|---|---|---|---|"]
    for row in r["faults"]:
        when = "mid-run" if row["mid_run"] else "the start"
        if row["back_after_s"] is not None:
            when += f", back after {row['back_after_s']:.1f} s"
        ratio = ("n/a" if row["throughput_vs_healthy"] is None else
                 f"**{row['throughput_vs_healthy']:.2f}** ({_rate(row['rollouts_per_s'])} vs "
                 f"{_rate(row['healthy_rollouts_per_s'])} rollouts/s)")
        out.append(f"| `{row['fault']}` | {row['faulty_replicas']} of {s['replicas']} | {when} | "
                   f"{'yes' if row['exactly_once'] else '**no**'} | {row['failed_rollouts']} | {_missing(row)} | "
                   f"{_ejection(row)} | {ratio} |")
    q = r["quota"]
    stop = ("did not stop" if q["time_to_stop_s"] is None else f"stopped **{q['time_to_stop_s']:.2f} s** after the "
            f"first refusal{' (by the benchmark)' if q['stopped_by_benchmark'] else ''}")
    out += ["", f"A hosted endpoint whose quota is spent after {q['quota_requests']} requests (then 429 "
                f"`insufficient_quota`, `retry-after: {q['retry_after_s']}`), {q['rows']} rows: ng_collect_rollouts "
                f"{stop} (target {t['quota_time_to_stop_s_at_most']:g} s) with exit status {q['exit_status']}, "
                f"{q['rollouts']} rollouts saved, {q['failed_rollouts']} recorded as failed, {q['missing']} left to a "
                f"resume; the spent endpoint answered {q['requests_refused']} requests with that 429 in all."]
    return "\n".join(out)


def sick_replica(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    s = r["settings"]
    runs = " ".join(f"{run['kind']} {run['succeeded']}/{s['rows']} in {run['elapsed_s']:.1f} s;" for run in r["runs"])
    return (f"{s['rows']} math rows (`{s['agent']}`, max {s['max_output_tokens']} output tokens, concurrency "
            f"{s['concurrency']}), runs in the order {', '.join(s['order'])}: {runs} with the sick replica "
            f"{sum(r['collected_with_sick'])} collected and **{sum(r['failed_with_sick'])} failed**; the sick replica "
            f"got {', '.join(str(n) for n in r['gateway_requests_per_sick_run'])} generation requests per run. "
            f"Throughput with the sick replica over the healthy replica alone: "
            f"**{r['ratios']['sick_pair_over_healthy_alone']:.3f}** "
            f"({_rate(r['rollouts_per_s']['sick'])} vs {_rate(r['rollouts_per_s']['healthy'])} rollouts/s). "
            f"Source: {source(r)}.")


def ifeval_agreement(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    settings, kinds = r["settings"], r["kinds"]
    out = ["| kind | compared | agreed | agreement |", "|---|---|---|---|"]
    for name, kind in kinds.items():
        out.append(f"| `{name}` | {kind['compared']} | {kind['agreed']} | **{kind['agreement']:.2%}** |")
    skipped = ", ".join(f"`{name}`" for name in settings["not_compared"])
    return "\n".join([*out, "", f"{_n(settings['triples'])} triples; not compared: {skipped} (their IFEval checks need "
                       f"NLTK's punkt models, which no PyPI package ships). Disagreements: "
                       f"**{r['ratios']['disagreements']}**. Source: {source(r)}."])


def long_runs(r: Report) -> str:
    if (failed := _failed(r)) is not None:
        return failed
    b, h = r["rebilling"], r["hot_path"]
    rb, rh = r["ratios"]["rebilling"], r["ratios"]["hot_path"]
    runs = b["runs"]
    out = [f"{b['rows']} weather rollouts (2 model calls each), {b['in_flight']} in flight, against the hosted stub "
           f"(median answer {b['stub_latency_median_s']:g} s), which counts the calls it answers. The collector is "
           f"killed by SIGKILL {b['kills']} times and resumed after each until the output is complete. Source: "
           f"{source(r)}.", "",
           "| run | killed at (rollouts in the output) | calls billed | beyond the uninterrupted run |",
           "|---|---|---|---|"]
    base = runs["uninterrupted"]["billed_calls"]
    for name, label in (("uninterrupted", "uninterrupted"), ("replay_on", "replay on (the default)"),
                        ("replay_off", "`+replay_model_calls=false`")):
        run = runs[name]
        kills = ", ".join(str(k) for k in run["kills_at_rollouts"]) or "-"
        extra = run["billed_calls"] - base
        out.append(f"| {label} | {kills} | {_n(run['billed_calls'])} | "
                   f"{'-' if name == 'uninterrupted' else f'**{extra:+d}**'} |")
    journal, level = h["journal_rounds"], h["level_rounds"]
    out += ["", f"Bound for replay on: the calls in flight at the kills, {rb['extra_call_bound_calls_in_flight_at_kills']} "
                f"({'within' if rb['extra_calls_replay_on_within_bound'] else '**beyond**'} it). On the hot path "
                f"(instant stub, {_n(h['rows'])} rows, a fixed 256 in flight, {len(journal['replay_on'])} alternating "
                f"rounds, "
                f"medians): CPU per rollout with the journal vs without **{rh['journal_cpu_per_rollout_on_vs_off']:.3f}**"
                f", rollouts/s **{rh['journal_rate_on_vs_off']:.3f}**; the default concurrency vs the best fixed level "
                f"({rh['best_fixed'].replace('_', ' ')}), rollouts/s **{rh['default_vs_best_fixed_rate']:.3f}** ("
                + "; ".join(f"{name.replace('_', ' ')} {', '.join(_rate(x['rollouts_per_s']) for x in runs)}"
                            for name, runs in level.items()) + ")."]
    once, ro = r["exactly_once"], r["ratios"]["exactly_once"]
    out += ["", f"Exactly once with replay on: {_n(once['rows'])} rows against the instant stub at 256 in flight, "
                f"the collector killed {len(once['kills_at_rollouts'])} times (at "
                f"{', '.join(_n(k) for k in once['kills_at_rollouts'])} rollouts in the output) and resumed: "
                f"**{ro['lost']} lost, {ro['duplicated']} duplicated, {ro['torn_lines']} torn lines**, "
                f"{_n(ro['journal_left_bytes'])} bytes of journal left ({once['elapsed_s']:g} s in all)."]
    return "\n".join(out)


RENDERERS: dict[str, tuple[str, Callable[[Report], str]]] = {
    "ifeval_agreement": ("ifeval_agreement", ifeval_agreement),
    "main_output": ("main_command", main_output),
    "glance": ("collector", glance),
    "collector": ("collector", collector),
    "saturation": ("saturation", saturation),
    "automatic_level": ("automatic_level", automatic_level),
    "http_clients": ("http_clients", http_clients),
    "nemo_gym_reference": ("nemo_gym_reference", nemo_gym_reference),
    "hosted_api": ("hosted_api", hosted_api),
    "aggregate": ("aggregate", aggregate),
    "experience": ("experience", experience),
    "async_collector": ("async_collector", async_collector),
    "benchmark_runs": ("benchmark_runs", benchmark_runs),
    "environment_runs": ("environment_runs", environment_runs),
    "grpo_learning": ("grpo_learning", grpo_learning),
    "grpo_vs_trl": ("grpo_vs_trl", grpo_vs_trl),
    "grpo_off_policy": ("grpo_off_policy", grpo_off_policy),
    "agent_workers": ("agent_workers", agent_workers),
    "colocated": ("colocated", colocated),
    "agent_workers_16_cores": ("16_cores/agent_workers", agent_workers),
    "collector_16_cores": ("16_cores/collector", collector),
    "viewer": ("viewer", viewer),
    "cpu_profile": ("cpu_profile", cpu_profile),
    "cpu_profile_colocated": ("cpu_profile_colocated", cpu_profile),
    "fresh_clone": ("fresh_clone", fresh_clone),
    "grpo_async_vs_sync": ("grpo_async_vs_sync", grpo_async_vs_sync),
    "fleet": ("fleet", fleet),
    "chaos": ("chaos", chaos),
    "sick_replica": ("sick_replica", sick_replica),
    "weight_push": ("weight_push", weight_push),
    "long_runs": ("long_runs", long_runs),
}
