"""README's shell commands, found and run in their CPU form
(tests/readme_commands_test.py).

`documented_commands()` reads every fenced ```bash block of README.md and
docs/*.md (continued lines joined, a quoted string over several lines
kept whole, comments dropped) and every usage line of a launch/*.sh
header (`#   bash launch/...`; bracketed optional parts dropped).

A block runs as it is written, under bash, in a scratch checkout view (the
repository's files linked into a fresh directory, so `configs/...`,
`launch/...` and `runs/...` mean what they mean at the root), with the
machine's stand-ins on PATH (`write_stand_ins`):
- `python` (also `$VENV/bin/python`, which the launch scripts call): the
  real interpreter, each `-m mgrpo_jax.main` / `-m mgrpo_jax.evaluate`
  command with tiny model, world and step sizes appended (`tiny_flags`),
  `gs://` paths mapped to a local directory, the web search endpoint to a
  server on 127.0.0.1, placeholders (`DIR_OR_GGUF`) to real files, hours
  to minutes (`launch/reproduce.sh` to `--quick`), a test run to one quick
  test; with MGRPO_README_MODE=check it only records the command;
- `gcloud compute tpus tpu-vm ssh NAME --worker=all --command=C`: C on
  each host of the slice as a local process (the hosts and chips the
  README marker names), `DISTRIBUTED=auto` (JAX detecting the slice, which
  a CPU cannot) as `explicit` with a local coordinator.

Every invocation is recorded (JSON lines in $MGRPO_README_LOG): the
default run checks each recorded `mgrpo_jax.main` command's config as
`main` would (and that the roles of one run share the store's
fingerprint); the slow run runs everything.

A block README marks with `<!-- cpu-form: REASON -->` on the line before
it says why its CPU form differs from the command; a marker without a
reason is refused.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shlex
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!--\s*cpu-form:(.*?)-->", re.S)
HOSTS = re.compile(r"\bhosts=(\d+)\s+chips=(\d+)\b")


class MarkerError(ValueError):
  """A README marker that does not say why."""


@dataclasses.dataclass(frozen=True)
class Block:
  """One fenced bash block (or a launch script's usage line)."""
  source: str  # "README.md:129", "launch/gpu.sh:6"
  commands: tuple[str, ...]  # One per command line, joined, no comments.
  marker: str | None = None  # The reason a marker before it gives.
  body: str | None = None  # The block as written (None: the commands).

  @property
  def script(self) -> str:
    """What bash runs: the block as written."""
    return self.body if self.body is not None else (
        "\n".join(self.commands) + "\n")


def _strip_comment(line: str) -> str:
  """`line` without a trailing `# comment` outside quotes."""
  quote = None
  for i, c in enumerate(line):
    if quote:
      if c == quote:
        quote = None
    elif c in "'\"":
      quote = c
    elif c == "#" and (i == 0 or line[i - 1].isspace()):
      return line[:i].rstrip()
  return line.rstrip()


def _open_quote(text: str) -> bool:
  try:
    shlex.split(text, comments=False)
  except ValueError:
    return True
  return False


def split_commands(body: str) -> list[str]:
  """The commands of a block: continued lines (`\\`) and quoted strings
  over several lines joined into one command each, comments dropped."""
  commands, current, continued = [], "", False
  for raw in body.splitlines():
    line = raw if _open_quote(current) else _strip_comment(raw)
    if not current and not line.strip():
      continue
    if continued:
      current += line.strip()
    else:
      current = f"{current}\n{line}" if current else line.strip()
    continued = current.endswith("\\")
    if continued:
      current = current[:-1].rstrip() + " "
      continue
    if _open_quote(current):
      continue
    commands.append(re.sub(r"[ \t]+", " ", current).strip())
    current = ""
  if current.strip():
    commands.append(current.strip())
  return [c for c in commands if c]


def markdown_blocks(path: pathlib.Path) -> list[Block]:
  """The fenced bash blocks of a markdown file, with their markers."""
  text = path.read_text(encoding="utf-8")
  blocks = []
  for match in re.finditer(r"```bash\n(.*?)```", text, re.S):
    line = text.count("\n", 0, match.start()) + 1
    before = text[:match.start()].rstrip().rsplit("\n", 1)[-1]
    marker = MARKER.search(before)
    reason = None
    if marker is not None:
      reason = marker.group(1).strip()
      if not reason:
        raise MarkerError(f"{path.name}:{line - 1}: a cpu-form marker with "
                          "no reason; expected <!-- cpu-form: why this "
                          "block runs otherwise on a CPU -->.")
    blocks.append(Block(f"{path.relative_to(ROOT)}:{line}",
                        tuple(split_commands(match.group(1))), reason,
                        match.group(1)))
  return blocks


def usage_blocks(script: pathlib.Path) -> list[Block]:
  """A launch script header's usage lines (`#   bash launch/...` or
  `#   gcloud ...`, with their continuation lines and quoted strings over
  several lines), optional [bracketed] parts dropped. Consecutive usage
  lines are one block (e.g. the two roles of one run)."""
  lines = script.read_text(encoding="utf-8").splitlines()
  blocks, i, last = [], 0, -2
  while i < len(lines) and lines[i].startswith("#"):
    body = lines[i][1:].strip()
    if re.match(r"^((\w+=\S+ )*bash launch/|gcloud )", body):
      first = i
      text = body
      while (text.endswith("\\") or _open_quote(text)) and i + 1 < len(
          lines):
        i += 1
        text += "\n" + lines[i][1:].strip()
      text = re.sub(r"\s*\[[^\[\]]*(\[[^\[\]]*\][^\[\]]*)*\]", "", text)
      text = re.sub(r"\s+\((default|sizes) .*$", "", text)  # Notes.
      text = re.sub(r"[\s\\]+$", "", text)  # Left by a dropped part.
      if first == last + 1 and blocks:  # Right after the previous one.
        blocks[-1] = Block(blocks[-1].source, blocks[-1].commands +
                           tuple(split_commands(text)), None,
                           blocks[-1].script + text + "\n")
      else:
        blocks.append(Block(f"launch/{script.name}:{first + 1}",
                            tuple(split_commands(text)), None, text + "\n"))
      last = i
    i += 1
  return blocks


def documented_blocks() -> list[Block]:
  """README's and docs/'s bash blocks, then every launch script's usage."""
  blocks = markdown_blocks(ROOT / "README.md")
  for doc in sorted((ROOT / "docs").glob("*.md")):
    blocks += markdown_blocks(doc)
  for script in sorted((ROOT / "launch").glob("*.sh")):
    blocks += usage_blocks(script)
  return blocks


# ------------------------------------------------------------ the CPU form

def _has(config, field: str) -> bool:
  node = config
  for part in field.split("."):
    if not hasattr(node, "keys") or part not in node:
      return False
    node = node[part]
  return True


def tiny_fields(config, given: tuple[str, ...] = ()) -> dict[str, object]:
  """Fields that shrink a run or evaluation config to seconds on 2 cores:
  the tiny model, world and team of tests/trainer_test_utils.tiny_config,
  one training step evaluated, a small closed set; only fields the config
  has and the command does not set itself (`given`: its arguments)."""
  fields: dict[str, object] = {}
  if hasattr(config.get("model"), "keys"):
    fields.update({"model.name": "tiny", "model.vocab_size": 512,
                   "model.hidden_size": 32, "model.num_layers": 1})
  fields.update({
      "sft.steps": 2, "sft.batch_size": 4, "sft.questions": 4,
      "world.num_entities": 40, "world.train_questions": 8,
      "world.validation_questions": 2, "world.test_questions": 2,
      "world.max_hops": 1, "train.steps": 1, "train.questions_per_step": 2,
      "train.group_size": 2, "train.eval_questions": 2,
      "train.eval_every": 1, "train.test_questions": 2,
      "data.train_questions": 8, "runtime.decode_windows": 1,
      "runtime.prefill_windows": 1, "runtime.prefill_chunk": 64,
      "eval.limit": 1, "eval.rollouts": 1})
  if (config.get("sft") or {}).get("worlds"):  # Within sft.questions.
    fields["sft.worlds"] = 2
  if (config.get("train") or {}).get("counterfactual_questions"):
    fields["train.counterfactual_questions"] = 2  # Within eval_questions.
  for name, section in (config.get("agents") or {}).items():
    if hasattr(section, "keys") and "max_turns" in section:
      fields.update({f"agents.{name}.max_turns": 2,
                     f"agents.{name}.max_new_tokens": 32,
                     f"agents.{name}.context_tokens": 1024,
                     f"agents.{name}.rows": 4})
  for name in (config.get("learner") or {}):
    fields.update({f"learner.{name}.min_len": 256,
                   f"learner.{name}.max_len": 1024})
  done = {a.split("=", 1)[0] for a in given if a.startswith("--config.")}
  return {f: v for f, v in fields.items()
          if _has(config, f) and f"--config.{f}" not in done}


def tiny_flags(config, given: tuple[str, ...] = ()) -> list[str]:
  """`tiny_fields` as --config.FIELD=VALUE flags."""
  return [f"--config.{f}={v}" for f, v in tiny_fields(config,
                                                       given).items()]


def tiny_config_file(path: str, directory: pathlib.Path) -> str:
  """A config file: the config at `path` with `tiny_fields` (for the
  benchmarks, whose --config takes a file and no overrides)."""
  from mgrpo_jax.runtime.config_checks import load_config_file
  source = os.path.abspath(path)
  fields = tiny_fields(load_config_file(source))
  directory.mkdir(parents=True, exist_ok=True)
  out = directory / f"tiny_{pathlib.Path(path).stem}.py"
  out.write_text(
      "from mgrpo_jax.runtime.config_checks import load_config_file\n\n\n"
      "def get_config():\n"
      f"  config = load_config_file({source!r})\n"
      f"  for field, value in {sorted(fields.items())!r}:\n"
      "    *parents, leaf = field.split('.')\n"
      "    node = config\n"
      "    for part in parents:\n"
      "      node = node[part]\n"
      "    node[leaf] = value\n"
      "  return config\n")
  return str(out)


# The benchmarks' CPU forms: their own size flags, smallest that run
# (each only when the command does not give it), and for those that read
# a config file, its tiny twin (`tiny_config_file`; default: the module's).
BENCH_FLAGS = {
    "speed": (["--batches=1", "--prompt_len=16", "--new_tokens=4",
               "--repeats=1", "--train_shape=1,32"], None),
    "rollouts": (["--questions=1", "--rollouts=2", "--max_new_tokens=8",
                  "--turns=1", "--nowarmup"], None),
    "step": (["--steps=2", "--warmup=0"], "configs/default.py"),
    "programs": ([], "configs/default.py"),
    "moe_speed": (["--repeats=1"], None),
    "team_memory": (["--sizes=1x2", "--steps=2", "--warmup=1"],
                    "configs/smollm2.py"),
    # The controls at tiny sizes; the power estimate from the committed
    # controls, written beside the run (never over the committed files).
    "controls": (["--quick", "--out=runs/controls"], None),
    "power": (["--out=runs/power"], None),
}


def _bench_argv(name: str, argv: list[str]) -> list[str]:
  extra, default_config = BENCH_FLAGS.get(name, ([], None))
  given = {a.split("=", 1)[0] for a in argv}
  argv = argv + [f for f in extra if f.split("=", 1)[0] not in given
                 and f.replace("--no", "--", 1) not in given]
  if default_config is not None:
    path = next((a.split("=", 1)[1] for a in argv
                 if a.startswith("--config=")), default_config)
    tiny = tiny_config_file(path, pathlib.Path(os.environ.get(
        "MGRPO_README_HOME", ".")) / "tiny_configs")
    argv = [a for a in argv if not a.startswith("--config=")] + [
        f"--config={tiny}"]
  return argv


def config_path(argv: list[str]) -> str | None:
  for i, arg in enumerate(argv):
    if arg == "--config" and i + 1 < len(argv):
      return argv[i + 1]
    if arg.startswith("--config="):
      return arg.split("=", 1)[1]
  return None


STAND_IN_PYTHON = r'''#!{python}
"""README's `python`, in its CPU form (tests/readme_commands_utils.py)."""
import json, os, sys
sys.path.insert(0, {tests!r})
import readme_commands_utils as u
u.python_stand_in(sys.argv[1:])
'''

STAND_IN_PIP = r'''#!{python}
"""README's `pip` outside the environment its block makes."""
import sys
sys.path.insert(0, {tests!r})
import readme_commands_utils as u
u.pip_stand_in(sys.argv[1:])
'''

STAND_IN_GCLOUD = r'''#!{python}
"""README's `gcloud ... tpu-vm ssh`, in its CPU form."""
import sys
sys.path.insert(0, {tests!r})
import readme_commands_utils as u
u.gcloud_stand_in(sys.argv[1:])
'''


def write_stand_ins(directory: pathlib.Path) -> dict[str, str]:
  """The stand-ins (`bin/python`, `bin/python3`, `bin/pip`, `bin/gcloud`) in
  `directory`, which is also a VENV the launch scripts take as set up
  (its install stamp says so); the environment that puts them first."""
  bin_dir = directory / "bin"
  bin_dir.mkdir(parents=True, exist_ok=True)
  for name, text in (("python", STAND_IN_PYTHON), ("pip", STAND_IN_PIP),
                     ("gcloud", STAND_IN_GCLOUD)):
    path = bin_dir / name
    path.write_text(text.format(python=sys.executable,
                                tests=str(ROOT / "tests")))
    path.chmod(0o755)
  (bin_dir / "python3").symlink_to(bin_dir / "python")
  # launch/env.sh installs nothing when the stamp holds its line.
  import hashlib
  digest = hashlib.sha256((ROOT / "setup.py").read_bytes() +
                          (ROOT / "launch" / "env.sh").read_bytes())
  (directory / ".mgrpo_jax_install").write_text("".join(
      f"{digest.hexdigest()[:16]} {extras}\n"
      for extras in ("", "test", "tpu", "gpu")))
  return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "VENV": str(directory),
          "MGRPO_README_PYTHON": sys.executable}


