"""Training: packing, batches, learners, the SFT warm start, the evaluator
and the M-GRPO trainer (the only package that holds optimizers).

  packing.py      trajectories -> fixed-shape [N, T] batches (buckets)
  batches.py      rollouts -> main batch, sub records, aligned sub batches
  update.py       the one jitted update (loss passed in; RL and SFT), rows
                  over the data axis
  learner.py      one agent's params, optimizer and M-GRPO loss on its mesh
  sft.py          supervised warm start (next-token loss on demonstrations)
  warm_start.py   the team's cached warm start
  evaluator.py    the one evaluator: roll out, score, figures
  reading.py      novel-fact accuracy and the counterfactual check
  scripted.py     agents the oracle plays, never trained (the positive
                  controls)
  data.py         the train questions (fixed order per epoch), validation,
                  test
  outcomes.py     per-question results of every evaluation (outcomes.jsonl)
  team_build.py   the run's models: warm start or checkpoint, one copy per
                  agent
  side.py         one process of a run: meshes, store, learners, samplers,
                  steps
  shards.py       a step's rollouts split over the processes of the main
                  role, and joined again
  adapters.py     LoRA in a run: store and sampler weights, shared bases
  compiled.py     the samplers' and learners' programs: open, or a closed
                  set compiled at start-up (config.runtime)
  trainer.py      the step loop, metrics, checkpoints
  trained.py      a run's trained agent from its checkpoints (evaluate)
  run_checks.py   every field of a training config, before any compute
"""
