#!/usr/bin/env python3
"""Write the files made from the launch's parameter table (plugins/plugin_utils/launch_params.py):
the slurm_launch role's defaults/main.yml and meta/argument_specs.yml, and the README's table.

    python scripts/launch_params.py          # write them
    python scripts/launch_params.py --check  # exit 1 naming each file that differs
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.hpc.slurm_train.plugins.plugin_utils import launch_params  # noqa: E402

ROLE = ROOT / "roles" / "slurm_launch"
README = ROOT / "README.md"


def with_readme_table(text):
    """The README's text with its table replaced by the table's; ValueError without its markers."""
    begin, end = text.index(launch_params.README_BEGIN), text.index(launch_params.README_END)
    return text[:begin] + launch_params.readme_table() + text[end + len(launch_params.README_END):]


def generated():
    """{path: the text it must have}."""
    return {ROLE / "defaults" / "main.yml": launch_params.defaults_yaml(),
            ROLE / "meta" / "argument_specs.yml": launch_params.argument_specs_yaml(),
            README: with_readme_table(README.read_text(encoding="utf-8"))}


def main(argv):
    stale = [path for path, text in generated().items() if path.read_text(encoding="utf-8") != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(ROOT)} differs from the parameter table: python scripts/launch_params.py")
        return 1 if stale else 0
    for path, text in generated().items():
        if path in stale:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
