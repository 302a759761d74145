"""``python -m contrastive_hf.recipes RECIPE [--flag value ... | SETTINGS.json ...]``: a recipe's script, as
``examples/run_<recipe>.py`` runs it (`run_recipe`); ``python -m contrastive_hf.recipes RECIPE --help`` lists its
flags."""

from __future__ import annotations

import sys

from ..commands.errors import run_script
from . import recipe_names, run_recipe


def main(argv: list[str] | None = None) -> None:
    if argv is None:
        argv = sys.argv[1:]
        if argv:  # what argparse's usage and one-line errors name
            sys.argv[0] = f"python -m contrastive_hf.recipes {argv[0]}"
    if not argv or argv[0].startswith("-"):
        print(
            "usage: python -m contrastive_hf.recipes RECIPE [--flag value ... | SETTINGS.json ...]\n"
            f"RECIPE: {', '.join(recipe_names())}, or one of your own registered when its module is imported "
            "(contrastive_hf.recipes.register_recipe). RECIPE --help lists its flags.",
            file=sys.stdout if argv[:1] in (["-h"], ["--help"]) else sys.stderr,
        )
        sys.exit(0 if argv[:1] in (["-h"], ["--help"]) else 2)
    run_script(lambda: run_recipe(argv[0], argv[1:]))


if __name__ == "__main__":
    main()
