"""The notebooks in colabs/ run top to bottom and say what they should.

Each notebook runs through nbclient in a python3 kernel of this interpreter
at its small sizes (MGRPO_JAX_NOTEBOOK_SMALL=1, read by its "parameters"
cell), its "install" cell included: with mgrpo_jax importable that cell
installs nothing, which a cell the test puts first checks. A last cell the
test appends prints the notebook variables the test then checks. The
full-size quickstart is a slow test. Every committed notebook is stripped.
"""

import json
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLABS = ROOT / "colabs"
NOTEBOOKS = sorted(p.name for p in COLABS.glob("*.ipynb"))
MARK = "NOTEBOOK-VALUES "

# Put first: the kernel is this interpreter, where mgrpo_jax is importable,
# so the notebook's install cell has nothing to install.
KERNEL_CHECK = f"""
import importlib.util, sys
assert sys.executable == {sys.executable!r}, sys.executable
assert importlib.util.find_spec("mgrpo_jax"), "the install cell would install"
"""

# Put last: prints the variables `names` as one JSON line.
VALUES = """
import json as _json
def _plain(x):
  if isinstance(x, dict):
    return {{str(k): _plain(v) for k, v in x.items()}}
  if isinstance(x, (list, tuple)):
    return [_plain(v) for v in x]
  return x.tolist() if hasattr(x, "tolist") else x
print({mark!r} + _json.dumps({{n: _plain(globals()[n]) for n in {names!r}}}))
"""


def run_notebook(name: str, cwd: pathlib.Path, names, *, small=True,
                 env=None, timeout=900):
  """Executes colabs/`name` with `cwd` as its folder; returns (the values of
  the variables `names`, every text it printed)."""
  import nbclient  # pylint: disable=g-import-not-at-top
  import nbformat  # pylint: disable=g-import-not-at-top
  notebook = nbformat.read(COLABS / name, as_version=4)
  notebook.cells.insert(0, nbformat.v4.new_code_cell(KERNEL_CHECK))
  notebook.cells.append(nbformat.v4.new_code_cell(
      VALUES.format(mark=MARK, names=list(names))))
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv("MGRPO_JAX_NOTEBOOK_SMALL", "1" if small else "0")
    patch.setenv("JAX_PLATFORMS", "cpu")
    for key, value in (env or {}).items():
      patch.setenv(key, value)
    nbclient.NotebookClient(
        notebook, timeout=timeout, kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}}).execute()
  printed = "".join(out.get("text", "") for cell in notebook.cells
                    if cell.cell_type == "code" for out in cell.outputs
                    if out.output_type == "stream")
  [line] = [l for l in printed.splitlines() if l.startswith(MARK)]
  return json.loads(line[len(MARK):]), printed


def read_metrics(run_dir: pathlib.Path) -> dict[int, dict]:
  """{step: every metric logged for it} of a run's metrics.jsonl."""
  out: dict[int, dict] = {}
  for line in (run_dir / "all" / "metrics.jsonl").read_text().splitlines():
    record = json.loads(line)
    out.setdefault(record["step"], {}).update(record)
  return out


def check_tree(shown: dict) -> None:
  """A printed tree holds every turn of its transcript, and one sub-agent
  node per delegation, nested under the turn that opened it."""
  transcript, tree = shown["transcript"], shown["tree"]
  subs = [t["sub_agent"] for t in transcript["turns"] if t.get("sub_agent")]
  assert len(subs) == shown["delegations"]
  turns = len(transcript["turns"]) + sum(len(s["turns"]) for s in subs)
  lines = tree.splitlines()
  assert sum("── turn " in l for l in lines) == turns, tree
  assert sum("── sub-agent " in l for l in lines) == len(subs), tree
  for line in lines:
    if "── sub-agent " in line:  # Nested: below a main turn, not beside it.
      assert line.startswith(("│   ├── ", "│   └── ", "    ├── ",
                              "    └── ")), line
  assert transcript["task_id"] == shown["task_id"]


