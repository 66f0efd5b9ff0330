"""One table of every speed figure against its target, from the benchmark
JSON files `bash launch/bench.sh` writes.

  python -m mgrpo_jax.bench.summary runs/bench

Reads speed.json (`bench.speed`), rollouts.json (`bench.rollouts`) and
step.json (`bench.step`) from the folder, prints one markdown table (a
missing file's rows say so) and writes bench.json beside them: the three
results under "speed", "rollouts" and "step", and the table's rows. A
team.json (`bench.team_memory`, `bash launch/bench_team.sh`: the
pretrained team's step and memory by batch size) is added when present.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

FILES = ("speed", "rollouts", "step")
OPTIONAL = ("team",  # Read when present (launch/bench_team.sh writes it),
            "programs",  # and bench.programs and bench.moe_speed
            "moe_speed")  # (launch/bench.sh).

# (batch, ours / HF, ours / Tunix) targets of the sampler.
GENERATE_TARGETS = {8: (2.0, 1.2), 32: (1.5, 1.2)}


def _tps(side: Any) -> float | None:
  return side.get("tokens_per_second") if isinstance(side, dict) else None


def _ratio(a: float | None, b: float | None) -> float | None:
  return a / b if a and b else None


def _met(value: float | None, target: float, *, below: bool = False) -> str:
  if value is None:
    return "not measured"
  return "met" if (value < target if below else value >= target) else "missed"


def rows(results: dict[str, Any]) -> list[dict[str, str]]:
  """One row per measurement: what, ours, the peer's, ratio, target, met."""
  out = []
  speed = results.get("speed")
  for g in (speed or {}).get("generate", []):
    hf, tunix = _tps(g.get("torch")), _tps(g.get("tunix"))
    hf_target, tunix_target = GENERATE_TARGETS.get(g["batch"], (None, None))
    why = (g.get("tunix") or {}).get("unavailable", "")
    sides = [("", g.get("ours"))]
    if "ours_bfloat16" in g:  # (older speed.json files lack it)
      gap = g["ours_bfloat16"]["logp_gap"]
      sides.append((f", bfloat16 weights option (log-prob gap to float32: "
                    f"mean {gap['mean_abs']:.3f}, max {gap['max_abs']:.3f})",
                    g["ours_bfloat16"]))
    for label, side in sides:
      ours = _tps(side)
      for peer, theirs, target in (("HF generate", hf, hf_target),
                                   ("Tunix", tunix, tunix_target)):
        ratio = _ratio(ours, theirs)
        out.append({
            "measurement": f"sampler tokens/s, batch {g['batch']}{label}, "
                           f"vs {peer}",
            "ours": f"{ours:.1f}" if ours else "-",
            "peer": f"{theirs:.1f}" if theirs else (why or "-"),
            "ratio": f"{ratio:.2f}x" if ratio else "-",
            "target": f">= {target}x" if target else "-",
            "status": _met(ratio, target) if target else "-"})
  ts = (speed or {}).get("train_step")
  if ts:
    ratio = ts["torch"]["seconds"] / ts["ours"]["seconds"]
    out.append({"measurement": f"train step fwd+bwd [{ts['batch']}, "
                f"{ts['length']}] seconds, vs PyTorch",
                "ours": f"{ts['ours']['seconds']:.2f}",
                "peer": f"{ts['torch']['seconds']:.2f}",
                "ratio": f"{ratio:.2f}x", "target": ">= 1.0x",
                "status": _met(ratio, 1.0)})
  ro = results.get("rollouts")
  if ro:
    n = ro["questions"] * ro["rollouts"]
    out.append({"measurement": f"rollouts tokens/s, {n} live conversations "
                "vs one at a time",
                "ours": f"{ro['batched']['tokens_per_second']:.1f}",
                "peer": f"{ro['sequential']['tokens_per_second']:.1f}",
                "ratio": f"{ro['speedup']:.2f}x", "target": ">= 4x",
                "status": _met(ro["speedup"], 4.0)})
  st = results.get("step")
  if st:
    out.append({"measurement": "M-GRPO overhead (advantages, alignment, "
                "store I/O) share of a step",
                "ours": f"{st['overhead_share']:.2%}",
                "peer": f"step {st['step_seconds']:.2f} s", "ratio": "-",
                "target": "< 2%",
                "status": _met(st["overhead_share"], 0.02, below=True)})
    per_100 = st["compilations_per_100_steps"]
    closed = st.get("closed")
    # The default (runtime.shapes="closed") beside open shapes when both ran.
    mine = (closed if closed and "compilations_per_100_steps" in closed
            else st)
    ours = mine["compilations_per_100_steps"]
    out.append({"measurement": "compilations per 100 steps after warm-up",
                "ours": f"{ours:.0f}",
                "peer": f"open {per_100:.0f}" if mine is closed else "-",
                "ratio": "-", "target": "0",
                "status": _met(ours, 0.5, below=True)})
    if "cache_loads_per_100_steps" in mine:  # (older step.json files lack it)
      out.append({"measurement": "  of which loaded from the persistent "
                  "compilation cache",
                  "ours": f"{mine['cache_loads_per_100_steps']:.0f}",
                  "peer": "-", "ratio": "-", "target": "-", "status": "-"})
    if closed:
      out.extend(_closed_rows(st, closed))
    for key, mib in st["memory"].items():
      out.append({"measurement": f"peak memory, {key}", "ours": f"{mib:.0f}",
                  "peer": "-", "ratio": "-", "target": "-", "status": "-"})
  pr = results.get("programs")
  if pr:
    first, second = pr["starts"].values()
    for agent, parts in first.items():
      for part, (n, seconds) in parts.items():
        out.append({"measurement": f"closed set of {pr['config']}: {agent} "
                    f"{part} programs (compile s, first start / second)",
                    "ours": f"{n:.0f} ({seconds:.1f} / "
                    f"{second[agent][part][1]:.1f} s)", "peer": "-",
                    "ratio": "-", "target": "-", "status": "-"})
  ms = results.get("moe_speed")
  if ms:
    grouped, every, dense = (ms["moe (blocks)"], ms["moe (ragged_dot)"],
                             ms["dense"])
    for what, key, faster in (("train step seconds", "train_step_seconds",
                               lambda a, b: b / a),
                              ("sampler tokens/s", "sampler_tokens_per_second",
                               lambda a, b: a / b)):
      ratio = faster(grouped[key], every[key])
      out.append({"measurement": f"MoE {what}, grouped experts vs every "
                  f"expert (dense twin: {dense[key]:.3g})",
                  "ours": f"{grouped[key]:.3g}", "peer": f"{every[key]:.3g}",
                  "ratio": f"{ratio:.2f}x", "target": ">= 1.0x",
                  "status": _met(ratio, 1.0)})
  team = results.get("team")
  if team:
    for r in team["sizes"]:
      out.append({"measurement": f"{team['config']} step at B x K = "
                  f"{r['B']}x{r['K']} (rollout / main / sub update s)",
                  "ours": f"{r['step_seconds']:.1f} s ({r['rollout_seconds']:.1f}"
                  f" / {r['main_update_seconds']:.1f} / "
                  f"{r['sub_update_seconds']:.1f})",
                  "peer": "-", "ratio": "-", "target": "-",
                  "status": f"peak {r['peak_host_gib']:.1f} GiB"
                  + (f" (planned {r['planned_gib']:.1f}; largest part "
                     f"{r['largest_part']})" if "planned_gib" in r else "")})
    out.append({"measurement": f"largest B x K within {team['limit_gib']} "
                "GiB", "ours": str(team["largest_fitting"]), "peer": "-",
                "ratio": "-", "target": "-", "status": "-"})
  for name in FILES:
    if name not in results:
      out.append({"measurement": f"{name}.json", "ours": "missing",
                  "peer": "-", "ratio": "-", "target": "-", "status": "-"})
  return out


