"""The integrity watch sees every change to a watched file, even one disguised, and nothing grading
does."""

import os
import sys
from pathlib import Path

import pytest

from brrr.grading import integrity
from brrr.grading.integrity import COURSE, ENVIRONMENT, UNREAD, Fingerprint, Root

pytestmark = (
    pytest.mark.device_independent
)  # the grader's file watching: the GPU check leaves it to CI


def test_a_file_restored_to_its_old_modification_time_still_shows_as_changed(tmp_path):
    module = tmp_path / "site-packages" / "torch_module.py"
    module.parent.mkdir()
    module.write_text("original = True\n")
    roots = [Root(tmp_path, ENVIRONMENT)]
    before = Fingerprint.take(roots)
    status = os.stat(module)
    module.write_text("original = 1!\n")  # same size
    os.utime(module, ns=(status.st_atime_ns, status.st_mtime_ns))  # and the old modification time
    changes = before.changes(Fingerprint.take(roots))
    assert changes.paths == [str(module)] and changes.environment == [str(module)]


def test_nothing_changed_means_no_change_and_new_or_removed_files_count(tmp_path):
    (tmp_path / "a.py").write_text("a")
    roots = [Root(tmp_path, COURSE)]
    before = Fingerprint.take(roots)
    assert not before.changes(Fingerprint.take(roots))
    (tmp_path / "sitecustomize.py").write_text("import os")
    (tmp_path / "a.py").unlink()
    changes = before.changes(Fingerprint.take(roots))
    assert changes.paths == [str(tmp_path / "a.py"), str(tmp_path / "sitecustomize.py")]
    assert changes.environment == []  # a course root: the submission is charged, grading goes on


def test_ipython_history_is_no_change_but_a_startup_file_is(tmp_path):
    profile = tmp_path / ".ipython" / "profile_default"
    (profile / "startup").mkdir(parents=True)
    roots = [Root(tmp_path / ".ipython", ENVIRONMENT)]
    excluded = [tmp_path / pattern for pattern in integrity.USER_EXCLUDED]
    before = Fingerprint.take(roots, excluded)
    (profile / "history.sqlite").write_text("an instructor's own IPython session")
    (profile / "history.sqlite-journal").write_text("")
    assert not before.changes(Fingerprint.take(roots, excluded))
    (profile / "startup" / "00-run-in-every-kernel.py").write_text("import os")
    assert before.changes(Fingerprint.take(roots, excluded)).paths == [
        str(profile / "startup" / "00-run-in-every-kernel.py")
    ]


def test_only_a_root_whose_walk_changed_is_read(tmp_path, monkeypatch):
    """A fingerprint keeps each root's walk as find printed it: an unchanged root (the environment,
    tens of thousands of files) is compared unread, and a changed one is read and compared entry by
    entry."""
    environment, course = tmp_path / "site-packages", tmp_path / "submissions"
    for folder in (environment, course):
        folder.mkdir()
        (folder / "a.py").write_text("a")
    roots = [Root(environment, ENVIRONMENT), Root(course, COURSE)]
    before = Fingerprint.take(roots)
    read = []
    entries = integrity._entries
    monkeypatch.setattr(integrity, "_entries", lambda walk: read.append(walk) or entries(walk))
    assert not before.changes(Fingerprint.take(roots)) and read == []
    (course / "b.py").write_text("b")
    assert before.changes(Fingerprint.take(roots)).paths == [str(course / "b.py")]
    assert len(read) == 2 and all(
        str(course).encode() in walk for walk in read
    )  # that root's two walks


def test_find_and_python_walk_the_same_entries(tmp_path):
    (tmp_path / "package" / "sub").mkdir(parents=True)
    (tmp_path / "package" / "sub" / "m.py").write_text("x = 1")
    (tmp_path / "package" / "link").symlink_to(tmp_path / "package" / "sub")
    (tmp_path / "skipped").mkdir()
    (tmp_path / "skipped" / "x").write_text("")
    excluded = [tmp_path / "skipped"]
    found = integrity._entries(integrity._walk(tmp_path, excluded))
    assert isinstance(integrity._walk(tmp_path, excluded), bytes)  # find's walk, read
    assert found == integrity._scan_in_python(tmp_path, excluded)
    assert str(tmp_path / "skipped" / "x") not in found


