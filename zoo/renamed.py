"""Former names of keyword arguments: each still works for one release,
with a DeprecationWarning that names the current one."""

import warnings


def current_names(arguments, former_names, owner):
    """`arguments` (a dict of keyword arguments) with each former name in
    `former_names` ({former: current}) replaced by its current name, and a
    DeprecationWarning for each; a TypeError when both names are given.

    Example:
    ```python
    current_names({"layer_norm_epsilon": 1e-6}, {"layer_norm_epsilon": "norm_epsilon"}, "DecoderBlock")
    # {"norm_epsilon": 1e-6}, with a DeprecationWarning
    ```
    """
    arguments = dict(arguments)
    for former, current in former_names.items():
        if former not in arguments:
            continue
        if current in arguments:
            raise TypeError(f"{owner}: pass `{current}` only; `{former}` is its former name.")
        warnings.warn(
            f"{owner}'s `{former}` is now `{current}`; the former name will be removed in the next release.",
            DeprecationWarning,
            stacklevel=3,
        )
        arguments[current] = arguments.pop(former)
    return arguments
