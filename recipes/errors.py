"""How a recipe or a `zoo` command ends on input it refuses: one line
naming what was wrong and what was expected, and exit status `REFUSED`
(2, argparse's own for a bad flag), rather than a traceback."""

import sys

REFUSED = 2


def recipe_errors():
    """The errors a recipe reports as one line (what was wrong and what was
    expected) rather than as a traceback."""
    from zoo.data import DataError
    from zoo.saving import ModelFileError
    from zoo.training import NonFiniteLossError

    return (DataError, FileExistsError, ModelFileError, NonFiniteLossError)


def error_line(error):
    """The one line a recipe prints for `error`, or None for an error that
    is a bug (its traceback is the useful output). Recipe errors give
    their message; an error of TensorFlow Datasets (`--data tfds:...`:
    an unknown name, a failed download) its first line."""
    if isinstance(error, recipe_errors()):
        return str(error)
    if type(error).__module__.split(".")[0] == "tensorflow_datasets":
        first = (str(error).strip().splitlines() or [""])[0]
        return f"tfds: {type(error).__name__}: {first}"
    return None


def run_recipe(main):
    """Runs a recipe's `main()` as a script: a recipe error prints its
    line and exits with status `REFUSED`."""
    try:
        main()
    except Exception as error:
        line = error_line(error)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        sys.exit(REFUSED)