def test_the_watched_roots_cover_the_environment_and_the_course(tmp_path):
    checkout, submissions, out = (
        tmp_path / "course",
        tmp_path / "submissions",
        tmp_path / "course" / "grades",
    )
    roots, excluded = integrity.watched_roots(
        checkout=checkout, submissions=submissions, out=out, home=tmp_path / "home"
    )
    kinds = {root.path: root.kind for root in roots}
    assert kinds[submissions.resolve()] == COURSE and kinds[out.resolve()] == COURSE
    assert out.resolve() / "work" in excluded  # less the folders where submissions run
    # What grading reads from the checkout is course; the rest of it (the book's pages and outputs)
    # unread, scanned without the course roots inside it.
    for name in integrity.CHECKOUT_READ:
        assert kinds[checkout.resolve() / name] == COURSE, name
    assert kinds[checkout.resolve()] == UNREAD
    assert checkout.resolve() / "brrr" in excluded and out.resolve() in excluded
    import torch

    site_packages = Path(torch.__file__).resolve().parent.parent
    assert any(
        kind == ENVIRONMENT and (path == site_packages or path in site_packages.parents)
        for path, kind in kinds.items()
    )
    # Per-user configuration no grading process reads (each has private folders): watched, charged
    # to no one.
    for name in (".ipython", ".jupyter", ".config/matplotlib", ".pythonrc.py", ".bashrc", ".ssh"):
        assert kinds[tmp_path / "home" / name] == UNREAD, name
    import site

    user_site = (
        Path(site.getuserbase()) / "lib"
    )  # read where this Python reads the user's site-packages
    assert kinds[user_site] == (ENVIRONMENT if site.ENABLE_USER_SITE else UNREAD)


def test_a_site_packages_off_the_path_is_not_walked_and_the_one_on_it_is(tmp_path):
    """The base interpreter's site-packages, hidden by a virtual environment, sits inside the
    watched standard library: it is left out of the walk. A site-packages on sys.path never is."""
    import sysconfig

    roots, excluded = integrity.watched_roots(
        checkout=tmp_path / "course",
        submissions=tmp_path / "s",
        out=tmp_path / "out",
        home=tmp_path / "home",
    )
    base = Path(sysconfig.get_path("purelib", vars={"base": sys.base_prefix})).resolve()
    on_path = {Path(entry).resolve() for entry in sys.path if entry}
    assert (base in excluded) == (sys.prefix != sys.base_prefix and base not in on_path)
    assert not any(
        path in on_path for path in excluded
    )  # (a checkout holding the .venv would exclude it:
    # it is scanned as its own environment root then)
    import torch

    assert not any(Path(torch.__file__).resolve().is_relative_to(path) for path in excluded)


def test_the_instructors_caches_are_not_watched_but_the_rest_of_the_checkout_is(
    tmp_path, monkeypatch
):
    """A book build beside the gradebook fills the caches the Makefile names (grading reads
    private ones): no submission is charged for that, but a write next to them still counts."""
    from brrr.grading import gradebook

    checkout, submissions, out = tmp_path / "course", tmp_path / "submissions", tmp_path / "out"
    inductor = checkout / ".cache" / "inductor"
    for folder in (inductor, submissions, out, checkout / "brrr"):
        folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
    assert inductor in gradebook.instructor_caches()
    roots, excluded = integrity.watched_roots(
        checkout=checkout,
        submissions=submissions,
        out=out,
        home=tmp_path / "home",
        left_out=gradebook.instructor_caches(),
    )
    course = [root for root in roots if root.kind == COURSE]
    before = integrity.Fingerprint.take(course, excluded)
    (inductor / "kernel.so").write_text("compiled by the book build")
    assert not before.changes(integrity.Fingerprint.take(course, excluded))
    (checkout / "brrr" / "grader.py").write_text("tampered")
    changes = before.changes(integrity.Fingerprint.take(course, excluded))
    assert changes and str(checkout / "brrr" / "grader.py") in str(changes)


