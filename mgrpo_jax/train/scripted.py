"""Scripted agents for the positive controls: can each learner learn here?

`config.train.scripted` names an agent the oracle (agents/oracle.py) plays
instead of its model, never trained:

  "sub"   a perfect reader: searches the entity the delegated question
          names, visits its page and reports what the page states (with
          mode "frozen_sub": the planner alone learns, over a sub-agent
          that never fails it);
  "main"  a perfect planner: delegates each gold sub-question in turn
          (the next one naming the entity the last report gave) and answers
          with the last report (with mode "frozen_main": the sub-agent
          alone learns, from whatever reward config.reward gives it).

Both read the run's pages and questions only (every split's, so the
planner can plan validation and test questions too): no model, no weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mgrpo_jax.agents.oracle import Knowledge, OraclePolicy
from mgrpo_jax.data.task import TaskSet

SCRIPTED = ("", "main", "sub")
# The mode each scripted agent needs: a scripted agent is never trained.
MODE_OF = {"main": "frozen_main", "sub": "frozen_sub"}


def scripted_policies(config, data, tokenizer) -> dict[str, Any]:
  """{agent name: OraclePolicy} for config.train.scripted ({} for "")."""
  name = config.train.get("scripted", "")
  if not name:
    return {}
  tasks = tuple(data.train) + tuple(data.validation) + tuple(data.test)
  knowledge = Knowledge(TaskSet("scripted", tasks, tuple(data.documents)),
                        reads=True)
  section = config.agents[name]
  return {name: OraclePolicy(tokenizer, knowledge, name,
                             rng=np.random.default_rng([config.seed, 99]),
                             max_conversations=section.rows,
                             cache_len=section.context_tokens)}
