"""Deep-research agents: chat protocol, tools, rollouts, rewards, the team."""
