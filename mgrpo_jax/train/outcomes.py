"""Per-question evaluation results of a run, for question-level paired
tests (mgrpo_jax.reproduce_report): at every evaluation the trainer appends
one line {"step": N, "validation": {task id: 1 / 0}, "test": {...}} to
run_dir/<role>/outcomes.jsonl (beside the role's metrics), 1 where the
greedy rollout answered right; with train.eval_samples > 0 also
"validation_sampled": {task id: [1 / 0 for each sampled rollout]}."""

from __future__ import annotations

import json

from mgrpo_jax.runtime import run_files

OUTCOMES_NAME = "outcomes.jsonl"  # Per-question results, under run_dir/<role>.


def write_outcomes(directory: str, step: int,
                   outcomes: dict[str, dict[str, int]]) -> None:
  """Appends one line {"step", "<split>": {task id: 1 / 0}} per evaluation
  to `directory`/outcomes.jsonl, local or gs:// (a resumed run that redoes
  an evaluation appends it again: readers keep a step's last line)."""
  line = json.dumps({"step": step, **{k: v for k, v in outcomes.items()
                                      if v}}, sort_keys=True)
  run_files.append_text(f"{directory}/{OUTCOMES_NAME}", line + "\n")


def read_outcomes(directory) -> dict[int, dict[str, dict[str, int]]]:
  """step -> split -> {task id: 1 / 0} from `write_outcomes`' file (a
  step's last line wins); {} when there is none."""
  path = f"{directory}/{OUTCOMES_NAME}"
  text = run_files.read_text(path)
  if text is None:
    return {}
  out = {}
  for number, line in enumerate(text.split("\n"), 1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
      out[int(record.pop("step"))] = record
    except (ValueError, KeyError, TypeError) as e:
      raise ValueError(f"{path}:{number}: not an outcomes record "
                       f"({e}); expected {{\"step\": N, \"test\": "
                       "{task id: 0 or 1}, ...}.") from e
  return out
