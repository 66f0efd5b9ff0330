"""The keyed on-disk cache's writes: whole entries, races kept safe."""

import pathlib

from mgrpo_jax.runtime import cache


def _complete(folder: pathlib.Path) -> bool:
  return (folder / "done").is_file()


def _writer(text: str):
  def build(folder: pathlib.Path) -> None:
    (folder / "payload").write_text(text)
    (folder / "done").write_text("")
  return build


def test_cache_root_prefers_the_argument_then_the_environment(monkeypatch,
                                                               tmp_path):
  monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "env"))
  assert cache.cache_root(tmp_path / "arg") == tmp_path / "arg"
  assert cache.cache_root() == tmp_path / "env"
  monkeypatch.delenv(cache.CACHE_ENV)
  assert cache.cache_root() == pathlib.Path(cache.DEFAULT_ROOT).expanduser()


def test_an_entry_appears_whole_and_leaves_no_temporary_folder(tmp_path):
  target = tmp_path / "entries" / "key"
  seen = []

  def build(folder):
    seen.append(target.exists())
    _writer("a")(folder)

  assert cache.write_entry(target, build, is_complete=_complete) == target
  assert seen == [False]
  assert (target / "payload").read_text() == "a"
  assert [p.name for p in target.parent.iterdir()] == ["key"]


def test_an_entry_the_caller_chose_to_rebuild_is_replaced(tmp_path):
  target = tmp_path / "key"
  cache.write_entry(target, _writer("old"), is_complete=_complete)
  cache.write_entry(target, _writer("new"), is_complete=_complete,
                    replace=True)
  assert (target / "payload").read_text() == "new"
  assert [p.name for p in tmp_path.iterdir()] == ["key"]


def test_an_entry_completed_before_the_write_began_is_kept_in_place(
    tmp_path):
  # The race CI met: two roles train the same warm start; the main role
  # finishes, renames its entry in and starts reading its weights lazily;
  # the sub role finishes later and must not move that entry aside, though
  # it was complete before the sub role's write began.
  target = tmp_path / "key"
  cache.write_entry(target, _writer("first"), is_complete=_complete)
  inode = (target / "payload").stat().st_ino
  cache.write_entry(target, _writer("second"), is_complete=_complete)
  assert (target / "payload").read_text() == "first"
  assert (target / "payload").stat().st_ino == inode
  assert [p.name for p in tmp_path.iterdir()] == ["key"]


def test_an_entry_another_process_completes_meanwhile_is_kept_in_place(
    tmp_path):
  # Two processes (e.g. a main and a sub-agent trainer) build the same warm
  # start at once; the first finishes and starts reading it. The second must
  # not move it aside (the reader would find no file), only drop its copy.
  target = tmp_path / "key"
  reader_saw = []

  def slow_build(folder):
    cache.write_entry(target, _writer("first"), is_complete=_complete)
    inode = (target / "payload").stat().st_ino
    _writer("second")(folder)
    reader_saw.append(inode)

  cache.write_entry(target, slow_build, is_complete=_complete)
  assert (target / "payload").read_text() == "first"
  assert (target / "payload").stat().st_ino == reader_saw[0]
  assert [p.name for p in tmp_path.iterdir()] == ["key"]


def test_an_incomplete_leftover_is_replaced(tmp_path):
  target = tmp_path / "key"
  target.mkdir()
  (target / "payload").write_text("half")
  cache.write_entry(target, _writer("whole"), is_complete=_complete)
  assert (target / "payload").read_text() == "whole"


def test_a_failed_build_leaves_the_old_entry_and_no_temporary_folder(
    tmp_path):
  target = tmp_path / "key"
  cache.write_entry(target, _writer("old"), is_complete=_complete)

  def failing(folder):
    (folder / "payload").write_text("partial")
    raise RuntimeError("disk full")

  try:
    cache.write_entry(target, failing, is_complete=_complete)
  except RuntimeError:
    pass
  else:
    raise AssertionError("the build's error must reach the caller")
  assert (target / "payload").read_text() == "old"
  assert [p.name for p in tmp_path.iterdir()] == ["key"]
