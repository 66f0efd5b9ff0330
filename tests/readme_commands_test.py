"""Every shell command README (and docs/, and each launch script's usage
line) documents runs, in its CPU form (tests/readme_commands_utils.py).

The blocks run in README order in one scratch checkout view, as a user
following README would: the runs one block makes are there for the next
(the training block's checkpoints for its evaluations, the reproduction's
results for its report). The default run goes through every block with
each Python command recorded, not run, and checks each training command's
config as `python -m mgrpo_jax.main` would before computing anything,
every evaluation's flags, and that the commands writing one store agree on
its fingerprint (the roles of a multi-host run, and a second run in the
same folder). The slow run (MGRPO_JAX_SLOW=1) runs them all.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

import readme_commands_utils as u

IN_A_VENV = sys.prefix != sys.base_prefix


def test_every_documented_command_is_found_whole():
  blocks = u.documented_blocks()
  commands = [c for b in blocks for c in b.commands]
  assert "bash launch/train.sh" in commands
  assert "CONFIG=configs/default.py RUN_DIR=runs/two bash " \
         "launch/two_processes.sh" in commands
  # Continued lines are one command; comments are not commands.
  tpu = [c for c in commands if "launch/tpu_vm.sh" in c and "smollm2-tpu"
         in c]
  assert tpu and tpu[0].endswith("--config.learner.sub.micro_batch=4")
  assert not any(c.startswith("#") or " # " in c for c in commands)
  # A quoted --command over several lines is one command.
  gcloud = [c for c in commands if c.startswith("gcloud ")]
  assert len(gcloud) == 4 and all("bash launch/tpu_multihost.sh" in c
                                  for c in gcloud)  # README's, the header's
  # Launch scripts' usage lines, optional parts dropped.
  assert "bash launch/test.sh" in [c for b in blocks
                                   if b.source.startswith("launch/test.sh")
                                   for c in b.commands]
  gcloud_block = next(b for b in blocks if b.commands[0].startswith(
      "gcloud "))
  assert gcloud_block.marker and u.HOSTS.search(gcloud_block.marker)


def test_a_marker_without_a_reason_is_refused(tmp_path):
  doc = u.ROOT / "docs" / "_marker_test.md"
  doc.parent.mkdir(exist_ok=True)
  try:
    doc.write_text("<!-- cpu-form: -->\n```bash\nbash launch/train.sh\n```\n")
    with pytest.raises(u.MarkerError, match=r"_marker_test.md:1: a cpu-form "
                       r"marker with no reason; expected <!-- cpu-form: "):
      u.documented_blocks()
    doc.write_text("<!-- cpu-form: because -->\n```bash\nls\n```\n")
    assert u.markdown_blocks(doc)[0].marker == "because"
  finally:
    doc.unlink()
    if not any(doc.parent.iterdir()):
      doc.parent.rmdir()


def test_split_commands_joins_what_the_shell_joins():
  body = ("a --x=1 \\\n    --y=2   # note\n# only a comment\n\n"
          "b --c='one\n  two' \\\n  --d\nc '#' x # y\n")
  assert u.split_commands(body) == ["a --x=1 --y=2",
                                    "b --c='one\n two' --d", "c '#' x"]


def test_tiny_flags_name_only_fields_a_config_has():
  from mgrpo_jax.runtime.config_checks import load_config_file
  default = u.tiny_flags(load_config_file(u.ROOT / "configs" / "default.py"))
  assert "--config.model.name=tiny" in default
  assert "--config.agents.sub.rows=4" in default
  assert "--config.eval.limit=1" not in default  # An evaluation's field.
  # A command's own value wins.
  assert "--config.train.steps=1" not in u.tiny_flags(
      load_config_file(u.ROOT / "configs" / "default.py"),
      ("--config.train.steps=50",))
  evaluate = u.tiny_flags(load_config_file(u.ROOT / "configs" /
                                           "evaluate.py"))
  assert "--config.eval.limit=1" in evaluate
  assert not any(f.startswith("--config.model.") for f in evaluate)


# ----------------------------------------------------------- the README

def _data_files(view: pathlib.Path) -> None:
  """The files README's commands name, small, in their formats: MuSiQue
  and HotpotQA files of the synthetic world, a GAIA metadata.jsonl, an
  XBench-DeepSearch CSV, a WebWalkerQA JSONL."""
  import base64
  import shutil
  from mgrpo_jax.data import export
  from mgrpo_jax.data.readers import xor_text
  from mgrpo_jax.data.world import WorldConfig, generate_world
  from mgrpo_jax.runtime.config_checks import load_config_file
  world = load_config_file(u.ROOT / "configs" / "default.py").world
  files = view / "_exported"
  export.export_world(generate_world(WorldConfig(**world.to_dict())), files)
  shutil.copy(files / "musique" / "train.jsonl", view / "musique_train.jsonl")
  shutil.copy(files / "musique" / "validation.jsonl",
              view / "musique_dev.jsonl")
  shutil.copy(files / "hotpotqa" / "validation.json", view / "hotpot_dev.json")
  (view / "gaia").mkdir()
  (view / "gaia" / "metadata.jsonl").write_text(json.dumps({
      "task_id": "g1", "Question": "Which river flows through Kelto?",
      "Final answer": "Sorn", "Level": "1"}) + "\n")
  key = "canary-key"
  enc = lambda s: base64.b64encode(xor_text(s.encode(), key)).decode()
  (view / "xbench_deepsearch.csv").write_text(
      "id,prompt,answer,canary\n"
      f"1,{enc('Which river flows through Kelto?')},{enc('Sorn')},{key}\n")
  (view / "webwalkerqa.jsonl").write_text(json.dumps({
      "question": "Which river flows through Kelto?", "answer": "Sorn",
      "root_url": "https://kelto.example", "info": {
          "difficulty_level": "easy"}}) + "\n")


def _environment(tmp: pathlib.Path, mode: str, web_url: str) -> dict:
  from mgrpo_jax.models.loading import smollm2_gguf_path
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("PYTEST", "MGRPO_README"))}
  env.update(u.write_stand_ins(tmp / "stand_ins"))
  env.update({
      "MGRPO_README_MODE": mode, "MGRPO_README_LOG": str(tmp / "log.jsonl"),
      "MGRPO_README_GCS": str(tmp / "gcs"),
      "MGRPO_README_HOME": str(tmp / "home"),
      "MGRPO_README_PIDS": str(tmp / "pids"), "MGRPO_README_WEB": web_url,
      "MGRPO_README_PLACEHOLDERS": json.dumps({
          "DIR_OR_GGUF": str(smollm2_gguf_path())}),
      "EXTRAS": "test", "JAX_PLATFORMS": "cpu",
      "MGRPO_JAX_CACHE": str(tmp / "cache"),
      "XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
  env.pop("MGRPO_JAX_SLOW", None)
  return env


def _wait_hosts(pids_file: pathlib.Path, timeout_s: float) -> list[str]:
  """Waits for the hosts a gcloud stand-in started (each writes its exit
  code to its status file when done); the ones that failed."""
  failed = []
  if not pids_file.is_file():
    return failed
  deadline = time.monotonic() + timeout_s
  for line in pids_file.read_text().splitlines():
    pid, name, status = line.split()
    status = pathlib.Path(status)
    while not (status.is_file() and status.read_text().strip()):
      if time.monotonic() > deadline:
        try:
          os.killpg(int(pid), 9)
        except ProcessLookupError:
          pass
        failed.append(f"{name} (timed out)")
        break
      time.sleep(0.5)
    else:
      if status.read_text().strip() != "0":
        failed.append(f"{name} (exit {status.read_text().strip()})")
  pids_file.unlink()
  return failed


def run_blocks(tmp: pathlib.Path, mode: str, web_url: str = "",
               timeout_s: float = 600) -> list[dict]:
  """Every documented block, in order, under bash in one checkout view
  (`mode` "check" or "run"); fails naming the block, its command and its
  output. Returns the recorded invocations."""
  view = u.checkout_view(tmp / "home" / "mgrpo_jax")
  (tmp / "gcs").mkdir()
  _data_files(view)
  env = _environment(tmp, mode, web_url)
  # MGRPO_README_BLOCKS=README.md:61,launch/: only blocks whose source
  # starts so (to debug one; a block may need an earlier one's runs).
  only = [s for s in os.environ.get("MGRPO_README_BLOCKS", "").split(",")
          if s]
  for block in u.documented_blocks():
    if only and not block.source.startswith(tuple(only)):
      continue
    marker = block.marker and u.HOSTS.search(block.marker)
    hosts = ({"MGRPO_README_HOSTS": marker.group(1),
              "MGRPO_README_CHIPS": marker.group(2)} if marker else {})
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.script], cwd=view,
        env={**env, **hosts}, capture_output=True, text=True,
        timeout=timeout_s * max(1, len(block.commands)))
    failed = _wait_hosts(tmp / "pids", timeout_s)
    if result.returncode or failed:
      logs = "".join(p.read_text()[-2000:] for p in (tmp / "home").glob(
          "*.log"))
      pytest.fail(f"{block.source}: {block.script!r} exited "
                  f"{result.returncode} (hosts failed: {failed}):\n"
                  f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}\n{logs}")
  log = tmp / "log.jsonl"
  return ([json.loads(line) for line in log.read_text().splitlines()]
          if log.is_file() else [])


def _flag_names(module: str) -> list[str]:
  """The absl flags `module` defines besides --config (from its source:
  importing both entry points would define --config twice)."""
  source = (u.ROOT / "mgrpo_jax" / f"{module}.py").read_text()
  return [n for n in re.findall(r"flags\.DEFINE_\w+\(\s*\"(\w+)\"", source)
          if n != "config"]


def parse_command(module: str, argv: list[str]):
  """(config, other flags) of `python -m mgrpo_jax.<module> argv` parsed
  as the module parses it (relative paths: from the current directory)."""
  from absl import flags
  from ml_collections import config_flags
  values = flags.FlagValues()
  config = config_flags.DEFINE_config_file(
      "config", None, "", flag_values=values, lock_config=True,
      sys_argv=["python", *argv])  # Where it finds the overrides.
  for name in _flag_names(module):
    flags.DEFINE_string(name, None, "", flag_values=values)
  values(["python", *argv])
  return config.value, {n: values[n].value for n in _flag_names(module)}


def check_recorded(records: list[dict]) -> list[str]:
  """Each recorded training command's config checked as main checks it,
  each evaluation's flags parsed; commands writing one store share its
  fingerprint. The commands checked, as lines."""
  from mgrpo_jax.train import run_checks
  from mgrpo_jax.train.side import fingerprint
  stores: dict[str, tuple[str, dict]] = {}
  checked = []
  for record in records:
    argv = record["argv"]
    if record["kind"] != "python" or argv[:1] != ["-m"]:
      continue
    module = argv[1].removeprefix("mgrpo_jax.")
    if module not in ("main", "evaluate"):
      continue
    where = " ".join(argv)
    here = os.getcwd()
    os.chdir(record["cwd"])
    try:
      config, values = parse_command(module, argv[2:])
      checked.append(where)
      if module == "evaluate":
        continue
      role = values.get("role") or "all"
      run_checks.check_run_config(config, role)
      prints = json.dumps(fingerprint(config), sort_keys=True, default=str)
    finally:
      os.chdir(here)
    root = os.path.join(record["cwd"],
                        config.store.root or f"{config.run_dir}/store")
    if root in stores and stores[root][1] != prints:
      pytest.fail(f"{where} (--role={role}) writes the store {root} with "
                  f"another fingerprint than {stores[root][0]}: the second "
                  "to open it stops ('written by an incompatible config').")
    stores.setdefault(root, (where, prints))
  return checked


@pytest.mark.skipif(not IN_A_VENV, reason="the launch scripts set up "
                    "through launch/env.sh: run from a virtual environment")
def test_every_documented_command_checks_before_compute(tmp_path):
  """The default run's sibling of the slow run below: every block runs
  with its Python commands recorded, then each is checked."""
  records = run_blocks(tmp_path, "check")
  checked = check_recorded(records)
  # The multi-host example ran on every host of both slices.
  hosts = [r for r in records if r["kind"] == "python"
           and "MGRPO_README_HOST" in r["env"]
           and "mgrpo_jax.main" in r["argv"]]
  assert len(hosts) == 4 + 4 + 1 + 1, hosts  # README's slices, the header's
  assert len(checked) >= 20


@pytest.mark.slow
@pytest.mark.skipif(not IN_A_VENV, reason="the launch scripts set up "
                    "through launch/env.sh: run from a virtual environment")
def test_every_documented_command_runs_in_its_cpu_form(tmp_path,
                                                      monkeypatch):
  from web_test_utils import kelto_web
  with kelto_web(monkeypatch) as web:
    records = run_blocks(tmp_path, "run", web.url("/search"))
  checked = check_recorded(records)
  assert checked or os.environ.get("MGRPO_README_BLOCKS")
