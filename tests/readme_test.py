"""The README's code is run, so the manual stays true."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def snippet(name: str) -> str:
  text = README.read_text(encoding="utf-8")
  match = re.search(rf"<!-- snippet: {name} -->\s*```python\n(.*?)```", text,
                    re.S)
  assert match, f"README.md has no python block after 'snippet: {name}'"
  return match.group(1)


def test_core_usage_snippet_runs(capsys):
  namespace: dict = {}
  exec(compile(snippet("core-usage"), "README.md:core-usage", "exec"),
       namespace)
  out = capsys.readouterr().out.split()
  loss, clip_fraction, shape = float(out[0]), float(out[1]), " ".join(out[2:])
  assert loss == loss and 0.0 <= clip_fraction <= 1.0 and shape == "(6, 5)"
  # The numbers the snippet's comments promise.
  assert [round(float(x), 3) for x in namespace["main_rewards"]] == [
      1.0, 0.1, 0.0, 1.0, 1.0, 1.0]
  assert namespace["index"].shape == (6, 2)
  assert not namespace["valid"][1].any() and namespace["valid"][0].all()


def test_quickstart_commands_exist():
  text = README.read_text(encoding="utf-8")
  quick = text.split("## Quickstart", 1)[1].split("##", 1)[0]
  commands = re.findall(r"^bash (\S+)", quick, re.M)
  assert commands[:2] == ["launch/train.sh", "launch/test.sh"]
  root = README.parent
  for command in commands[:2]:
    assert (root / command).is_file()
  assert "launch/test.sh" in (root / ".ci" / "run").read_text()


def test_models_usage_snippet_runs(capsys):
  exec(compile(snippet("models-usage"), "README.md:models-usage", "exec"), {})
  first, second = capsys.readouterr().out.strip().split("\n")[-2:]
  assert first == "The capital of France is Paris.<|im_end|>"
  assert "Rome" in second and second.endswith("<|im_end|>")


def test_agents_usage_snippet_runs(capsys):
  exec(compile(snippet("agents-usage"), "README.md:agents-usage", "exec"), {})
  out = capsys.readouterr().out.strip().split("\n")
  assert out == ["[https://kelto.example] Kelto: Kelto is a town. The Sorn "
                 "flows through Kelto.", "add needs the arguments ['a', 'b']."]


RESULTS = README.parent / "launch" / "results"


def _section(text: str, heading: str) -> str:
  """The text under `heading` (`## ...` or `### ...`) up to the next
  heading of its level or above."""
  level = len(heading.split(" ", 1)[0])
  body = text.split(heading + "\n", 1)[1]
  return re.split(rf"\n#{{2,{level}}} ", body, maxsplit=1)[0]


def _committed_tables() -> dict[pathlib.Path, str]:
  """Every committed results table: the .md files under launch/results
  that are a table (a reproduction's results.md, clean.md, ablations.md,
  the pilot's pilot.md, ...)."""
  return {path: path.read_text(encoding="utf-8")
          for path in sorted(RESULTS.rglob("*.md"))
          if path.read_text(encoding="utf-8").startswith("|")}


def _quoted_tables(text: str) -> list[str]:
  """The committed tables (paths under launch/results) whose header row
  `text` quotes; each must be quoted whole, verbatim."""
  quoted = []
  for path, table in _committed_tables().items():
    header = table.split("\n", 1)[0]
    if header in text.split("\n"):
      assert table.strip() in text, (
          f"{path.relative_to(README.parent)} is quoted, but not verbatim")
      quoted.append(path.relative_to(RESULTS).as_posix())
  return quoted


def test_every_quoted_results_table_is_the_committed_one():
  """Wherever README, or a note under launch/results, quotes a committed
  results table (its header row), it quotes the whole table verbatim."""
  _quoted_tables(README.read_text(encoding="utf-8"))
  for note in sorted(RESULTS.rglob("*.md")):
    if note not in _committed_tables():
      _quoted_tables(note.read_text(encoding="utf-8"))


def test_earlier_reproduction_tables_are_the_committed_results():
  """The earlier run's notes (README links them) quote its committed
  tables verbatim, link its curves, and each JSON is the run its table was
  written from."""
  import json  # pylint: disable=g-import-not-at-top
  text = README.read_text(encoding="utf-8")
  section = _section(text, "### The earlier, underpowered run (2026-12-04)")
  results = RESULTS / "reproduce" / "2026-12-04"
  assert "(launch/results/reproduce/2026-12-04/NOTES.md)" in section
  notes = (results / "NOTES.md").read_text(encoding="utf-8")
  assert sorted(_quoted_tables(notes)) == [
      f"reproduce/2026-12-04/{stem}.md"
      for stem in ("ablations", "clean", "results")]
  for stem in ("results", "ablations", "clean"):
    table = (results / f"{stem}.md").read_text(encoding="utf-8")
    summary = json.loads((results / f"{stem}.json").read_text())
    assert summary["table"] == table
    assert f"]({stem}.png)" in notes  # A link relative to NOTES.md.
    assert (results / f"{stem}.png").stat().st_size > 10_000
  main = json.loads((results / "results.json").read_text())
  arms = {(r["arm"], r["seed"]) for r in main["runs"]}
  assert len(arms) == 12 and {s for _, s in arms} == {0, 1, 2}
  for run in main["runs"]:
    assert len(run["curve"]) >= 3 and run["sampled_tokens"] > 0


def test_relative_links_point_to_files():
  """Every relative link of README and of the notes under launch/results
  (the measurement logs and details README moved there) names a file."""
  documents = [README] + sorted(RESULTS.rglob("*.md"))
  broken = []
  for document in documents:
    text = document.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
      if re.match(r"[a-z]+:", target) or target.startswith("#"):
        continue
      if not (document.parent / target.split("#", 1)[0]).exists():
        broken.append(f"{document.relative_to(README.parent)}: {target}")
  assert not broken, broken
  assert "(launch/results/speed.md)" in README.read_text(encoding="utf-8")


def test_the_pilot_choice_is_the_committed_pilots():
  """README names the setting the pilot chose with its training accuracy
  from the committed pilot.json, and links the pilot's table and the
  protocol (which reads it in full)."""
  import json  # pylint: disable=g-import-not-at-top
  text = README.read_text(encoding="utf-8")
  section = _section(text, "## Reproducing the paper's comparison")
  pilot = RESULTS / "reproduce" / "pilot"
  figures = json.loads((pilot / "pilot.json").read_text())
  chosen = figures["eager_lr3e-4"]
  assert (f"`eager_lr3e-4` was chosen (training rollouts right "
          f"{100 * chosen['train_accuracy']:.0f}% of the time"
          in " ".join(section.split()))
  assert "(launch/results/reproduce/pilot/pilot.md)" in section
  assert "(launch/results/reproduce/PROTOCOL.md)" in section


def test_every_metric_of_the_readme_table_is_documented_in_the_code():
  """README's table of logged metrics and runtime.metrics.METRICS_DOC
  (what `mgrpo_jax.plot` reads) name the same metrics: each README name,
  with `<agent>` read as main and sub, has its entry."""
  import re  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.runtime.metrics import METRICS_DOC  # pylint: disable=g-import-not-at-top
  text = README.read_text(encoding="utf-8")
  table = text.split("Logged per step to `<run_dir>/<role>/metrics.jsonl`",
                     1)[1].split("\n\n", 2)[1]
  names = set()
  for name in re.findall(r"`([a-z_<>]+/[a-z_<>0-9/]+)`", table):
    names |= ({name.replace("<agent>", a) for a in ("main", "sub")}
              if name.startswith("<agent>/") else {name})
  assert len(names) > 60
  missing = sorted(names - set(METRICS_DOC))
  assert not missing, f"README metrics without a METRICS_DOC entry: {missing}"


def test_the_reproduction_s_result_in_readme_is_the_committed_json():
  """README states the pre-registered suite's primary endpoint with the
  committed JSON's figures, and every table row it shows of the suite is a
  row of the committed results.md."""
  import json  # pylint: disable=g-import-not-at-top
  text = README.read_text(encoding="utf-8")
  section = _section(text, "### The pre-registered reproduction (it "
                     "measured recall)")
  results = RESULTS / "reproduce"
  summary = json.loads((results / "results.json").read_text())
  table = (results / "results.md").read_text(encoding="utf-8")
  assert summary["table"] == table
  assert len(summary["runs"]) == 28
  primary = summary["analysis"]["paired"]["mgrpo"]
  assert primary["seeds"] == list(range(8))
  sign = primary["sign_test"]
  sentence = (f"{primary['mean'] * 100:+.1f} points, 95% t interval "
              f"[{primary['low'] * 100:+.1f}, {primary['high'] * 100:+.1f}]"
              f"; sign test {sign['positive']} / {sign['negative']} / "
              f"{sign['ties']} seeds, p = {sign['p']:.3f}")
  assert sentence in " ".join(section.split()), sentence
  pilot = (results / "pilot" / "pilot.md").read_text(encoding="utf-8")
  recall = (results / "recall.md").read_text(encoding="utf-8")
  rows = [line for line in section.split("\n") if line.startswith("|")
          and line not in pilot.split("\n")
          and line not in recall.split("\n")]
  assert len(rows) >= 10
  assert not [row for row in rows if row not in table.split("\n")]
  assert "(launch/results/reproduce/results.md)" in section
  assert (results / "results.png").stat().st_size > 10_000
