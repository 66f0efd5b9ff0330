"""The reproduction's pre-registered design, and the check that a suite about
to run is the one its protocol file describes.

launch/results/reproduce/PROTOCOL.md states, before the full suite ran, the
task, arms, seeds, steps, endpoints and analysis in prose, and the part a
machine can check in one fenced block that opens with ```json protocol:

  {"config": "configs/reproduce.py:full",
   "config_sha256": the digest of that config's fields (run_dir and seed,
                    which reproduce.py sets per run, left out),
   "steps": M-GRPO steps per run,
   "arms": {arm: {"overrides": {...}, "seeds": n}},
   "primary": [the pair whose paired difference is the primary endpoint],
   "endpoint": the test metric compared: "novel_accuracy" (test questions
               whose facts no warm-start demonstration showed) wherever
               the warm start demonstrates other worlds (sft.worlds > 0);
               a protocol without it is the first suite's, "accuracy"}

`python -m mgrpo_jax.reproduce_protocol` prints that block for the suite as
configured now. `python -m mgrpo_jax.reproduce` checks the main suite against
it before any run: a config, an arm's overrides, a seed count or a step count that differ
from the protocol refuse the command, naming what differs. Seeds are always
0 .. n-1, so the result can be checked on seeds outside the protocol.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import re
from typing import Mapping, Sequence

from mgrpo_jax.runtime.config_checks import load_config_file

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG_FILE = "configs/reproduce.py"
PROTOCOL = ROOT / "launch" / "results" / "reproduce" / "PROTOCOL.md"
_BLOCK = re.compile(r"```json protocol\n(.*?)\n```", re.DOTALL)


class ProtocolError(ValueError):
  """The suite about to run is not the one the protocol file describes."""


# Fields added to sections the protocol keyed, with the value that
# reproduces the registered runs: (dotted section, field, value).
ADDED_FIELDS = (("sft", "demonstrations", "oracle"),
                ("sft", "worlds", 0), ("sft", "world_seed", 1000000),
                ("train", "counterfactual_questions", 0),
                ("train", "scripted", ""),
                ("train", "rollout_shards", 0),
                *((f"learner.{agent}", "remat", False)
                  for agent in ("main", "sub", "verifier")),
                *((f"learner.{agent}", field, default)
                  for agent in ("main", "sub", "verifier")
                  for field, default in (
                      ("router_aux_weight", 0.0), ("lora_rank", 0),
                      ("lora_alpha", 16.0),
                      ("lora_targets", ["wq", "wk", "wv", "wo", "w_gate",
                                        "w_up", "w_down"]))),
                *((f"mesh.{agent}", "sampler_devices", 0)
                  for agent in ("main", "sub", "verifier")),
                ("agents", "share_base", False),
                ("agents", "sub_branches", 1),
                ("runtime", "shapes", "open"),
                ("runtime", "strict_shapes", False),
                ("runtime", "decode_row_floor", 8),
                ("runtime", "decode_windows", 4),
                ("runtime", "prefill_windows", 2),
                ("runtime", "prefill_chunk", 256),
                ("runtime", "compile_threads", 2))


def without_added_defaults(fields: dict) -> dict:
  """`fields` without the sections added to the configs after the protocol
  was registered, where they hold the values that reproduce the registered
  runs (the generated world's data, the local tools, `ADDED_FIELDS`): the
  digest of a config that runs the same suite stays
  the protocol's, and any other value of them changes it."""
  from mgrpo_jax.train.data import SYNTHETIC_DATA  # pylint: disable=g-import-not-at-top
  fields = dict(fields)
  tools = load_config_file(str(ROOT / "configs" / "tools.py")).to_dict()
  if fields.get("data") == SYNTHETIC_DATA:
    del fields["data"]
  if fields.get("tools") == json.loads(json.dumps(tools)):
    del fields["tools"]
  for section, field, default in ADDED_FIELDS:
    *outer, last = section.split(".")
    parent = fields
    for name in outer:  # Copies on the way down: `fields` is the caller's.
      if not isinstance(parent.get(name), dict):
        break
      parent[name] = dict(parent[name])
      parent = parent[name]
    else:
      values = dict(parent.get(last, {}))
      if field in values and values[field] == default:
        del values[field]
        parent[last] = values
        if not values:  # A section added whole, at its defaults.
          del parent[last]
  return fields


ENDPOINTS = ("accuracy", "novel_accuracy")
# What a protocol written before the "endpoint" field registered.
FIRST_ENDPOINT = "accuracy"


def endpoint_of(config) -> str:
  """The endpoint a suite of `config` must register: novel-fact accuracy
  where the warm start demonstrates other worlds (the facts must be read,
  and that is what the comparison is about), else accuracy."""
  return "novel_accuracy" if config.sft.get("worlds", 0) else FIRST_ENDPOINT


def config_digest(config_arg: str) -> tuple[str, int]:
  """(sha256 of the config's fields but run_dir and seed, its train.steps)
  of `configs/reproduce.py:<config_arg>` (`without_added_defaults`)."""
  config = load_config_file(f"{ROOT / CONFIG_FILE}:{config_arg}")
  fields = without_added_defaults(
      json.loads(config.to_json_best_effort(sort_keys=True)))
  fields.pop("run_dir")
  fields.pop("seed")
  blob = json.dumps(fields, sort_keys=True).encode()
  return hashlib.sha256(blob).hexdigest(), int(config.train.steps)


def design(arms: Mapping[str, Mapping[str, object]],
           seeds: Mapping[str, int], primary: Sequence[str],
           config_arg: str = "full") -> dict:
  """The machine-checkable design of a main suite: `arms` name -> overrides,
  `seeds` name -> count."""
  digest, steps = config_digest(config_arg)
  config = load_config_file(f"{ROOT / CONFIG_FILE}:{config_arg}")
  return {"config": f"{CONFIG_FILE}:{config_arg}", "config_sha256": digest,
          "steps": steps, "endpoint": endpoint_of(config),
          "arms": {name: {"overrides": dict(overrides),
                          "seeds": int(seeds[name])}
                   for name, overrides in arms.items()},
          "primary": list(primary)}


def read(path: str | pathlib.Path) -> dict:
  """The design block of a protocol file."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise ProtocolError(f"--protocol={path}: no such file; expected a "
                        "protocol like launch/results/reproduce/PROTOCOL.md "
                        "(or --protocol=none to run without one).")
  blocks = _BLOCK.findall(path.read_text(encoding="utf-8"))
  if len(blocks) != 1:
    raise ProtocolError(f"{path}: holds {len(blocks)} ```json protocol "
                        "blocks; expected exactly one (the design a suite "
                        "is checked against).")
  try:
    return json.loads(blocks[0])
  except ValueError as e:
    raise ProtocolError(f"{path}: its ```json protocol block is not JSON "
                        f"({e}).") from e


def check(path: str | pathlib.Path, planned: dict,
          runs: Sequence[tuple[str, int]]) -> None:
  """Refuses (ProtocolError) a suite whose design differs from the
  protocol's, or a planned (arm, seed) run the protocol does not have."""
  registered = read(path)
  endpoint = registered.get("endpoint", FIRST_ENDPOINT)
  if endpoint not in ENDPOINTS:
    raise ProtocolError(f"{path}: endpoint {endpoint!r}; expected one of "
                        f"{', '.join(ENDPOINTS)}.")
  if planned["endpoint"] == "novel_accuracy" and endpoint != "novel_accuracy":
    raise ProtocolError(
        f"{path}: names no novel-fact endpoint (endpoint {endpoint!r}) for "
        f"{planned['config']}, whose warm start demonstrates other worlds: "
        "expected \"endpoint\": \"novel_accuracy\" (test accuracy on facts "
        "no demonstration showed, what that testbed is for).")
  differences = []
  if endpoint != planned["endpoint"]:
    differences.append(f"endpoint: the protocol has {endpoint!r}, this "
                       f"suite {planned['endpoint']!r}")
  for field in ("config", "config_sha256", "steps", "primary"):
    if registered.get(field) != planned[field]:
      differences.append(f"{field}: the protocol has "
                         f"{registered.get(field)!r}, this suite "
                         f"{planned[field]!r}")
  arms = registered.get("arms", {})
  for arm, seed in runs:
    if arm not in arms:
      differences.append(f"arm {arm!r}: not in the protocol (it has "
                         f"{', '.join(arms) or 'none'})")
      continue
    if arms[arm].get("overrides") != planned["arms"][arm]["overrides"]:
      differences.append(f"arms.{arm}.overrides: the protocol has "
                         f"{arms[arm].get('overrides')!r}, this suite "
                         f"{planned['arms'][arm]['overrides']!r}")
    if seed >= int(arms[arm].get("seeds", 0)):
      differences.append(f"arms.{arm}: seed {seed} is beyond the protocol's "
                         f"{arms[arm].get('seeds')} seeds")
  if differences:
    unique = list(dict.fromkeys(differences))
    raise ProtocolError(
        f"{path}: the suite differs from the pre-registered design: "
        + "; ".join(unique) + ". Run the protocol's suite, or pass "
        "--protocol=none for a suite that is not the pre-registered one.")


def block(design_: dict) -> str:
  """The fenced block of a protocol file holding `design_`."""
  return "```json protocol\n" + json.dumps(design_, indent=1) + "\n```\n"


if __name__ == "__main__":
  # Prints the block of the main suite as reproduce.py would run it, for a
  # new protocol file (python -m mgrpo_jax.reproduce_protocol).
  from mgrpo_jax import reproduce  # pylint: disable=g-import-not-at-top
  print(block(design(reproduce.ARMS, reproduce.MAIN_SEEDS,
                     reproduce.PRIMARY)), end="")
