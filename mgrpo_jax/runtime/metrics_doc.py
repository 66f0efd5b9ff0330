"""What each metric the trainer logs means: `METRICS_DOC`, read by
`mgrpo_jax.plot` and kept equal to README's metric table by
tests/readme_test.py (re-exported by runtime/metrics.py)."""

# Every metric the trainer logs -> its meaning (the README's metric table).
METRICS_DOC: dict[str, str] = {
    "main/reward": "Mean main-agent reward R_M over the step's B*K rollouts "
                   "(defaults: 0 bad format, 0.1 well-formed but wrong, "
                   "1 right).",
    "main/accuracy": "Fraction of the step's rollouts whose final answer is "
                     "correct.",
    "main/format": "Fraction of main-agent trajectories that are well-formed "
                   "(format_ok).",
    "sub/reward": "Mean sub-agent reward R_S over the step's sub-agent "
                  "trajectories (tied to the main agent's outcome).",
    "sub/format": "Fraction of sub-agent trajectories that are well-formed "
                  "(sub_format_ok).",
    "sub/calls_per_rollout": "Mean number of sub-agent calls d_k per main "
                             "rollout, before alignment to D_max.",
    "main/router_aux_loss": "Mixture-of-experts main agent: the router's "
                            "load-balancing loss over the trained tokens "
                            "(K experts per token when balanced; trained "
                            "on with learner.main.router_aux_weight > 0).",
    "sub/router_aux_loss": "The same for the sub-agent.",
    "main/expert_load_max": "Mixture-of-experts main agent: the busiest "
                            "expert's share of the router's picks over the "
                            "trained tokens, times the number of experts "
                            "(1 = balanced), largest over micro-batches.",
    "sub/expert_load_max": "The same for the sub-agent.",
    "main/clip_fraction": "Fraction of the main agent's trained tokens whose "
                          "ratio was clipped (outside [1-eps_low, "
                          "1+eps_high] on the side of the advantage).",
    "sub/clip_fraction": "Fraction of the sub-agent's trained tokens whose "
                         "ratio was clipped.",
    "main/approx_kl": "Mean per-token k3 KL estimate between the ratio's "
                      "anchor (the weights before the update; the sampler's "
                      "with off_policy 'none') and the policy being "
                      "updated, over the epochs' trained tokens: ~0 in the "
                      "first epoch on fresh data.",
    "sub/approx_kl": "The same for the sub-agent's update.",
    "main/behaviour_logp_gap_max": "Largest |learner log-prob - sampler "
                                   "log-prob| over the step's trained tokens, "
                                   "with the weights before the update: the "
                                   "train/inference mismatch (< 1e-3 "
                                   "on-policy in float32; the staleness "
                                   "shows here too).",
    "sub/behaviour_logp_gap_max": "The same for the sub-agent.",
    "main/is_weight_mean": "Mean truncated importance weight "
                           "min(pi_old / pi_behaviour, is_cap) over trained "
                           "tokens (1 with off_policy 'none' or on-policy).",
    "sub/is_weight_mean": "The same for the sub-agent.",
    "main/is_truncated_fraction": "Share of trained tokens whose importance "
                                  "weight the cap cut.",
    "sub/is_truncated_fraction": "The same for the sub-agent.",
    "main/staleness": "Mean weight versions between the sampler of a "
                      "trajectory and the learner updating on it (0 "
                      "on-policy).",
    "sub/staleness": "The same for the sub-agent (1 with one_step after the "
                     "first step).",
    "main/skipped_update": "1 when every advantage of the step was 0: no "
                           "optimizer update (Adam's momentum would still "
                           "move the weights).",
    "sub/skipped_update": "The same for the sub-agent.",
    "main/loss": "Main agent's clipped-surrogate loss (+ beta * KL), "
                 "aggregated as the config's loss mode.",
    "sub/loss": "Sub-agent's clipped-surrogate loss (+ beta * KL), "
                "aggregated as the config's loss mode.",
    "main/grad_norm": "Global L2 norm of the main agent's gradient, before "
                      "clipping.",
    "sub/grad_norm": "The same for the sub-agent.",
    "main/ref_kl": "Mean per-token k3 KL between the main agent's initial "
                   "(warm-start) policy and the policy being updated, over "
                   "its trained tokens: how far training has moved it "
                   "(with beta > 0 or learner.main.log_ref_kl).",
    "sub/ref_kl": "The same for the sub-agent.",
    "main/informative_groups": "Share of the step's B question groups whose "
                               "main-agent advantages are not all 0 (a "
                               "group whose K rewards are equal teaches "
                               "nothing).",
    "main/informative_rows": "Share of the main agent's B*K trajectories "
                             "whose advantage is not 0.",
    "sub/informative_groups": "Share of the sub-agent's groups (questions, "
                              "or rollouts with sub_group_by 'rollout') with "
                              "a valid slot whose advantage is not 0 (a "
                              "group with no call counts as uninformative).",
    "sub/informative_rows": "Share of the sub-agent's valid (aligned) slots "
                            "whose advantage is not 0.",
    "time/rollout": "Seconds generating the step's rollouts (main and "
                    "sub-agent conversations, tool calls).",
    "time/main_update": "Seconds in the main agent's update (all mu epochs).",
    "time/sub_update": "Seconds in the sub-agent's update (all mu epochs).",
    "time/store": "Seconds the main side spends writing the step's "
                  "sub-agent records to the shared store.",
    "time/weights": "Seconds the main side waits for and loads the "
                    "sub-agents' newest weights.",
    "time/main_batch": "Seconds taking the main agent's advantages and "
                       "packing its batch (part of time/main_update).",
    "time/sub_read": "Seconds the sub side reads the step's record from "
                     "the store (part of time/sub_update; waiting included).",
    "time/sub_batch": "Seconds aligning the sub-agent calls, taking their "
                      "advantages and packing the batch (part of "
                      "time/sub_update).",
    "time/sub_publish": "Seconds publishing the sub-agent's new weights to "
                        "the store (part of time/sub_update).",
    "time/step": "Wall-clock seconds of the whole training step.",
    "eval/accuracy": "Accuracy on the evaluation split (mean over its "
                     "rollouts), at evaluation steps only.",
    "eval/sampled_accuracy": "Accuracy of train.eval_samples rollouts per "
                             "validation question at the training "
                             "temperature (same key every evaluation).",
    "time/eval": "Seconds of the step's validation rollouts.",
    "eval/sub_report_accuracy": "Greedy sub-agent reports whose answer is "
                                "the true answer of the delegated one-hop "
                                "question (agents/diagnostics.py).",
    "main/novel_accuracy": "main/accuracy over the step's questions whose "
                           "facts no warm-start demonstration stated "
                           "(train/reading.py; all of them with "
                           "sft.worlds > 0).",
    "eval/novel_accuracy": "Greedy validation accuracy over the questions "
                           "whose facts no warm-start demonstration stated "
                           "(novel-fact accuracy: what a team that reads "
                           "scores and one that recalls does not).",
    "eval/novel_share": "Share of the validation questions that are novel.",
    "eval/counterfactual_follows": "With train.counterfactual_questions > 0: "
                                   "greedy answers, over pages whose "
                                   "last-hop fact was changed, that give "
                                   "the page's new answer (a reader's).",
    "eval/counterfactual_recalls": "The same answers that give the old "
                                   "answer (a memoriser's).",
    "eval/counterfactual_questions": "Validation questions whose answer the "
                                     "change moved (what the two shares "
                                     "are over).",
    "eval/sub_read_accuracy": "eval/sub_report_accuracy over the "
                              "delegations whose sub-agent visited a page "
                              "(what it makes of a page it read).",
    "eval/sub_wrong_page": "Greedy sub-agent conversations that visited "
                           "pages but not the one of the entity they were "
                           "asked about (a distractor).",
    "eval/main_early_answer": "Greedy multi-hop rollouts answered with "
                              "fewer delegations than the question has "
                              "hops (the planner answering before the last "
                              "hop).",
    "eval/sub_visit_rate": "Greedy sub-agent conversations that visited a "
                           "page.",
    "eval/sub_searches_per_report": "Searches per greedy sub-agent "
                                    "conversation that reported.",
    "eval/visits_per_hop": "Page visits (any agent) per hop the validation "
                           "questions need.",
    "eval/main_delegations_hop2": "Delegations per two-hop validation "
                                  "question (greedy; one key per hop "
                                  "count).",
    "test/accuracy": "Greedy accuracy on train.test_questions held-out "
                     "test questions (logged, never used for a choice); "
                     "test/* has the eval/* diagnostics too.",
    "rollout/generated_tokens": "Ids the agents sampled in the step's "
                                "rollouts (all agents).",
    "jit/compilations": "XLA compilations in this process so far (both "
                        "agents' learners and samplers; align.d_max 0 "
                        "shows what alignment saves), the persistent "
                        "cache's loads included.",
    "jit/cache_loads": "Of jit/compilations, the programs loaded from the "
                       "persistent compilation cache (an earlier run "
                       "compiled them) rather than compiled by XLA.",
    "startup/programs": "With config.runtime.shapes='closed', logged with "
                        "the first step: programs of the closed sets "
                        "compiled (or loaded from the persistent cache) "
                        "at start-up; startup/programs/<agent>_sampler "
                        "and <agent>_learner per part.",
    "startup/compile_seconds": "Seconds those start-up compilations took.",
    "time/test": "Seconds of the step's test-split rollouts.",
    "eval/sub_version": "Sub-agent weight version the evaluation used: the "
                        "newest (the step's), in every staleness mode.",
    "tools/searches": "With config.tools.backend='web': search calls so far "
                      "in this process (rollouts and evaluations).",
    "tools/visits": "With the web backend: page visits so far in this "
                    "process.",
    "tools/cache_hits": "With the web backend: calls answered from its cache "
                        "so far (a replay answers every call so).",
    "tools/http_tries": "With the web backend: network requests so far, "
                        "retries included (0 in a replay).",
    "tools/errors/<kind>": "With the web backend: failed calls of each kind "
                           "so far (agents/web.py ERROR_KINDS), 0 included.",
    "main/pg_loss": "The policy-gradient part of the main agent's loss.",
    "sub/pg_loss": "The same for the sub-agent.",
    "main/ratio_mean": "Mean probability ratio of the main agent's trained "
                       "tokens (1 with mu = 1 and off_policy token or "
                       "sequence; to the behaviour policy with 'none').",
    "sub/ratio_mean": "The same for the sub-agent.",
    "main/tokens": "Tokens the main agent's update trained on.",
    "sub/tokens": "The same for the sub-agent.",
    "main/sequences": "Valid sequences in the main agent's update.",
    "sub/sequences": "The same for the sub-agent.",
    "align/calls_per_rollout": "Sub-agent calls per rollout as the sub side "
                               "read them from the store.",
    "align/valid_slots": "Share of the [B, K, D_max] aligned slots holding "
                         "a trajectory.",
    "align/dropped_calls": "Sub-agent calls beyond D_max left out of the "
                           "aligned batch.",
    "eval/format": "Share of greedy validation answers that are "
                   "well-formed.",
    "eval/sub_calls": "Sub-agent calls per greedy validation question.",
    "eval/sub_gradeable": "Share of greedy delegations whose report can be "
                          "graded (a one-hop question of the world, or a "
                          "gold sub-question).",
    "eval/main_delegations_hop<h>": "The planner's delegations per "
                                    "validation question of h hops.",
    "eval/sampled_format": "With train.eval_samples > 0: the format rate "
                           "of the sampled validation rollouts.",
    "rollout/tokens_per_second": "Generated tokens per second of the "
                                 "step's rollout phase.",
    "weights/sub_step": "The published sub-agent weight version the step's "
                        "rollouts sampled with.",
    "weights/sub_checksum": "Checksum of those weights (runtime/checksum.py: "
                            "equal means the very same weights).",
    "weights/published_checksum": "Checksum of the sub-agent weights the "
                                  "sub side published after its update.",
    "time/sft": "Seconds the warm start's SFT took when it was built (a "
                "cached warm start reports its build's).",
    "sft/steps": "The warm start's SFT steps.",
    "sft/demonstrations": "Demonstration trajectories the warm start "
                          "trained on.",
    "sft/loss_first": "SFT loss at the warm start's first step.",
    "sft/loss_last": "SFT loss at its last step.",
    "sft/cached": "1 when the warm start was read from the cache.",
    "sft/gold_misses": "With sft.demonstrations='gold': demonstration "
                       "searches that missed their step's supporting page.",
}
