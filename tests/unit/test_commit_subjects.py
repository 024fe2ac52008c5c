"""Commit subjects of at most 72 characters, the detail in the body (the project's rule, from the
commit that adopted it on: earlier history is kept as it is, not rewritten)."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The first commit after which every subject keeps the rule.
RULE_FROM = "6fdcddbf5109"
MOST = 72


def subjects():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout (an installed copy has no history)")
    known = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{RULE_FROM}^{{commit}}"], capture_output=True)
    if known.returncode != 0:
        pytest.skip(f"a shallow clone without {RULE_FROM}")
    listed = subprocess.run(["git", "-C", str(REPO), "log", "--format=%h %s", f"{RULE_FROM}..HEAD"],
                            capture_output=True, text=True, check=True).stdout
    return [line.split(" ", 1) for line in listed.splitlines()]


def test_every_commit_subject_since_the_rule_is_at_most_72_characters():
    long = [f"{commit} ({len(subject)}): {subject}" for commit, subject in subjects() if len(subject) > MOST]
    assert not long, "commit subjects over 72 characters (put the detail in the body):\n" + "\n".join(long)
