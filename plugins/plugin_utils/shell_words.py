"""shell_words: split an argument string as a POSIX shell would, so that
`-e 'script_args=--name "a b"'` reaches the training as two arguments, exactly."""

import shlex
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def shell_words(value):
    if isinstance(value, (list, tuple)):
        # Numbers become their text; a nested list or mapping has no one way to be an argument.
        for item in value:
            if isinstance(item, (list, tuple, Mapping)) or item is None:
                raise AnsibleFilterError(f"script_args item {item!r} is not allowed: give each argument as text")
        return [str(item) for item in value]
    if not isinstance(value, str):
        kind = "a mapping" if isinstance(value, Mapping) else type(value).__name__
        raise AnsibleFilterError(f"script_args must be a list or a string, got {kind}: {value!r}")
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise AnsibleFilterError(f"script_args {value!r} cannot be split into arguments: {exc} "
                                 "(close every quote, or pass a list)") from None


class FilterModule:
    def filters(self):
        return {"shell_words": shell_words}
