"""How a scenario given in Python reaches the C++ core: as YAML text and the name its errors cite."""

import json
import numbers
import os

from . import _paceline


def _plain(value):
    # NumPy scalars and paths inside a scenario dict, as JSON understands them.
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"cannot put a {type(value).__name__} into a scenario: {value!r}")


def yaml_value(value):
    """One value as YAML text (JSON is YAML): 4 → '4', 'full' → '"full"', {...} → '{...}'.

    Characters stay UTF-8: JSON's escape of one outside the Basic Multilingual Plane is a
    surrogate pair, which YAML refuses.
    """
    return json.dumps(value, default=_plain, ensure_ascii=False)


def source(scenario):
    """(text, file) for a scenario given as a dict, a YAML string, or a path (str or PathLike).

    A dict is written as indented JSON named "<dict>", so an error's line points into that text;
    a string is a path when it is one line that names something on disk, ends in .yaml/.yml or
    has no colon (so cannot be a YAML mapping), else YAML text named "<string>".
    """
    if isinstance(scenario, dict):
        return _utf8(json.dumps(scenario, indent=2, default=_plain, ensure_ascii=False), "<dict>")
    if isinstance(scenario, os.PathLike):
        return _paceline.read_source(_utf8_path(os.fspath(scenario)))
    if isinstance(scenario, str):
        one_line = "\n" not in scenario.strip()
        stripped = scenario.strip()
        names_a_file = stripped.endswith((".yaml", ".yml")) or os.path.exists(stripped) or ":" not in stripped
        if one_line and stripped and names_a_file:
            return _paceline.read_source(_utf8_path(stripped))
        return _utf8(scenario, "<string>")
    raise TypeError(f"a scenario is a dict, a YAML string or a path, not {type(scenario).__name__}")


def _utf8_path(path):
    """`path` as str, or ValueError where it holds bytes that are not UTF-8 (lone surrogates)."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{path!r}: the path is not UTF-8 text; rename the file or its folder") from None
    return path


def _utf8(text, file):
    """(text, file), or ValueError at the first character of `text` that UTF-8 cannot hold (a lone
    surrogate, as os.fsdecode makes of bytes that are not UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        line = text.count("\n", 0, error.start) + 1
        column = error.start - (text.rfind("\n", 0, error.start) + 1) + 1
        raise ValueError(f"{file}:{line}:{column}: {text[error.start]!r} is a lone surrogate, "
                         "not a character; scenarios are UTF-8 text") from None
    return text, file


def whole_number(name, value, least, most, none_allowed=True):
    """`value` as an argument counting something: None (when allowed) or a whole number in
    [least, most]; a ValueError naming the argument otherwise (not pybind11's TypeError)."""
    if value is None and none_allowed:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not least <= value <= most:
        allowed = f"None or a whole number from {least} to {most}" if none_allowed else \
            f"a whole number from {least} to {most}"
        raise ValueError(f"{name} = {value!r}: expected {allowed}")
    return int(value)
