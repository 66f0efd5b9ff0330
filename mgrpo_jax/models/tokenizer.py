"""A `tokenizers.Tokenizer` plus special tokens and a chat template.

On disk it is the Hugging Face pair `tokenizer.json` (the `tokenizers`
pipeline) + `tokenizer_config.json` (special tokens, `chat_template`); a
`chat_template.jinja` file, as transformers >= 4.43 writes it, is read too.
Directories written by `Tokenizer.save` load in
`transformers.AutoTokenizer.from_pretrained` and render the same chat text.

The chat template is rendered with jinja2 in a sandbox configured like
transformers' (`trim_blocks`, `lstrip_blocks`, `tojson`, `raise_exception`,
`strftime_now`), so the same template gives the same text in both.
"""

from __future__ import annotations

import datetime
import functools
import json
import pathlib
from typing import Any, Iterable, Mapping, Sequence

import jinja2
import jinja2.ext
import jinja2.sandbox
import tokenizers

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"


class TokenizerError(ValueError):
  """A tokenizer directory or a special token is unusable."""


@functools.lru_cache(maxsize=16)
def _compile_template(template: str) -> jinja2.Template:
  def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

  def tojson(x, ensure_ascii=False, indent=None, separators=None,
             sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)

  def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)

  env = jinja2.sandbox.ImmutableSandboxedEnvironment(
      trim_blocks=True, lstrip_blocks=True,
      extensions=[jinja2.ext.loopcontrols])
  env.filters["tojson"] = tojson
  env.globals["raise_exception"] = raise_exception
  env.globals["strftime_now"] = strftime_now
  return env.from_string(template)


def _token_text(value: Any) -> str | None:
  """A special token of tokenizer_config.json: a string or AddedToken dict."""
  if isinstance(value, Mapping):
    return value.get("content")
  return value


