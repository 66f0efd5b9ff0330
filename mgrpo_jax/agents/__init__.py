"""Deep-research agents: chat protocol, tools, rollouts, rewards, the team.

  protocol.py        the chat protocol; a turn parser that never raises;
                     reports
  tools.py           search (BM25) / visit tools, SearchBackend, tool
                     registry
  web.py             the live web backend: a search API, pages through
                     trafilatura, failures as tool results
  web_http.py        its HTTP: rate limit, timeouts, retries with backoff, a
                     byte cap, http(s) only
  web_cache.py       its on-disk answers keyed by request (never the key),
                     for exact offline replay
  chat.py            token-level chat rendering (prompts, injected messages)
  prompts.py         system prompts, tool results, "answer now"
  rollout.py         RolloutController: batched multi-agent rollouts,
                     budgets, load_weights
  trajectory.py      trajectories (ids, loss mask, log-probs, links),
                     transcripts
  rewards.py         rewards of rollouts, rule expert, local-model judge
  team.py            the team a config describes: main + sub-agent kinds
                     (KINDS), or single
  oracle.py          a policy that plays the agents from the tasks' gold
                     decompositions
  demonstrations.py  the oracle team's trajectories: the warm start's SFT
                     data
  demo_file.py       demonstrations from a JSONL file of conversations
  diagnostics.py     per-agent evaluation figures (report accuracy, visits,
                     delegations)
  tiny_team.py       the tiny team's tokenizer, trained on its world and
                     protocol (cached)
  report.py          pass@1, avg@k, pass@k and breakdowns
"""