def _record(kind: str, argv: list[str]) -> None:
  log = os.environ.get("MGRPO_README_LOG")
  if log:
    keep = ("ROLE", "CONFIG", "RUN_DIR", "STORE_ROOT", "DISTRIBUTED",
            "MGRPO_README_HOST", "XLA_FLAGS")
    with open(log, "a", encoding="utf-8") as out:
      out.write(json.dumps({"kind": kind, "argv": argv, "cwd": os.getcwd(),
                            "env": {k: os.environ[k] for k in keep
                                    if k in os.environ}}) + "\n")


def _mapped(arg: str) -> str:
  """gs:// paths, the web endpoint and README's placeholders, locally."""
  local_gcs = os.environ.get("MGRPO_README_GCS")
  if local_gcs and "gs://" in arg:
    arg = arg.replace("gs://", local_gcs.rstrip("/") + "/")
  web = os.environ.get("MGRPO_README_WEB")
  if web:
    arg = re.sub(r"https://google\.serper\.dev/search", web, arg)
  for placeholder, value in json.loads(
      os.environ.get("MGRPO_README_PLACEHOLDERS", "{}")).items():
    arg = arg.replace(placeholder, value)
  return arg


def cpu_argv(argv: list[str]) -> list[str]:
  """The real interpreter's arguments for README's `python ARGV`."""
  argv = [_mapped(a) for a in argv]
  module = argv[1] if len(argv) > 1 and argv[0] == "-m" else None
  if module in ("mgrpo_jax.main", "mgrpo_jax.evaluate"):
    path = config_path(argv)
    if path is not None:
      from mgrpo_jax.runtime.config_checks import load_config_file
      argv = argv + tiny_flags(load_config_file(path), tuple(argv))
    if module == "mgrpo_jax.main" and "--distributed=auto" in argv:
      host = os.environ["MGRPO_README_HOST"]
      argv = [a for a in argv if a != "--distributed=auto"] + [
          "--distributed=explicit",
          f"--coordinator_address={os.environ['MGRPO_README_COORDINATOR']}",
          f"--num_processes={os.environ['MGRPO_README_HOSTS']}",
          f"--process_id={host}"]
  elif module == "mgrpo_jax.bench.reading_probe":  # One tiny size.
    keep, skip = [], False
    for arg in argv:
      if skip or arg.startswith(("--sizes=", "--set=", "--out=")):
        skip = False
        continue
      if arg in ("--sizes", "--set", "--out"):
        skip = True
        continue
      keep.append(arg)
    argv = keep + ["--sizes=32x1", "--config=configs/reading.py:quick",
                   "--set=sft.steps=2", "--out=runs/reading_probe"]
  elif module and module.startswith("mgrpo_jax.bench."):
    argv = _bench_argv(module.rpartition(".")[2], argv)
  elif module == "mgrpo_jax.reproduce" and "--quick" not in argv:
    out = "runs/reproduce" if "--out" not in argv else None
    argv = argv + ["--quick"] + (["--out", out] if out else [])
  elif module == "mgrpo_jax.reproduce_pilot":
    argv = argv + ["--steps", "5", "--settings", "mild_lr1e-3"]
  elif module == "pytest":
    # One quick test stands for a run of the suite (the suite itself is
    # what CI runs); the slow run's: a slow one of seconds.
    quick = ("closed_engine_on_several_devices and fsdp2 and not tp2"
             if "slow" in argv else "test_core_usage_snippet_runs")
    argv = argv + ["-q", "-p", "no:cacheprovider", "-k", quick]
  return argv


