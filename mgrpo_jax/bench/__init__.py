"""Benchmarks (`bash launch/bench.sh` runs them all; README "Speed").

  speed.py           sampler against HF and Tunix, train step against
                     PyTorch
  tunix_sampler.py   Tunix's sampler on SmolLM2, the third column of
                     speed.py
  train_step.py      the train step's side of speed.py
  step.py            one M-GRPO step split by phase, compilations, peak
                     memory
  summary.py         every figure against its target, one table
                     (bench.json)
  decode_profile.py  where a decode step's time goes
  train_profile.py   where a train step's time goes
  rollouts.py        batched vs sequential rollouts
                     (launch/bench_rollouts.sh)
  sft_study.py       the tiny team's SFT warm start, measured
  reading_probe.py   can a tiny team read? step-0 read accuracy per size
  controls.py        the positive controls: each learner alone over a
                     scripted partner, validation before and after
  power.py           seeds and hours a powered comparison needs, from the
                     controls' costs and the first suite's seed noise
  team_memory.py     a pretrained team's step time and peak memory by batch
                     size (launch/bench_team.sh)
  team_runs.py       a pretrained team's test accuracy untrained, after
                     the warm start and after M-GRPO, per data and seed
  memory.py          what a run's memory holds by part, from its config
                     alone (the update compiled from shapes)
  programs.py        each agent's closed set of programs: count, compile
                     seconds at a first and a second start
  moe_speed.py       a mixture of experts vs every-expert matmuls and its
                     dense twin: train step, sampler
  fits.py            two agents' bytes per chip on TPU slices and a GPU,
                     full fine-tuning vs LoRA, from model configs alone
  multihost.py       one role as 1 process x 4 devices against 2 processes
                     x 2 devices (gloo): step time, figures compared
  common.py          the machine's description for every benchmark
"""
