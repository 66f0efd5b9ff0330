"""Deep-research agents: chat protocol, tools, rollouts (in progress)."""
