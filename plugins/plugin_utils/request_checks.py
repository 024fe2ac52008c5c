"""The checks of a request's names and counts, one pass each, for the slurm_launch_request action
beside this file (a helper of it, not a plugin: no task or filter reads it by name)."""

import json
import re

WHOLE_NUMBER_RE = re.compile(r"[0-9]+")


def text_problems(values):
    """One sentence per value of ``values`` ([{key, value, hint?, list_ok?}]) that is not text
    (a list of text where list_ok), naming it as given and how to give it instead."""
    problems = []
    for item in values:
        value = item["value"]
        if isinstance(value, str) or (item.get("list_ok") and isinstance(value, (list, tuple))):
            continue
        key = item["key"]
        problems.append(f"{key}={json.dumps(value)} is not allowed: give it as text (-e {key}=VALUE, or in JSON "
                        f"-e '{{\"{key}\": \"VALUE\"}}'){item.get('hint', '')}.")
    return problems


def count_problems(counts):
    """One sentence per count of ``counts`` ([{key, value, min, max?, hint?}]) that is not a whole
    number from its min to its max, naming it and the bounds."""
    problems = []
    for item in counts:
        value, low, high = item["value"], int(item["min"]), item.get("max")
        text = str(value)
        if WHOLE_NUMBER_RE.fullmatch(text) and int(text) >= low and (high is None or int(text) <= int(high)):
            continue
        most = f" and at most {int(high)}" if high is not None else ""
        problems.append(f"{item['key']}={text} is not allowed: give a whole number, at least {low}{most}"
                        f"{item.get('hint', '')}.")
    return problems
