"""pytest imports every test file by its basename (rootdir conftest, no packages), so two test files
of one name under tests/unit and tests/integration stop the whole suite at collection: a run of
one directory alone never sees it, this test does."""

from collections import Counter

from conftest import PROJECT_ROOT


def test_no_two_test_files_share_a_basename():
    names = Counter(path.name for path in (PROJECT_ROOT / "tests").rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
