"""The `zoo` console command.

    zoo train NAME [recipe flags]   run a recipe (gpt-char, translate, bert-pretrain, bert-classify, demo)
    zoo presets [--family F]        list the presets
    zoo describe NAME               sizes, parameters and FLOPs of a preset

`zoo train translate --epochs 2` is `python -m recipes.translate --epochs 2`:
the same `main(argv)`, the same flags (`zoo train NAME --help` lists them).
"""

import argparse
import importlib
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow loads

RECIPES = {
    "gpt-char": "recipes.gpt_char",
    "translate": "recipes.translate",
    "bert-pretrain": "recipes.bert_pretrain",
    "bert-classify": "recipes.bert_classify",
    "demo": "recipes.demo",
}


def _parser():
    parser = argparse.ArgumentParser(prog="zoo", description="A Keras 3 model zoo of Transformers.")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="run a training recipe", add_help=False)
    train.add_argument("recipe", choices=sorted(RECIPES), metavar="NAME", help=", ".join(RECIPES))
    presets = commands.add_parser("presets", help="list the presets")
    presets.add_argument("--family", choices=("transformer", "gpt", "bert"), default=None)
    describe = commands.add_parser("describe", help="sizes, parameters and FLOPs of a preset")
    describe.add_argument("name")
    return parser


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if argv[:1] == ["train"] and len(argv) > 1 and argv[1] in RECIPES:
        # Everything after the recipe's name belongs to the recipe's own parser.
        return _train(argv[1], argv[2:])
    args = parser.parse_args(argv)
    if args.command == "train":  # argparse has already rejected an unknown NAME
        parser.error("zoo train NAME: expected one of " + ", ".join(RECIPES))
    if args.command == "presets":
        return _presets(args.family)
    return _describe(args.name)


def _train(name, recipe_argv):
    from zoo.training.run import recipe_errors

    recipe = importlib.import_module(RECIPES[name])
    try:
        recipe.main(recipe_argv)
    except recipe_errors() as error:
        print(f"zoo train {name}: error: {error}", file=sys.stderr)
        return 2
    return 0


def _presets(family):
    from zoo.presets import PRESETS

    for name, preset in PRESETS.items():
        if family is None or preset["family"] == family:
            print(f"{name:20s} {preset['family']:12s} {preset['description']}")
    return 0


def _describe(name):
    import zoo

    try:
        info = zoo.describe(name)
    except ValueError as error:
        print(f"zoo describe: error: {error}", file=sys.stderr)
        return 2
    print(f"{info['name']} ({info['family']}): {info['description']}")
    print(f"  parameters:               {info['parameters']:,}")
    print(f"  non-embedding parameters: {info['non_embedding_parameters']:,}")
    print(f"  training FLOPs per token: {info['training_flops_per_token']:,}")
    print("  config: " + json.dumps(info["config"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
