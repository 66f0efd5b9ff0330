"""Training: packing, batches, learners, the SFT warm start, the evaluator
and the M-GRPO trainer (the only package that holds optimizers)."""
