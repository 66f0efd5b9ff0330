"""The field checks and the command-line error helpers of config_checks."""

import math

import ml_collections
import pytest

from mgrpo_jax.runtime import config_checks as cc
from mgrpo_jax.runtime.config_checks import ConfigError


def section(**fields):
  return ml_collections.ConfigDict({"s": fields}, type_safe=False)


def test_number_bounds_and_open_ends():
  config = section(low=0.0, high=1.0, x=0.5)
  assert cc.number(config, "s.x", minimum=0.0, maximum=1.0) == 0.5
  assert cc.number(config, "s.high", minimum=0.0, maximum=1.0) == 1.0
  with pytest.raises(ConfigError, match=r"config.s.high=1.0: expected a "
                     r"number in \[0.0, 1.0\)\."):
    cc.number(config, "s.high", minimum=0.0, maximum=1.0, open_max=True)
  with pytest.raises(ConfigError, match=r"config.s.low=0.0: expected a "
                     r"number in \(0.0, inf\)\."):
    cc.number(config, "s.low", minimum=0.0, open_min=True)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, "1", True,
                                 None])
def test_number_refuses_non_finite_and_non_numbers(bad):
  with pytest.raises(ConfigError, match="config.s.x=.*: expected a finite "
                     "number"):
    cc.number(section(x=bad), "s.x", minimum=0.0)


def test_integer_choice_boolean_string():
  config = section(n=3, f=3.0, b=1, name="", mode="a")
  assert cc.integer(config, "s.n", minimum=1) == 3
  with pytest.raises(ConfigError, match="config.s.f=3.0: expected an integer"):
    cc.integer(config, "s.f", minimum=1)
  with pytest.raises(ConfigError, match="config.s.b=1: expected True or "
                     "False"):
    cc.boolean(config, "s.b")
  assert cc.string(config, "s.name") == ""
  with pytest.raises(ConfigError, match="config.s.name='': expected a "
                     "non-empty string"):
    cc.string(config, "s.name", empty=False)
  with pytest.raises(ConfigError, match=r"config.s.mode='c': expected one "
                     r"of \['a', 'b'\]"):
    cc.choice(section(mode="c"), "s.mode", ("b", "a"))
  with pytest.raises(ConfigError, match="config.s.gone is missing"):
    cc.get(config, "s.gone")


def test_unknown_field_suggests_the_closest():
  config = ml_collections.ConfigDict(
      {"train": {"steps": 1, "group_size": 2}, "seed": 0})
  assert cc.unknown_field(config, "train.steps") is None
  assert cc.unknown_field(config, "train.stepz") == (
      "unknown config field config.train.stepz: did you mean "
      "config.train.steps?")
  assert cc.unknown_field(config, "trian.steps") == (
      "unknown config field config.trian: did you mean config.train?")
  assert cc.unknown_field(config, "zzz") == (
      "unknown config field config.zzz: its fields are ['seed', 'train'].")
  assert cc.unknown_field(config, "seed.x") == (
      "config.seed is a value, not a section: it has no field 'x'.")


def test_load_config_file(tmp_path):
  path = tmp_path / "c.py"
  path.write_text("import ml_collections\n"
                  "def get_config(size='1'):\n"
                  "  return ml_collections.ConfigDict({'size': int(size)})\n")
  assert cc.load_config_file(str(path)).size == 1
  assert cc.load_config_file(f"{path}:7").size == 7
  with pytest.raises(ConfigError, match="does not exist"):
    cc.load_config_file(str(tmp_path / "missing.py"))


def test_usage_error_is_one_line_and_exit_code_2(capsys):
  with pytest.raises(SystemExit) as exit_info:
    cc.usage_error("config.seed=-1: expected an integer >= 0.")
  assert exit_info.value.code == 2
  assert capsys.readouterr().err == (
      "error: config.seed=-1: expected an integer >= 0.\n")
