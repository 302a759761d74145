#!/usr/bin/env python
"""Where a setting travels: the files and functions a setting passes through, from a script's command line to the
files the run saves (issue 33's "walk of pooler_type").

The script runs examples/run_clear.py in this process on the demo's tiny encoder and data
(examples/demo/clear_scratch.json, one training step, STS-B dev's first 40 pairs), with ``--SETTING VALUE``, under
`sys.settrace`. A function of the package or of the example is on the walk when, while it runs, it holds the value (an
argument or a local, or a value of a dict it holds; a number for a numeric value) or names the attribute ``SETTING``.
Class bodies and modules run on import are not (a dataclass field's default is not the run's value), nor is the
reload check after the save (it reads the saved files back; the walk ends at them). The output lists each function on
the walk, in the order it was first seen, then the files. Other flags are run_clear.py's, given to the run.

    python benchmarks/setting_walk.py                 # --pooler_type max
    python benchmarks/setting_walk.py --value cls --from-pretrained
    python benchmarks/setting_walk.py --setting augmentations --value del_span+reorder
    python benchmarks/setting_walk.py --setting span_ratio --value 0.0917 --augmentations del_span

The value should be one no other option of the run holds ("max" and "cls" are; "mean" is the default of GLUE's
options, read when its module is imported; a number such as 0.0917, not 0.1).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def walk_of(
    value: str, from_pretrained: bool = False, setting: str = "pooler_type", extra: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """``[(file relative to the repository, function's qualified name), ...]`` on the walk of ``--setting value``
    through run_clear.py (with the flags ``extra`` too), in the order first seen."""
    import contrastive_hf
    import contrastive_hf.commands.reload_check as reload_check

    sys.path.insert(0, str(REPO / "examples"))
    try:
        import run_clear
    finally:
        sys.path.remove(str(REPO / "examples"))
    roots = (str(Path(contrastive_hf.__file__).resolve().parent), str(REPO / "examples"))
    walk: list[tuple[str, str]] = []

    number = _number(value)

    def equal(item) -> bool:
        if number is not None and isinstance(item, int | float) and not isinstance(item, bool):
            return item == number
        return isinstance(item, str) and item == value

    def holds(local) -> bool:
        # plain dicts only: a mapping of transformers' (MODEL_MAPPING) imports every model class when walked
        return equal(local) or (type(local) is dict and any(equal(item) for item in local.values()))

    def note(frame) -> None:
        code = frame.f_code
        if not code.co_flags & inspect.CO_NEWLOCALS:  # a class body or a module, run on import
            return
        if setting in code.co_names or any(holds(local) for local in frame.f_locals.values()):
            where = (os.path.relpath(code.co_filename, REPO), code.co_qualname)
            if where not in walk:
                walk.append(where)

    def on_return(frame, event, arg):
        if event == "return":
            note(frame)
        return on_return

    def on_call(frame, event, arg):
        if frame.f_code.co_filename.startswith(roots):
            note(frame)
            return on_return
        return None

    verify_reload = reload_check.verify_reload

    def untraced_reload_check(*args, **kwargs):
        sys.settrace(None)
        try:
            return verify_reload(*args, **kwargs)
        finally:
            sys.settrace(on_call)

    with tempfile.TemporaryDirectory() as folder:
        argv = [
            str(REPO / "examples" / "demo" / "clear_scratch.json"),
            *("--config_name", str(REPO / "examples" / "demo" / "encoder_config.json")),
            *("--tokenizer_name", str(REPO / "examples" / "demo" / "tokenizer")),
            *("--train_file", str(REPO / "examples" / "demo" / "data" / "wiki1m_sample.txt")),
            # STS-B dev's first 40 pairs (the suite's slice): the walk is the same, the traced evaluations shorter
            *("--stsb_dev_file", str(REPO / "tests" / "fixtures" / "sts" / "stsbenchmark" / "sts-dev.csv")),
            *("--max_steps", "1", "--per_device_train_batch_size", "8", "--warmup_steps", "0"),
            *("--use_cpu", "true", "--output_dir", os.path.join(folder, "out")),
            *(f"--{setting}", value),
            *extra,
        ]
        if from_pretrained:
            from transformers import AutoConfig, AutoModel

            encoder_config = AutoConfig.from_pretrained(REPO / "examples" / "demo" / "encoder_config.json")
            encoder = AutoModel.from_config(encoder_config)
            encoder.save_pretrained(os.path.join(folder, "encoder"))
            argv += ["--model_name_or_path", os.path.join(folder, "encoder"), "--config_name", ""]
        reload_check.verify_reload = untraced_reload_check
        sys.settrace(on_call)
        try:
            run_clear.main(argv)
        finally:
            sys.settrace(None)
            reload_check.verify_reload = verify_reload
    return walk


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", default="pooler_type", help="the flag walked, without -- (default: pooler_type)")
    parser.add_argument("--value", default="max", help="its value in the run (default: max)")
    parser.add_argument(
        "--from-pretrained", action="store_true", help="start from a saved encoder (--model_name_or_path)"
    )
    arguments, extra = parser.parse_known_args(argv)  # the others: run_clear.py's own flags
    walk = walk_of(arguments.value, arguments.from_pretrained, arguments.setting, extra)
    print(f"\nThe walk of --{arguments.setting} {arguments.value} through examples/run_clear.py, flag to saved files:")
    for file, function in walk:
        print(f"  {file}  {function}")
    files = list(dict.fromkeys(file for file, _ in walk))
    print(f"{len(files)} files: {', '.join(files)}")


if __name__ == "__main__":
    main()
