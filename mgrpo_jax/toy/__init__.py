"""M-GRPO on a toy delegation task with tabular policies.

This is the training that exists before the LLM agents do: the full M-GRPO
step (rollouts with a variable number of sub-agent calls, hierarchical
rewards, group-relative advantages per agent, alignment to [B, K, D_max], the
clipped loss, one optimizer per agent, no gradient between agents) on a task
small enough to learn in seconds. It checks the math end to end; it is not a
benchmark, and its tabular policies do not generalise to new questions.

The task. Question q needs h_q in [1, H] hops; hop i has a gold answer
g[q, i] in [0, A); the question's answer is the last hop's.
  * Main agent (2 tokens): the number of sub-agent calls d in [0, C], then a
    format token (0 = well-formed answer, 1 = malformed). Its answer is the
    report of its last call.
  * Sub-agent (1 token per call): call j works on hop min(j, h_q - 1) and
    reports a token in [0, A]; A is a malformed report.
  * The main agent is correct when its format is ok, d >= h_q, the reports of
    calls 0..h_q-1 are right and so is the last report.
Shape letters: Q questions, B questions per step, K rollouts per question,
R = B*K rollouts, C max calls, S = d_max slots, M = R*C flat sub slots.
"""

from mgrpo_jax.toy.task import (ToyWorld, init_params, main_logp_Rx2,
                                make_world, outcome, sub_logp_N)
from mgrpo_jax.toy.train import (MODES, AgentSettings, StepSettings,
                                 greedy_accuracy, rollout, run, train_step,
                                 validate)

__all__ = ["ToyWorld", "init_params", "main_logp_Rx2", "make_world", "outcome",
           "sub_logp_N", "MODES", "AgentSettings", "StepSettings",
           "greedy_accuracy", "rollout", "run", "train_step", "validate"]
