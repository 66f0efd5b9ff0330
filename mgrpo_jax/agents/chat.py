"""Token-level chat rendering: the ids an agent sees, and which it wrote.

A conversation's tokens are built incrementally, never re-tokenised: the
prompt (system + user message, rendered by the model's chat template), then
alternately the tokens the agent generated (kept exactly as sampled, so the
learner scores the very ids the sampler chose) and the tokens the controller
injects (a tool result, an error message, "answer now"). Injected text is the
template's own rendering: the end of the assistant turn the model may have
left open (it stopped at `</tool_call>` rather than at its end-of-turn
token), then a new message and the generation prompt. Only generated tokens
are trained on; the mask says which those are.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

_SENTINEL = "\u2063MGRPO_SENTINEL\u2063"


class ChatError(ValueError):
  """The chat template cannot be split into turns the way rollouts need."""


class ChatRenderer:
  """Renders prompts and injected messages with one tokenizer's template.

  `tool_role` is the role tool results and controller messages are sent
  with; "user" works with every template (ChatML templates also accept
  "tool", but small models have rarely seen it).
  """

  def __init__(self, tokenizer: Any, *, tool_role: str = "user"):
    self.tokenizer = tokenizer
    self.tool_role = tool_role
    eos = tokenizer.eos_token
    self._eos_id = tokenizer.eos_id
    history = [{"role": "system", "content": "s"},
               {"role": "user", "content": "u"},
               {"role": "assistant", "content": _SENTINEL}]
    closed = tokenizer.apply_chat_template(history,
                                           add_generation_prompt=False)
    after = tokenizer.apply_chat_template(
        history + [{"role": tool_role, "content": _SENTINEL}],
        add_generation_prompt=True)
    if closed.count(_SENTINEL) != 1:
      raise ChatError("the chat template does not render an assistant "
                      "message's content verbatim; rollouts need it to.")
    # What closes an assistant turn (ChatML: "<|im_end|>\n").
    self._turn_close = closed[closed.index(_SENTINEL) + len(_SENTINEL):]
    if not after.startswith(closed):
      raise ChatError("the chat template renders earlier messages "
                      "differently once a message is added; rollouts need "
                      "a template that only appends.")
    rest = after[len(closed):]
    i = rest.index(_SENTINEL)
    self._message_open = rest[:i]  # "<|im_start|>user\n"
    self._message_close = rest[i + len(_SENTINEL):]  # "<|im_end|>\n<|im_start|>assistant\n"
    self._eos_text = eos or ""

  def prompt(self, system: str, user: str) -> list[int]:
    """Ids of a new conversation, ending with the generation prompt."""
    text = self.tokenizer.apply_chat_template(
        [{"role": "system", "content": system},
         {"role": "user", "content": user}], add_generation_prompt=True)
    return self.tokenizer.encode(text)

  def message(self, generated: Sequence[int], content: str) -> list[int]:
    """Ids to append after an assistant turn of `generated` ids: the rest of
    that turn's closing, a `tool_role` message and the generation prompt."""
    return self.tokenizer.encode(self.message_text(generated, content))

  def message_text(self, generated: Sequence[int], content: str) -> str:
    close = self._turn_close
    if (generated and self._eos_id is not None
        and int(generated[-1]) == self._eos_id
        and close.startswith(self._eos_text)):
      close = close[len(self._eos_text):]  # The model already ended its turn.
    return close + self._message_open + content + self._message_close

  def overhead(self, generated: Sequence[int]) -> int:
    """Ids a `message` after `generated` costs beyond its content."""
    return len(self.message(generated, ""))

  def describe(self) -> Mapping[str, str]:
    """The template pieces in use (for debugging a new template)."""
    return {"turn_close": self._turn_close,
            "message_open": self._message_open,
            "message_close": self._message_close}