def test_a_page_writing_into_the_checkout_is_unread_and_a_write_to_brrr_is_course(tmp_path):
    """The regression of a fresh-clone run: the book's traces page wrote notebooks/traces/ in the
    checkout while an unsolved lab was graded beside it, and the lab was charged 'tampered'."""
    checkout, submissions, out = tmp_path / "course", tmp_path / "submissions", tmp_path / "out"
    for folder in (checkout / "brrr", checkout / "notebooks", submissions, out):
        folder.mkdir(parents=True)
    roots, excluded = integrity.watched_roots(
        checkout=checkout, submissions=submissions, out=out, home=tmp_path / "home"
    )
    before = integrity.Fingerprint.take(roots, excluded)
    (checkout / "notebooks" / "traces").mkdir()
    (checkout / "notebooks" / "traces" / "32-train-step-small-batch.json").write_text("{}")
    changes = before.changes(integrity.Fingerprint.take(roots, excluded))
    assert changes.paths and not changes.environment and not changes.charged
    (checkout / "brrr" / "grader.py").write_text("tampered")
    assert before.changes(integrity.Fingerprint.take(roots, excluded)).charged == [
        str(checkout / "brrr" / "grader.py")
    ]


def _watch_over(tmp_path):
    """A gradebook watch of one environment folder and one home's per-user configuration, and a
    submission."""
    from brrr.grading import gradebook
    from brrr.grading.watch import Watch

    environment, home = tmp_path / "site-packages", tmp_path / "home"
    environment.mkdir()
    (environment / "torch_module.py").write_text("original = True\n")
    roots = [Root(environment, ENVIRONMENT)] + [
        Root(home / name, UNREAD) for name in integrity.USER_CONFIGURATION
    ]
    excluded = [home / pattern for pattern in integrity.USER_EXCLUDED]
    return (
        Watch(roots, excluded),
        gradebook.Submission("alice", tmp_path / "alice.ipynb"),
        environment,
        home,
    )


def test_a_change_no_grading_process_reads_is_reported_and_charged_to_no_one(tmp_path):
    """The instructor's first IPython session writes ~/.ipython while a submission is graded (issue
    24): the submission is not tampered, grading goes on, and the report names the files."""
    watch, alice, _, home = _watch_over(tmp_path)
    watch.started(alice)
    startup = home / ".ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "README").write_text("a first IPython session's")
    watch.finished(alice)
    assert alice.tampered == [] and watch.stopped == ""
    report = watch.unread_report()
    assert str(startup / "README") in report and "(while alice ran)" in report, report
    assert "read by no grading process" in report and "no submission was charged" in report


def test_a_build_writing_many_files_beside_grading_does_not_hide_the_one_file_beside_them(tmp_path):
    """A fresh-clone CI run: the book build wrote 21 figures into the checkout while an IPython
    session wrote its start-up README, and a list cut at ten paths named only figures. A folder of
    many is folded into one entry with its count; the lone file is still named."""
    watch, alice, _, home = _watch_over(tmp_path)
    figures = home / ".ipython" / "figures"
    watch.started(alice)
    figures.mkdir(parents=True)
    for i in range(21):
        (figures / f"figure-{i:02}.png").write_bytes(b"png")
    startup = home / ".ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "README").write_text("a first IPython session's")
    watch.finished(alice)
    report = watch.unread_report()
    assert str(startup / "README") in report and f"{figures}/ (22 changed)" in report, report
    assert "figure-00.png" not in report and "more" not in report, report


def test_a_long_list_of_paths_is_folded_by_folder_and_then_cut():
    paths = [f"/course/notebooks/traces/t{i}.json" for i in range(30)] + ["/course/brrr/timing.py"]
    assert (
        integrity.summarize(paths)
        == "/course/brrr/timing.py, /course/notebooks/traces/ (30 changed)"
    )
    assert integrity.summarize(["/a", "/b"]) == "/a, /b"
    scattered = [f"/{i}/x/y" for i in range(12)]  # nothing to fold: cut, with the count left out
    assert integrity.summarize(scattered, 10).endswith("and 2 more")


def test_a_change_to_the_environment_is_still_charged_and_stops_grading(tmp_path):
    watch, alice, environment, home = _watch_over(tmp_path)
    watch.started(alice)
    (environment / "torch_module.py").write_text("original = False\n")
    home.mkdir()
    (home / ".bashrc").write_text("alias python=evil")
    watch.finished(alice)
    assert alice.tampered == [
        str(environment / "torch_module.py")
    ]  # the unread change is reported, not charged
    assert "alice" in watch.stopped and "torch_module.py" in watch.stopped
    assert str(home / ".bashrc") in watch.unread_report()
