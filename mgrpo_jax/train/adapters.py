"""LoRA in a training process: what the store carries, what samplers load,
and one base shared by several agents' adapters.

An agent with `learner.<agent>.lora_rank` > 0 trains adapters on its frozen
base (models/lora.py, `Learner`): its checkpoints and the store's weight
versions hold only the adapters, and a sampler loads the base with them
folded in (`SamplerWeights.state`). With `agents.share_base=True` the
agents that adapt one base on the same devices hold it once
(`share_bases`); each keeps its own adapters, optimizer and sampler copy.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import ml_collections

from mgrpo_jax.models import lora
from mgrpo_jax.runtime.config_checks import boolean, fail, get


def lora_rank(config: ml_collections.ConfigDict, agent: str) -> int:
  return int(config.learner[agent].lora_rank)


def check_share_base(config: ml_collections.ConfigDict,
                     agents: tuple[str, ...]) -> None:
  """`agents.share_base` needs every agent to train adapters (a full
  fine-tune would change the base the others use); ConfigError otherwise
  (run_checks, before any compute)."""
  if not boolean(config, "agents.share_base"):
    return
  full = [a for a in agents if not get(config, f"learner.{a}.lora_rank")]
  if full:
    fail("agents.share_base", True, "False, or lora_rank > 0 for every "
         f"agent (learner.{full[0]}.lora_rank is 0: that agent would train "
         "the base the others share)")


def share_bases(config: ml_collections.ConfigDict, models: dict[str, Any],
                meshes: Mapping[str, Any]) -> dict[str, Any]:
  """With `agents.share_base`, every agent's model is the first agent's
  (one copy of the base weights); refused (ValueError naming the agents)
  when their models or devices differ."""
  if not config.agents.share_base or len(models) < 2:
    return models
  first, *others = models
  devices = lambda name: (None if meshes.get(name) is None
                          else tuple(d.id for d in meshes[name].devices.flat))
  for name in others:
    if models[name].config != models[first].config:
      raise ValueError(f"config.agents.share_base=True: {name}'s model "
                       f"differs from {first}'s; expected one base model "
                       "for every agent.")
    if devices(name) != devices(first):
      raise ValueError(f"config.agents.share_base=True: {name} is on devices "
                       f"{devices(name)} and {first} on {devices(first)}; "
                       "expected the same devices (config.mesh.share=True, "
                       "or equal meshes).")
  return {name: models[first] for name in models}


class SamplerWeights:
  """What each agent's sampler loads, and what the store restores into."""

  def __init__(self, config: ml_collections.ConfigDict,
               models: Mapping[str, Any]):
    from flax import nnx  # pylint: disable=g-import-not-at-top
    self._bases, self._scales, self.targets = {}, {}, {}
    for name, model in models.items():
      state = nnx.split(model)[1]
      rank = lora_rank(config, name)
      if not rank:
        self.targets[name] = state
        continue
      section = config.learner[name]
      template = lora.init_adapters(model.config, tuple(section.lora_targets),
                                    rank=rank, alpha=section.lora_alpha,
                                    key=jax.random.key(0))
      self._bases[name], self._scales[name] = state, template.scale
      self.targets[name] = dict(template.weights)

  def state(self, name: str, params: Any) -> Any:
    """Agent `name`'s weights for its sampler: `params` as they are, or
    with LoRA its base with the adapters `params` folded in."""
    if name not in self._bases:
      return params
    return lora.merged_state(self._bases[name],
                             lora.Adapters(params, self._scales[name]))
