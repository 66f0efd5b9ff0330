"""The tiny team's tokenizer, model config, cached assets and agents config."""

import pytest

from mgrpo_jax.models import tiny as tiny_model
from mgrpo_jax.agents import prompts
from mgrpo_jax.agents.chat import ChatRenderer
from mgrpo_jax.agents.team import check_agents_config
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.models.build import init_model
from mgrpo_jax.agents import tiny_team as tiny

WORLD = WorldConfig(num_entities=30, train_questions=8, validation_questions=2,
                    test_questions=2, max_hops=2)


@pytest.fixture(scope="module")
def world():
  return generate_world(WORLD)


@pytest.fixture(scope="module")
def tok(world):
  return tiny_model.train_tokenizer(tiny.tokenizer_texts(world), 1024)


def test_tokenizer_speaks_chatml(tok):
  assert tok.vocab_size <= 1024
  assert [tok.token_to_id(t) for t in tiny_model.SPECIAL_TOKENS] == [0, 1, 2]
  assert tok.eos_token == "<|im_end|>" and tok.stop_token_ids == (2,)
  text = tok.apply_chat_template([{"role": "system", "content": "S"},
                                  {"role": "user", "content": "U"}])
  assert text == ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU"
                  "<|im_end|>\n<|im_start|>assistant\n")
  ids = tok.encode(text)
  assert ids[0] == 1 and ids.count(2) == 2  # Special tokens are single ids.
  pieces = ChatRenderer(tok).describe()
  assert pieces["message_open"] == "<|im_start|>user\n"


def test_tokenizer_round_trips_and_compresses_what_agents_see(tok, world):
  texts = tiny.protocol_texts() + [d.text for d in world.documents[:5]]
  texts.append("naïve café – 日本語 🤗")  # Unseen bytes still encode.
  for text in texts:
    assert tok.decode(tok.encode(text)) == text
  prompt = tiny.protocol_texts()[0]
  assert prompt.startswith(prompts.MAIN_ROLE)
  # Repeated protocol text is merged: well under one id per 2 characters.
  assert len(tok.encode(prompt)) < len(prompt) / 3
  brief = prompts.system_prompt(prompts.SUB_ROLE, tiny._tool_specs()[
      prompts.SUB_ROLE], "brief")
  assert brief in tiny.protocol_texts()
  full = prompts.system_prompt(prompts.SUB_ROLE, tiny._tool_specs()[
      prompts.SUB_ROLE])
  assert len(tok.encode(brief)) < len(tok.encode(full)) / 3
  page = world.documents[0].text
  assert len(tok.encode(page)) < len(page) / 3


@pytest.mark.parametrize("vocab_size", [100, 2.5, None])
def test_bad_vocab_size_is_named(vocab_size):
  with pytest.raises(ValueError, match=f"vocab_size={vocab_size!r}"):
    tiny_model.train_tokenizer(["some text"], vocab_size)


def test_empty_texts_are_refused():
  with pytest.raises(ValueError, match="texts is empty"):
    tiny_model.train_tokenizer([], 512)


def test_model_config_pads_vocab_and_builds():
  config = tiny_model.tiny_model_config(1001)
  assert config.vocab_size == 1024 and config.family == "llama"
  assert config.tie_word_embeddings and config.rope_theta == 10000.0
  assert (config.num_heads, config.num_kv_heads, config.head_dim) == (4, 2, 32)
  assert config.intermediate_size == 3 * config.hidden_size
  assert tiny_model.tiny_model_config(1001, pad_vocab_to=1).vocab_size == 1001
  small = tiny_model.tiny_model_config(300, hidden_size=64, num_layers=1)
  model = init_model(small, seed=0)
  assert model.embed.shape == (320, 64)
  assert small.num_params < 100_000


@pytest.mark.parametrize("kwargs, message", [
    ({"hidden_size": 0}, r"hidden_size=0"),
    ({"hidden_size": 100, "num_heads": 3}, r"hidden_size=100 is not a"),
    ({"pad_vocab_to": 0}, r"pad_vocab_to=0"),
])
def test_bad_model_config_is_named(kwargs, message):
  with pytest.raises(ValueError, match=message):
    tiny_model.tiny_model_config(512, **kwargs)


def test_team_assets_are_cached_per_world(tmp_path, monkeypatch):
  tok, config = tiny.tiny_team_assets(WORLD, cache_dir=tmp_path,
                                      vocab_size=512, hidden_size=64)
  directory = tiny.tiny_tokenizer_dir(WORLD, vocab_size=512,
                                      cache_dir=tmp_path)
  assert (directory / "tokenizer.json").is_file()
  assert directory.parent == tmp_path / tiny.CACHE_DIR
  assert config.vocab_size >= tok.vocab_size and config.hidden_size == 64

  def no_training(*args, **kwargs):
    raise AssertionError("the cached tokenizer was trained again")

  monkeypatch.setattr(tiny, "train_tokenizer", no_training)
  again, _ = tiny.tiny_team_assets(WORLD, cache_dir=tmp_path, vocab_size=512)
  text = "Which company does Nuko Besho work for?"
  assert again.encode(text) == tok.encode(text)
  assert again.chat_template == tiny_model.CHAT_TEMPLATE
  other = WorldConfig(num_entities=30, train_questions=8,
                      validation_questions=2, test_questions=2, max_hops=2,
                      seed=1)
  assert tiny.tiny_tokenizer_dir(other, vocab_size=512,
                                 cache_dir=tmp_path) != directory
  with pytest.raises(TypeError, match="must be a WorldConfig"):
    tiny.tiny_team_assets({"num_entities": 30}, cache_dir=tmp_path)


def test_agents_config_is_valid():
  config = tiny.tiny_agents_config(context_tokens=768)
  check_agents_config(config)
  assert config.temperature == 0.0
  assert config.main.context_tokens == config.sub.context_tokens == 768
