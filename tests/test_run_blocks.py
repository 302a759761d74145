"""The runner of documentation blocks and benchmark smoke runs (tests/scripts/run_blocks.py) gives each its own
output, whole, even when a process it started outlives it and still writes (as multiprocessing's resource tracker
does when the process that started it exits)."""

import importlib.util
import json

from conftest import REPO_ROOT

# The block starts a process that waits for the block's process to end, then writes for a while.
OUTLIVED = """
import os, time
parent = os.getpid()
if os.fork() == 0:
    while os.getppid() == parent:
        pass
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        os.write(2, b"late\\n")
    os._exit(0)
print("the block's own line")
"""


def test_a_process_that_outlives_its_block_neither_cuts_its_output_nor_reaches_the_next(tmp_path):
    spec = importlib.util.spec_from_file_location("run_blocks", REPO_ROOT / "tests" / "scripts" / "run_blocks.py")
    run_blocks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_blocks)
    blocks = tmp_path / "blocks.json"
    blocks.write_text(json.dumps([OUTLIVED, "print('the next block')"] * 4))  # the writer races the read: 4 tries
    run_blocks.main(str(blocks), str(tmp_path), str(tmp_path / "results.json"))
    results = json.loads((tmp_path / "results.json").read_text())
    for first, second in zip(results[::2], results[1::2], strict=True):
        lines = first["output"].splitlines()
        assert (first["status"], lines[:1], set(lines[1:]) <= {"late"}) == (0, ["the block's own line"], True)
        assert (second["status"], second["output"]) == (0, "the next block\n")
