"""What several test modules share: launching the example scripts and DeepSpeed (`launching`), and building tiny
models and trainers (`builders`). Importable as ``helpers.<module>`` from every test folder (tests/ is on sys.path,
beside conftest.py)."""
