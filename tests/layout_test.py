"""The package's layout (DESIGN.md): one concern per module, no module over
500 lines, imports pointing down the layers only, no test helper inside."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "mgrpo_jax"
MAX_LINES = 500

# Each package and the packages it may import (besides itself). Entry points
# (mgrpo_jax/*.py) and benchmarks may import anything.
ALLOWED = {
    "core": set(),
    "runtime": set(),
    "models": {"core", "runtime"},
    "data": {"runtime"},
    "sampling": {"core", "models", "runtime"},
    "agents": {"core", "data", "models", "runtime", "sampling"},
    "toy": {"core", "runtime"},
    "train": {"agents", "core", "data", "models", "runtime", "sampling"},
}


def _modules():
  return sorted(p for p in PACKAGE.rglob("*.py"))


def _imported_packages(path: pathlib.Path) -> set[str]:
  """mgrpo_jax sub-packages `path` imports (anywhere in the file)."""
  out = set()
  for node in ast.walk(ast.parse(path.read_text())):
    names = []
    if isinstance(node, ast.ImportFrom) and node.module:
      names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    elif isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    for name in names:
      parts = name.split(".")
      if parts[0] == "mgrpo_jax" and len(parts) > 1:
        out.add(parts[1])
  return out


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(
    p.relative_to(PACKAGE)))
def test_no_module_is_over_500_lines(path):
  lines = len(path.read_text().splitlines())
  assert lines <= MAX_LINES, (
      f"{path.relative_to(PACKAGE)} has {lines} lines; split it by concern "
      f"(at most {MAX_LINES}).")


def test_imports_point_down_only():
  wrong = []
  for path in _modules():
    package = path.relative_to(PACKAGE).parts[0]
    if package not in ALLOWED:
      continue  # An entry point or a benchmark.
    for imported in _imported_packages(path) - {package}:
      if imported in ALLOWED and imported not in ALLOWED[package]:
        wrong.append(f"{path.relative_to(PACKAGE)} imports {imported}")
  assert not wrong, "imports pointing up or sideways: " + "; ".join(wrong)


def test_every_package_is_in_the_table():
  packages = {p.name for p in PACKAGE.iterdir()
              if p.is_dir() and (p / "__init__.py").is_file()}
  assert packages - {"bench"} == set(ALLOWED)


def test_no_test_helper_in_the_package():
  names = {p.stem for p in _modules()}
  assert not {"gcs_emulator", "conftest"} & names
  assert not (PACKAGE / "training").exists()


def test_every_module_is_named_where_readme_points():
  """README's Layout names every package and entry point; each package's
  __init__.py docstring (where README points) names each of its modules."""
  import ast  # pylint: disable=g-import-not-at-top
  readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
  section = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
  missing = []
  for path in _modules():
    if path.name == "__init__.py":
      continue
    parts = path.relative_to(PACKAGE).parts
    if len(parts) == 1:  # An entry point (main.py, reproduce_*.py).
      stem = path.stem.split("_")[0]
      if path.name not in section and f"{stem}*.py" not in section:
        missing.append(f"README Layout: {path.name}")
      continue
    if f"{parts[0]}/" not in section:
      missing.append(f"README Layout: {parts[0]}/")
    init = PACKAGE / parts[0] / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    if path.name not in doc and path.stem not in doc.split():
      missing.append(f"{parts[0]}/__init__.py docstring: {path.name}")
  assert not missing, f"modules not named: {sorted(set(missing))}"