def python_stand_in(argv: list[str]) -> None:
  """README's `python ARGV`: recorded; run in its CPU form unless
  MGRPO_README_MODE=check (then only `-m venv` and `-c` run)."""
  _record("python", argv)
  real = os.environ["MGRPO_README_PYTHON"]
  if os.environ.get("MGRPO_README_MODE") == "check":
    if argv[:2] == ["-m", "venv"]:  # Its `pip` is then the stand-in's.
      argv = [*argv, "--without-pip"]
    elif argv[:2] != ["-m", "mgrpo_jax.data.export"]:  # Seconds; its files
      return                                           # are read by checks.
  os.execv(real, [real, *cpu_argv(argv)])


def pip_stand_in(argv: list[str]) -> None:
  """`pip` reached outside a virtual environment README's block made (its
  check mode makes them without pip): recorded, nothing installed."""
  _record("pip", argv)
  if os.environ.get("MGRPO_README_MODE") != "check":
    sys.exit("pip stand-in: README's pip runs inside the virtual "
             "environment its block creates; none is active.")


def gcloud_stand_in(argv: list[str]) -> None:
  """`gcloud compute tpus tpu-vm ssh NAME --worker=all --command=C`: C on
  each of $MGRPO_README_HOSTS hosts of $MGRPO_README_CHIPS chips, as local
  processes started in the background (`ssh` to every worker of a slice;
  the test waits for them, pids in $MGRPO_README_PIDS)."""
  import socket
  import subprocess
  _record("gcloud", argv)
  if argv[:4] != ["compute", "tpus", "tpu-vm", "ssh"]:
    sys.exit(f"gcloud stand-in: only `compute tpus tpu-vm ssh` is "
             f"README's; got {argv}")
  command = next(a.split("=", 1)[1] for a in argv
                 if a.startswith("--command="))
  # One host of one chip unless a README marker names the slice.
  hosts = int(os.environ.setdefault("MGRPO_README_HOSTS", "1"))
  chips = int(os.environ.setdefault("MGRPO_README_CHIPS", "1"))
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  name = argv[4]
  home = pathlib.Path(os.environ["MGRPO_README_HOME"])
  for host in range(hosts):
    env = dict(os.environ, MGRPO_README_HOST=str(host),
               MGRPO_README_COORDINATOR=f"127.0.0.1:{port}",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={chips}")
    log = open(home / f"{name}-{host}.log", "w")
    status = home / f"{name}-{host}.status"  # Its exit code, when done.
    proc = subprocess.Popen(
        ["bash", "-c", 'bash -c "$1"; echo $? > "$2"', "host", command,
         str(status)], cwd=home, env=env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    with open(os.environ["MGRPO_README_PIDS"], "a") as out:
      out.write(f"{proc.pid} {name}-{host} {status}\n")


def checkout_view(directory: pathlib.Path) -> pathlib.Path:
  """`directory` holding links to the repository's top-level files (a
  fresh root: runs/ and .venv are its own)."""
  directory.mkdir(parents=True, exist_ok=True)
  for entry in ROOT.iterdir():
    if entry.name in (".venv", "runs", ".git", "eval_runs") or (
        entry.name.startswith(".") and entry.name != ".ci"):
      continue
    (directory / entry.name).symlink_to(entry)
  return directory