class Tokenizer:
  """Text <-> token ids, special ids and chat formatting for one model.

  Attributes:
    backend: the wrapped `tokenizers.Tokenizer`.
    bos_token / eos_token / pad_token / unk_token: special token strings (or
      None). `eos_token` ends an assistant turn (SmolLM2: `<|im_end|>`).
    chat_template: a jinja2 template over `messages`, or None.
  """

  def __init__(self, backend: tokenizers.Tokenizer, *,
               bos_token: str | None = None, eos_token: str | None = None,
               pad_token: str | None = None, unk_token: str | None = None,
               chat_template: str | None = None,
               extra_stop_tokens: Sequence[str] = (),
               source: str = "tokenizer"):
    self.backend = backend
    self.bos_token = bos_token
    self.eos_token = eos_token
    self.pad_token = pad_token
    self.unk_token = unk_token
    self.chat_template = chat_template
    self.extra_stop_tokens = tuple(extra_stop_tokens)
    self._source = source
    for field in ("bos_token", "eos_token", "pad_token", "unk_token"):
      token = getattr(self, field)
      if token is not None and backend.token_to_id(token) is None:
        raise TokenizerError(f"{source}: {field}={token!r} is not in the "
                             f"vocabulary ({backend.get_vocab_size()} tokens).")
    for token in self.extra_stop_tokens:
      if backend.token_to_id(token) is None:
        raise TokenizerError(f"{source}: stop token {token!r} is not in the "
                             "vocabulary.")

  # --- ids -----------------------------------------------------------------

  def _id(self, token: str | None) -> int | None:
    return None if token is None else self.backend.token_to_id(token)

  @property
  def bos_id(self) -> int | None:
    return self._id(self.bos_token)

  @property
  def eos_id(self) -> int | None:
    return self._id(self.eos_token)

  @property
  def pad_id(self) -> int | None:
    """Padding id. Never infer masks from it: it is often the eos id."""
    return self._id(self.pad_token)

  @property
  def vocab_size(self) -> int:
    """Number of ids, added tokens included."""
    return self.backend.get_vocab_size(with_added_tokens=True)

  @property
  def stop_token_ids(self) -> tuple[int, ...]:
    """Ids that end generation: eos, then any extra stop tokens (no repeats)."""
    ids = []
    for token in (self.eos_token, *self.extra_stop_tokens):
      i = self._id(token)
      if i is not None and i not in ids:
        ids.append(i)
    return tuple(ids)

  def token_to_id(self, token: str) -> int | None:
    return self.backend.token_to_id(token)

  # --- text ----------------------------------------------------------------

  def encode(self, text: str, *, add_special_tokens: bool = False
             ) -> list[int]:
    """Token ids of `text`.

    Special-token strings in the text (e.g. `<|im_start|>`) become their single
    ids. `add_special_tokens=True` also runs the post-processor (a BOS for
    Llama-3-style tokenizers); the default is False because chat-rendered text
    already spells out its special tokens.
    """
    return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

  def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False
             ) -> str:
    return self.backend.decode([int(i) for i in ids],
                               skip_special_tokens=skip_special_tokens)

  def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], *,
                          add_generation_prompt: bool = True,
                          **kwargs: Any) -> str:
    """The chat text of `messages` ([{"role": ..., "content": ...}, ...]).

    Extra keyword arguments (e.g. `tools`) are passed to the template.
    """
    if self.chat_template is None:
      raise TokenizerError(f"{self._source}: no chat_template (expected in "
                           f"{CONFIG_FILE} or {TEMPLATE_FILE}).")
    template = _compile_template(self.chat_template)
    return template.render(
        messages=[dict(m) for m in messages],
        add_generation_prompt=add_generation_prompt,
        bos_token=self.bos_token or "", eos_token=self.eos_token or "",
        pad_token=self.pad_token or "", unk_token=self.unk_token or "",
        **kwargs)

  # --- disk ----------------------------------------------------------------

  def save(self, directory: str | pathlib.Path) -> None:
    """Writes tokenizer.json and tokenizer_config.json into `directory`."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    self.backend.save(str(directory / TOKENIZER_FILE))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(1e30),
        "clean_up_tokenization_spaces": False,
    }
    for field in ("bos_token", "eos_token", "pad_token", "unk_token"):
      if getattr(self, field) is not None:
        config[field] = getattr(self, field)
    if self.chat_template is not None:
      config["chat_template"] = self.chat_template
    if self.extra_stop_tokens:
      config["mgrpo_jax_extra_stop_tokens"] = list(self.extra_stop_tokens)
    (directory / CONFIG_FILE).write_text(
        json.dumps(config, indent=2, ensure_ascii=False) + "\n",
        encoding="utf-8")

  @classmethod
  def load(cls, directory: str | pathlib.Path) -> "Tokenizer":
    """Reads a directory with tokenizer.json (+ tokenizer_config.json)."""
    directory = pathlib.Path(directory)
    tokenizer_file = directory / TOKENIZER_FILE
    if not tokenizer_file.is_file():
      raise TokenizerError(f"{tokenizer_file}: not found (a checkpoint "
                           "directory needs the tokenizers-library file "
                           f"{TOKENIZER_FILE}).")
    backend = tokenizers.Tokenizer.from_file(str(tokenizer_file))
    config_file = directory / CONFIG_FILE
    config = {}
    if config_file.is_file():
      config = json.loads(config_file.read_text(encoding="utf-8"))
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}]
      named = {t.get("name"): t.get("template") for t in template}
      template = named.get("default")
    template_file = directory / TEMPLATE_FILE
    if template is None and template_file.is_file():
      template = template_file.read_text(encoding="utf-8")
    return cls(backend,
               bos_token=_token_text(config.get("bos_token")),
               eos_token=_token_text(config.get("eos_token")),
               pad_token=_token_text(config.get("pad_token")),
               unk_token=_token_text(config.get("unk_token")),
               chat_template=template,
               extra_stop_tokens=config.get("mgrpo_jax_extra_stop_tokens", ()),
               source=str(directory))
