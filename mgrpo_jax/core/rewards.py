"""Main-agent and sub-agent rewards (M-GRPO, defaults from the authors' code).

  R_M = format_ok * (w_fmt + w_cor * correct)
  R_S = sub_format_ok * (v_fmt + v_main * main_correct + v_exp * expert)

The sub-agent's reward is tied to the main agent's outcome (main_correct of
the rollout the sub-agent worked for): the hierarchical credit of M-GRPO.
Inputs are arrays of any (matching, broadcastable) shape; values of
format_ok / correct are 0 or 1 (bool or number), expert is in [0, 1].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mgrpo_jax.core import checks
from mgrpo_jax.core.registry import REWARD_PRESETS

# The paper's defaults (authors' released code): R_M in {0, 0.1, 1.0}.
REWARD_PRESETS.register("mgrpo")(dict(
    w_fmt=0.1, w_cor=0.9, v_fmt=0.1, v_main=0.9, v_exp=0.0))
# Ours: outcome only, no format bonus.
REWARD_PRESETS.register("outcome_only")(dict(
    w_fmt=0.0, w_cor=1.0, v_fmt=0.0, v_main=1.0, v_exp=0.0))
# Ours: part of the sub-agent reward from an expert score of its own report.
REWARD_PRESETS.register("with_expert")(dict(
    w_fmt=0.1, w_cor=0.9, v_fmt=0.1, v_main=0.6, v_exp=0.3))

MAIN_KEYS = ("w_fmt", "w_cor")
SUB_KEYS = ("v_fmt", "v_main", "v_exp")


def _as_float(fn: str, arg: str, x) -> jax.Array:
  dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
  if not (jnp.issubdtype(dtype, jnp.floating)
          or jnp.issubdtype(dtype, jnp.integer) or dtype == jnp.bool_):
    checks.fail(fn, arg, "a bool or numeric array", f"dtype {dtype}")
  return jnp.asarray(x).astype(jnp.float32)


def _broadcast(fn: str, named: dict[str, jax.Array]) -> None:
  try:
    jnp.broadcast_shapes(*(v.shape for v in named.values()))
  except ValueError:
    shapes = {k: tuple(v.shape) for k, v in named.items()}
    checks.fail(fn, ", ".join(named), "broadcastable shapes", shapes)


def main_reward(format_ok, correct, *, w_fmt: float = 0.1,
                w_cor: float = 0.9) -> jax.Array:
  """R_M = format_ok * (w_fmt + w_cor * correct), float32."""
  fn = "main_reward"
  named = {"format_ok": _as_float(fn, "format_ok", format_ok),
           "correct": _as_float(fn, "correct", correct)}
  _broadcast(fn, named)
  w_fmt = checks.check_static_float(fn, "w_fmt", w_fmt, minimum=0.0)
  w_cor = checks.check_static_float(fn, "w_cor", w_cor, minimum=0.0)
  return named["format_ok"] * (w_fmt + w_cor * named["correct"])


def sub_reward(sub_format_ok, main_correct, expert=None, *,
               v_fmt: float = 0.1, v_main: float = 0.9,
               v_exp: float = 0.0) -> jax.Array:
  """R_S = sub_format_ok * (v_fmt + v_main * main_correct + v_exp * expert).

  Args:
    sub_format_ok: 0/1 per sub-trajectory: its report was well-formed.
    main_correct: 0/1 per sub-trajectory: the main agent of the same rollout
      answered correctly (gather the rollout's value per sub-trajectory).
    expert: optional score in [0, 1] of the sub-agent's report (a rule or a
      judge); required when v_exp > 0.
    v_fmt, v_main, v_exp: weights (see the presets in `REWARD_PRESETS`).
  """
  fn = "sub_reward"
  named = {"sub_format_ok": _as_float(fn, "sub_format_ok", sub_format_ok),
           "main_correct": _as_float(fn, "main_correct", main_correct)}
  v_fmt = checks.check_static_float(fn, "v_fmt", v_fmt, minimum=0.0)
  v_main = checks.check_static_float(fn, "v_main", v_main, minimum=0.0)
  v_exp = checks.check_static_float(fn, "v_exp", v_exp, minimum=0.0)
  if expert is None:
    if v_exp > 0.0:
      checks.fail(fn, "expert", "given when v_exp > 0", None)
    expert = jnp.zeros((), jnp.float32)
  else:
    named["expert"] = _as_float(fn, "expert", expert)
    expert = named["expert"]
    try:
      concrete = jnp.asarray(expert)
      bad = bool(jnp.any((concrete < 0) | (concrete > 1)))
    except jax.errors.ConcretizationTypeError:
      bad = False  # traced: the caller's judge owns the range
    if bad:
      checks.fail(fn, "expert", "scores in [0, 1]", "values outside it")
  _broadcast(fn, named)
  return named["sub_format_ok"] * (
      v_fmt + v_main * named["main_correct"] + v_exp * expert)


def reward_weights(preset: str, **overrides: float) -> dict[str, float]:
  """The weights of a named preset, with any of them overridden."""
  weights = dict(REWARD_PRESETS.get(preset, arg="preset"))
  for k, v in overrides.items():
    if k not in weights:
      raise ValueError(f"reward_weights: unknown weight {k!r}; expected one "
                       f"of {sorted(weights)}.")
    weights[k] = v
  return weights