def test_every_notebook_is_committed_stripped_with_its_cells_tagged():
  import nbformat  # pylint: disable=g-import-not-at-top
  assert len(NOTEBOOKS) >= 5, NOTEBOOKS
  for name in NOTEBOOKS:
    notebook = nbformat.read(COLABS / name, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata.kernelspec.name == "python3", name
    code = [c for c in notebook.cells if c.cell_type == "code"]
    for cell in code:
      assert cell.outputs == [] and cell.execution_count is None, (
          f"{name}: outputs committed; clear them (Edit > Clear all outputs)")
    assert "install" in code[0].metadata.get("tags", []), name
    [parameters] = [c for c in code
                    if "parameters" in c.metadata.get("tags", [])]
    assert "SMALL = " in parameters.source, name
    assert "MGRPO_JAX_NOTEBOOK_SMALL" in parameters.source, name


def test_readme_lists_every_notebook():
  readme = (ROOT / "README.md").read_text(encoding="utf-8")
  for name in NOTEBOOKS:
    assert f"colabs/{name}" in readme, name


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
  """quickstart.ipynb run once (small) in a folder deep_research.ipynb
  then finds its trained team in; the warm start and XLA cache are its own."""
  folder = tmp_path_factory.mktemp("notebooks")
  values, printed = run_notebook(
      "quickstart.ipynb", folder,
      ["RUN_DIR", "STEPS", "eval_steps", "accuracy", "calls"],
      env={"MGRPO_JAX_CACHE": str(folder / "cache")})
  return folder, values, printed


def test_quickstart_trains_the_tiny_team_and_plots_its_curves(quickstart):
  folder, values, printed = quickstart
  run = folder / values["RUN_DIR"]
  metrics = read_metrics(run)
  steps = sorted(s for s, m in metrics.items() if "eval/accuracy" in m)
  assert steps == [0, 1, 2] == values["eval_steps"]  # SMALL: 2 steps.
  assert values["accuracy"] == [metrics[s]["eval/accuracy"] for s in steps]
  assert values["calls"] == [metrics[s]["eval/sub_calls"] for s in steps]
  assert all(0.0 <= a <= 1.0 for a in values["accuracy"])
  for step in (1, 2):
    for key in ("main/reward", "main/loss", "sub/loss",
                "sub/calls_per_rollout"):
      assert metrics[step][key] == metrics[step][key], (step, key)  # not NaN
  for agent in ("main", "sub"):
    assert (run / "checkpoints" / agent / "2").is_dir()
  assert json.loads((run / "config.json").read_text())["train"]["steps"] == 2
  assert (run / "all" / "plots" / "overview.png").stat().st_size > 10_000
  assert (f"greedy validation accuracy {values['accuracy'][0]:.3f} (warm "
          f"start) -> {values['accuracy'][-1]:.3f} (step 2)") in printed


@pytest.mark.slow  # 55 s: SmolLM2 rolls out in the notebook.
def test_deep_research_shows_each_rollout_as_a_tree(quickstart):
  folder, _, _ = quickstart
  values, _ = run_notebook("deep_research.ipynb", folder,
                           ["smollm2_trees", "trained_trees"])
  [smollm2] = values["smollm2_trees"]  # SMALL: one question, one rollout.
  check_tree(smollm2)
  # The untrained SmolLM2 completes its seeded first turns (greedy): the
  # planner delegates, and the sub-agent's first act is a BM25 search.
  first = smollm2["transcript"]["turns"][0]
  assert first["tool"] == "delegate" and first["format_ok"]
  sub_first = first["sub_agent"]["turns"][0]
  assert sub_first["tool"] == "search" and sub_first["format_ok"]
  assert sub_first["result"].startswith('<tool_response name="search">')
  # The quickstart's trained team, on the 2 validation questions of its world.
  assert len(values["trained_trees"]) == 2
  for shown in values["trained_trees"]:
    check_tree(shown)


def test_core_functions_on_own_arrays_and_a_jitted_two_agent_step(tmp_path):
  values, _ = run_notebook(
      "core_functions.ipynb", tmp_path,
      ["main_rewards_R", "index_RxS", "valid_RxS", "sub_adv_N", "agree",
       "micro_equal", "traces", "start_accuracy", "final_accuracy",
       "history"])
  assert [round(r, 3) for r in values["main_rewards_R"]] == [
      1.0, 0.1, 0.0, 1.0, 0.1, 1.0]
  assert len(values["index_RxS"]) == 6 and len(values["index_RxS"][0]) == 2
  assert values["valid_RxS"][1] == [False, False]  # Rollout 1 made no call.
  assert all(all(row) for i, row in enumerate(values["valid_RxS"]) if i != 1)
  assert values["sub_adv_N"][2:4] == [0.0, 0.0]  # Invalid slots: 0.
  assert values["agree"] and values["micro_equal"]
  assert len(values["traces"]) == 1  # One compilation for every count.
  # M-GRPO trains both tabular agents from 0 to most questions right.
  assert values["start_accuracy"] == 0.0
  assert values["final_accuracy"] >= 0.75, values["history"][-3:]


def test_toy_task_mgrpo_beats_a_frozen_sub_agent(tmp_path):
  values, _ = run_notebook("toy_task.ipynb", tmp_path, ["curves", "STEPS"])
  curves = values["curves"]
  assert [s for s, _ in curves["M-GRPO"]][-1] == values["STEPS"]
  final = {name: points[-1][1] for name, points in curves.items()}
  assert final["M-GRPO"] >= final["frozen sub-agent"] + 0.3, final


def test_reproduction_results_tables_and_paired_differences(tmp_path):
  values, _ = run_notebook("reproduction_results.ipynb", tmp_path,
                           ["tables_match", "paired"])
  assert values["tables_match"] == {"main": True}  # SMALL: the main suite.
  runs = json.loads((ROOT / "launch/results/reproduce/results.json"
                     ).read_text())["runs"]  # The pre-registered suite's.
  final = {(r["arm"], r["seed"]): r["test_accuracy"] for r in runs}
  expected = {str(s): round(100 * (final["mgrpo", s] - final["frozen_sub", s]),
                            2) for s in range(8)}
  assert values["paired"] == {"main": expected}


@pytest.mark.slow
def test_full_size_quickstart_raises_accuracy_and_delegation(tmp_path):
  """The notebook at its full size, from an empty cache (about 8 minutes
  on 2 CPU cores): the planner learns to delegate the second hop, and
  validation accuracy rises with it."""
  values, _ = run_notebook(
      "quickstart.ipynb", tmp_path, ["eval_steps", "accuracy", "calls"],
      small=False, env={"MGRPO_JAX_CACHE": str(tmp_path / "cache")},
      timeout=1800)
  assert values["eval_steps"] == [0, 2, 4, 6, 8, 10]
  assert values["accuracy"][-1] > values["accuracy"][0], values
  assert values["calls"][-1] > values["calls"][0] + 0.2, values
