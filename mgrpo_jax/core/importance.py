"""Truncated importance weights for stale (off-policy) rollouts.

Shape letters: B sequences, T tokens.

A rollout sampled by weights older than the learner's (the sub-agent's data
with `staleness="one_step"`, or any sampler that lags) is corrected as in
decoupled PPO (Hilton et al. 2022, "Batch size-invariance for policy
optimization"; used by AReaL, Fu et al. 2025, and Tunix): the clipped ratio
is taken against the *proximal* policy (the learner's weights before the
update), and each token's loss is weighted by

  w = min(pi_prox / pi_behav, cap)

where pi_behav is the policy that sampled (its log-probs travel with the
data). Modes (`OFF_POLICY`):
  "none"      no weight; the clipped ratio is anchored to the behaviour
              policy's log-probs directly (standard PPO on stale data);
  "token"     one weight per token (AReaL's decoupled loss);
  "sequence"  one weight per sequence, exp of the summed log-ratio over its
              masked tokens (sequence-level importance sampling, as in
              GSPO, Zheng et al. 2025), broadcast to its tokens.
On-policy the weights are 1 up to the float32 gap between learner and
sampler log-probs. "token" is the trainer's default (`learner.*.off_policy`,
cap `learner.*.is_cap`).

The authors' released code (MrlX) uses a FIFO queue as the store, with no
policy versions and no importance correction; here staleness is explicit
(every trajectory carries the sampler's log-probs and weight version
through the store) and corrected. Samplers with bfloat16 weights
(`agents.sampler_dtype="bfloat16"`) are another behaviour policy, off by
rounding rather than by age: their log-probs differ from the float32
learner's (on SmolLM2, mean ~0.02 and at most 0.09-0.17 on single tokens
in the benchmark runs, launch/results/speed.md) and are
corrected the same way, so the config check refuses `off_policy="none"`
with them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

OFF_POLICY = ("none", "token", "sequence")


def importance_weights(
    proximal_logp_BxT: jax.Array,
    behaviour_logp_BxT: jax.Array,
    mask_BxT: jax.Array,
    *,
    mode: str = "token",
    cap: float = 2.0,
) -> tuple[jax.Array, jax.Array]:
  """Truncated importance weights (no gradient) and where they were cut.

  Args:
    proximal_logp_BxT: log-probs under the learner's weights before the update.
    behaviour_logp_BxT: log-probs the sampler recorded.
    mask_BxT: 1 on trained tokens.
    mode: one of `OFF_POLICY`.
    cap: truncation cap (>= 1).

  Returns:
    weights_BxT: float32, min(ratio, cap); 1 where masked out or mode "none".
    truncated_BxT: float32, 1 where the cap cut the weight.
  """
  if mode not in OFF_POLICY:
    raise ValueError(f"importance_weights: mode={mode!r}: expected one of "
                     f"{list(OFF_POLICY)}.")
  if not isinstance(cap, (int, float)) or cap < 1:
    raise ValueError(f"importance_weights: cap={cap!r}: expected a number "
                     ">= 1.")
  on = mask_BxT > 0
  if mode == "none":
    ones = jnp.ones(mask_BxT.shape, jnp.float32)
    return ones, jnp.zeros_like(ones)
  log_w = jnp.where(on, proximal_logp_BxT.astype(jnp.float32)
                    - behaviour_logp_BxT.astype(jnp.float32), 0.0)
  if mode == "sequence":
    log_w = jnp.broadcast_to(jnp.sum(log_w, axis=1, keepdims=True),
                             log_w.shape)
  log_cap = jnp.log(jnp.float32(cap))
  truncated = (log_w > log_cap) & on
  # exp of the capped log: no overflow however stale a long sequence is.
  weights = jnp.where(on, jnp.exp(jnp.minimum(log_w, log_cap)), 1.0)
  return (jax.lax.stop_gradient(weights),
          truncated.astype(jnp.float32))
