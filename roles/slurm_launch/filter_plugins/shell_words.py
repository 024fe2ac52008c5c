"""shell_words: split an argument string as a POSIX shell would, so that
`-e 'script_args=--name "a b"'` reaches the training as two arguments, exactly."""

import shlex

from ansible.errors import AnsibleFilterError


def shell_words(value):
    if isinstance(value, (list, tuple)):
        return [str(item) for item in value]
    if not isinstance(value, str):
        raise AnsibleFilterError(f"script_args must be a list or a string, got {type(value).__name__}: {value!r}")
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise AnsibleFilterError(f"script_args {value!r} cannot be split into arguments: {exc} "
                                 "(close every quote, or pass a list)") from None


class FilterModule:
    def filters(self):
        return {"shell_words": shell_words}
