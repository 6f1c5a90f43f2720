"""The one error type for bad input data.

Every `DataError` names where the problem is (the file, and the line number
where one applies) and what was expected, so that a user can open the file
and fix it without reading this package.
"""


class DataError(ValueError):
    """Bad input data: a missing, empty or malformed file, or bad token ids.

    A subclass of `ValueError`, so callers that already catch `ValueError`
    keep working. The message has the form
    `"{file}, line {n}: expected ..., got ..."` where a line applies.
    """


def at(path, line=None):
    """Formats where a problem is, for the start of a `DataError` message.

    Args:
        path: the file (a `str` or `pathlib.Path`).
        line: int or None. The 1-based line number, where one applies.

    Returns:
        `"{path}"` or `"{path}, line {line}"`.
    """
    return f"{path}" if line is None else f"{path}, line {line}"
