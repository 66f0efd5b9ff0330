"""The Colab notebook's code cells run top to bottom (shell lines skipped)."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_quickstart_notebook_runs(tmp_path):
  notebook = json.loads((ROOT / "colabs/quickstart.ipynb").read_text())
  lines = []
  for cell in notebook["cells"]:
    if cell["cell_type"] == "code":
      lines += [l for l in "".join(cell["source"]).splitlines()
                if not l.lstrip().startswith(("!", "%"))]
  script = tmp_path / "notebook.py"
  script.write_text("\n".join(lines) + "\n")
  env = dict(os.environ, MPLBACKEND="Agg")
  result = subprocess.run([sys.executable, str(script)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path, env=env)
  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  assert "M-GRPO            greedy accuracy by step:" in out
  final = {line.split()[0]: float(line.split()[-1].split(":")[1])
           for line in out.splitlines() if "greedy accuracy by step" in line}
  assert final["M-GRPO"] > final["frozen"]