def _closed_rows(open_: dict, closed: dict) -> list[dict[str, str]]:
  """The closed set of programs against open shapes (bench.step's
  --shapes=open,closed): compilations after the first step, start-up, and
  each phase's seconds (ratio open / closed: >= 0.95 is within 5%)."""
  after = closed["compilations_after_first_step"]
  startup = closed["startup"]
  rows = [{"measurement": "closed shapes: compilations after the first step",
           "ours": f"{after:.0f}",
           "peer": f"open {open_['compilations_after_first_step']:.0f}",
           "ratio": "-", "target": "0",
           "status": _met(after, 0.5, below=True)},
          {"measurement": "closed shapes: programs compiled at start-up "
           "(seconds)", "ours": f"{startup.get('programs', 0):.0f} "
           f"({startup.get('compile_seconds', 0):.0f} s)", "peer": "-",
           "ratio": "-", "target": "-", "status": ", ".join(
               f"{k[len('programs/'):]} {v:.0f}" for k, v in startup.items()
               if k.startswith("programs/"))}]
  for phase in ("rollout", "main learner", "sub learner"):
    if phase in closed["phases"] and phase in open_["phases"]:
      ours, theirs = closed["phases"][phase], open_["phases"][phase]
      ratio = _ratio(theirs, ours)
      rows.append({"measurement": f"closed shapes: {phase} seconds of the "
                   "median step, vs open", "ours": f"{ours:.2f}",
                   "peer": f"{theirs:.2f}",
                   "ratio": f"{ratio:.2f}x" if ratio else "-",
                   "target": ">= 0.95x", "status": _met(ratio, 0.95)})
  return rows


def table(table_rows: list[dict[str, str]]) -> str:
  keys = ("measurement", "ours", "peer", "ratio", "target", "status")
  lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
  lines += ["| " + " | ".join(r[k] for k in keys) + " |" for r in table_rows]
  return "\n".join(lines)


def summarize(folder: str | pathlib.Path) -> dict[str, Any]:
  """Reads the folder's result files; writes and returns bench.json."""
  folder = pathlib.Path(folder)
  if not folder.is_dir():
    raise ValueError(f"{folder}: no such folder; expected the folder "
                     "`bash launch/bench.sh` wrote (default runs/bench).")
  results: dict[str, Any] = {}
  for name in FILES + OPTIONAL:
    path = folder / f"{name}.json"
    if path.is_file():
      try:
        results[name] = json.loads(path.read_text())
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e}); expected the file "
                         f"`mgrpo_jax.bench.{name}` writes.") from e
  machines = {r["machine"] for r in results.values() if "machine" in r}
  out = {"machines": sorted(machines), **results, "rows": rows(results)}
  (folder / "bench.json").write_text(json.dumps(out, indent=1))
  return out


def main(argv: list[str]) -> int:
  if len(argv) != 2:
    print("usage: python -m mgrpo_jax.bench.summary FOLDER", file=sys.stderr)
    return 2
  try:
    out = summarize(argv[1])
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  print(f"machine: {'; '.join(out['machines']) or 'unknown'}")
  print(table(out["rows"]))
  print(f"wrote {pathlib.Path(argv[1]) / 'bench.json'}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
