"""The grading code's record in an output folder (brrr.grading.course): written at the folder's
first run, compared at every later one, replaced only when the instructor accepts the change."""

import json

from brrr.grading import course

FILES = {
    "brrr/labs/fuse_it/checks.py": b"def grade(): ...\n",
    "brrr/labs/solutions/02-fuse-it.ipynb": b"{}",
}


def test_the_first_run_records_and_an_unchanged_course_grades(tmp_path):
    assert course.check(tmp_path, FILES) is None
    assert set(json.loads((tmp_path / course.RECORD).read_text())["files"]) == set(FILES)
    assert course.check(tmp_path, FILES) is None


def test_changed_grading_code_is_refused_until_accepted_and_then_recorded(tmp_path):
    course.check(tmp_path, FILES)
    edited = dict(FILES, **{"brrr/labs/fuse_it/checks.py": b"def grade(): return 'PASS'\n"})
    refused = course.check(tmp_path, edited)
    assert (
        refused is not None and "brrr/labs/fuse_it/checks.py" in refused and course.FLAG in refused
    )
    assert "solutions" not in refused  # only what changed is named
    assert (
        course.check(tmp_path, dict(FILES, **{"brrr/extra.py": b""})) is not None
    )  # an added file too
    assert course.check(tmp_path, edited, accept=True) is None
    assert course.check(tmp_path, edited) is None  # the accepted code is the record now
    assert course.check(tmp_path, FILES) is not None


def test_a_record_replaced_by_a_link_or_garbage_matches_nothing_and_is_not_written_through(
    tmp_path,
):
    course.check(tmp_path, FILES)
    target = tmp_path / "elsewhere.json"
    target.write_text("an instructor's file")
    (tmp_path / course.RECORD).unlink()
    (tmp_path / course.RECORD).symlink_to(target)
    assert course.check(tmp_path, FILES) is not None
    assert course.check(tmp_path, FILES, accept=True) is None
    assert (
        target.read_text() == "an instructor's file" and not (tmp_path / course.RECORD).is_symlink()
    )
    (tmp_path / course.RECORD).write_text("{ not json")
    assert "the record itself" in course.check(tmp_path, FILES)


def test_one_fingerprint_names_the_course_for_shards_and_changes_with_any_file():
    assert course.fingerprint(FILES) == course.fingerprint(
        dict(reversed(FILES.items()))
    )  # order-free
    for name in FILES:
        assert course.fingerprint(dict(FILES, **{name: FILES[name] + b" "})) != course.fingerprint(
            FILES
        )
    assert course.fingerprint(dict(FILES, **{"brrr/extra.py": b""})) != course.fingerprint(FILES)
    # the name is part of it: the same bytes moved to another file are another course
    (first, data), (second, other) = FILES.items()
    assert course.fingerprint({first: other, second: data}) != course.fingerprint(FILES)
