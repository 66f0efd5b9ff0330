"""M-GRPO on a toy delegation task with tabular policies.

This is the training that exists before the LLM agents do: the full M-GRPO
step (rollouts with a variable number of sub-agent calls, hierarchical
rewards, group-relative advantages per agent, alignment to [B, K, D_max], the
clipped loss, one optimizer per agent, no gradient between agents) on a task
small enough to learn in seconds. It checks the math end to end; it is not a
benchmark, and its tabular policies do not generalise to new questions.

`configs/toy.py` trains it in about 10 s on a 2-core CPU: 64 questions that
need 1-2 sub-agent hops, a tabular main policy choosing how many sub-agent
calls to make and whether to answer in format, and a tabular sub-agent
policy answering each hop. Greedy accuracy rises from 0 to about 1.0 within
the 300 steps (0.97 to 1.0 in our runs); with the sub-agent frozen
(`--config.mode=frozen_sub`) it stays near 0.06: the hierarchical credit is
what lets the sub-agent learn from the main agent's outcome. Its fields:
`toy.*` (the world), `mode` (`mgrpo` or `frozen_sub`), `train.*` (steps, B,
K, `eval_every`), `learner.main` / `learner.sub` (learning rate, mu, clip,
KL, aggregation), `advantage.*`, `align.*`, `reward.*`: the names of the
LLM configs, as are its metrics:
  main/reward, main/accuracy, main/format  mean main reward, share of
                          correct rollouts, share well-formed
  sub/reward              mean reward over the sub-agent calls made
  sub/calls_per_rollout   mean number of sub-agent calls per rollout (d)
  align/valid_slots       share of the [R, D_max] aligned slots that are
                          valid
  */clip_fraction         share of tokens whose gradient the clip removed
  */approx_kl             k3 estimate of KL(old policy, new policy) over the
                          batch
  eval/accuracy           accuracy of the argmax policies over all questions
                          (eval/accuracy_start: at step 0)
  time/seconds            wall time since training started

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

Self-contained (it imports only core/ and runtime/):
  task.py    its world and policies
  train.py   its M-GRPO step and run
"""

from mgrpo_jax.toy.task import (ToyWorld, init_params, main_logp_Rx2,
                                make_world, outcome, sub_logp_N)
from mgrpo_jax.toy.train import (MODES, AgentSettings, StepSettings,
                                 greedy_accuracy, rollout, run, train_step,
                                 validate)

__all__ = ["ToyWorld", "init_params", "main_logp_Rx2", "make_world", "outcome",
           "sub_logp_N", "MODES", "AgentSettings", "StepSettings",
           "greedy_accuracy", "rollout", "run", "train_step", "validate"]
