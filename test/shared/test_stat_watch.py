"""`stat` scripts without a stat() per request: each worker watches the
script's path (inotify) and re-checks the file only after a change.  What a
user must still see: every edit, however it is made, on the next request.
The same checks on Apache and nginx.  Apache runs prefork here: its few
children each serve many of the requests, so each one reaches the state
where it trusts the watch (an event MPM thread stats on its first run)."""

import os
import time

import pytest

import harness

SERVERS = {
    "apache": ("<Location /e>\nmrubyHandlerMiddle {path}\n</Location>",
               "Apache"),
    "nginx": ("location /e { mruby_content_handler {path}; }", "Nginx"),
}

# mrubyStatOnError / mruby_stat_on_error: what a failing change does
ON_ERROR = {"apache": "mrubyStatOnError {v}\n",
            "nginx": "mruby_stat_on_error {v};\n"}


def start(request, which, path, files, on_error=None):
    conf, cls = SERVERS[which]
    factory = request.getfixturevalue(which)
    opts = {"mpm": "prefork"} if which == "apache" else {"workers": 2}
    if on_error:
        conf = ON_ERROR[which].replace("{v}", on_error) + conf
    s = factory(conf.replace("{path}", path), files=files, **opts)
    return s, cls


def code(cls, text):
    """A script that answers text, and says in X-Pid which process ran
    it."""
    return (f'{cls}::Request.new.headers_out["X-Pid"] = {harness.PID_RB}\n'
            f'{cls}.rputs "{text}"')


def fetch_many(s, expect, n=16, timeout=10.0):
    """Enough requests, each on a connection of its own, that several
    worker processes have checked the file, watched it and started
    trusting the watch (two at least answered, or the claim that every
    worker sees an edit would rest on one); returns the answers.  Where
    the server has an edit window (Apache's watcher threads), the rounds
    go on until every answer is expect or timeout ends."""
    deadline = time.monotonic() + timeout
    while True:
        texts, pids = set(), set()
        for _ in range(5):  # which process accepts is the kernel's choice
            responses = s.get_spread("/e", count=n)
            texts |= {r.text for r in responses}
            pids |= {r.headers.get("X-Pid") for r in responses}
            if len(pids) >= 2:
                break
        assert len(pids) >= 2, pids
        if texts == {expect} or not s.edit_window \
                or time.monotonic() > deadline:
            return texts


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_every_edit_is_seen_by_the_next_request(request, which):
    """Edits in place, each followed at once by one request (on Apache:
    requests until the watcher thread has read the edit)."""
    s, cls = start(request, which, "{dir}/e.rb", {})
    s.write("e.rb", code(cls, "v0"))
    assert fetch_many(s, "v0") == {"v0"}
    for v in range(1, 31):
        s.write("e.rb", code(cls, f"v{v}"))
        assert s.get_edited("/e", f"v{v}").text == f"v{v}"
    assert fetch_many(s, "v30") == {"v30"}


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_file_renamed_over_is_seen(request, which):
    """Editors write a new file and rename it over the old one: the old
    inode never changes."""
    s, cls = start(request, which, "{dir}/e.rb", {})
    s.write("e.rb", code(cls, "old"))
    assert fetch_many(s, "old") == {"old"}
    for v in range(1, 6):
        tmp = s.write(f"e.rb.{v}", code(cls, f"renamed {v}"))
        os.rename(tmp, os.path.join(s.dir, "e.rb"))
        assert s.get_edited("/e", f"renamed {v}").text == f"renamed {v}"
        assert fetch_many(s, f"renamed {v}") == {f"renamed {v}"}


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_release_link_switch_is_seen(request, which):
    """Deployments switch a `current` link to a new release directory; the
    script's own path never changes, nor does the old file."""
    s, cls = start(request, which, "{dir}/current/e.rb", {})
    for rel in ("r1", "r2", "r3"):
        s.write(f"{rel}/e.rb", code(cls, f"release {rel}"))
        os.chmod(os.path.join(s.dir, rel), 0o755)
    os.symlink("r1", os.path.join(s.dir, "current"))
    assert fetch_many(s, "release r1") == {"release r1"}

    for rel in ("r2", "r3"):
        # the atomic switch: a new link renamed over the old one
        tmp = os.path.join(s.dir, "current.new")
        os.symlink(rel, tmp)
        os.rename(tmp, os.path.join(s.dir, "current"))
        assert s.get_edited("/e", f"release {rel}").text == \
            f"release {rel}"
        assert fetch_many(s, f"release {rel}") == {f"release {rel}"}

    # the release in use is watched now, and the old ones no longer matter
    s.write("r3/e.rb", code(cls, "hotfix"))
    assert s.get_edited("/e", "hotfix").text == "hotfix"
    s.write("r1/e.rb", code(cls, "old release"))
    assert fetch_many(s, "hotfix") == {"hotfix"}


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_file_through_relative_link_is_seen(request, which):
    """The script is a link (with ..) to a file elsewhere: edits of the
    target and a new target are both seen."""
    s, cls = start(request, which, "{dir}/app/e.rb", {})
    s.write("shared/a.rb", code(cls, "a"))
    s.write("shared/b.rb", code(cls, "b"))
    os.makedirs(os.path.join(s.dir, "app"), mode=0o755)
    os.symlink("../shared/a.rb", os.path.join(s.dir, "app", "e.rb"))
    assert fetch_many(s, "a") == {"a"}
    s.write("shared/a.rb", code(cls, "a, edited"))
    assert s.get_edited("/e", "a, edited").text == "a, edited"
    os.unlink(os.path.join(s.dir, "app", "e.rb"))
    os.symlink("../shared/b.rb", os.path.join(s.dir, "app", "e.rb"))
    assert s.get_edited("/e", "b").text == "b"
    assert fetch_many(s, "b") == {"b"}


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_removed_then_restored_script(request, which):
    """A script removed: the version that ran goes on running, with one
    log line from each worker process that found it gone; put back, the
    new one runs."""
    s, cls = start(request, which, "{dir}/e.rb", {})
    s.write("e.rb", code(cls, "here"))
    assert fetch_many(s, "here") == {"here"}
    os.unlink(os.path.join(s.dir, "e.rb"))
    assert fetch_many(s, "here") == {"here"}
    line = ("e.rb: cannot stat: No such file or directory; the previous "
            "version is still served")
    assert 1 <= s.wait_log(line).count(line) <= len(s.worker_pids())
    s.write("e.rb", code(cls, "back"))
    assert s.get_edited("/e", "back").text == "back"
    assert fetch_many(s, "back") == {"back"}


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_removed_script_fails_when_asked_to(request, which):
    """With mrubyStatOnError / mruby_stat_on_error fail, a script removed
    gives 500 with a log line; put back, it runs."""
    s, cls = start(request, which, "{dir}/e.rb", {}, on_error="fail")
    s.write("e.rb", code(cls, "here"))
    assert fetch_many(s, "here") == {"here"}
    os.unlink(os.path.join(s.dir, "e.rb"))
    assert s.get_edited("/e", lambda r: r.status_code == 500).status_code \
        == 500
    assert "e.rb: cannot stat: No such file or directory" in s.error_log()
    s.write("e.rb", code(cls, "back"))
    assert s.get_edited("/e", "back").text == "back"
    assert fetch_many(s, "back") == {"back"}


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_switch_inside_a_link_target_is_seen(request, which):
    """current -> site/live, and site itself a link that is switched: the
    change is in a directory only the link's target leads to."""
    s, cls = start(request, which, "{dir}/current/e.rb", {})
    for side in ("blue", "green"):
        s.write(f"{side}/live/e.rb", code(cls, side))
    os.symlink("blue", os.path.join(s.dir, "site"))
    os.symlink("site/live", os.path.join(s.dir, "current"))
    assert fetch_many(s, "blue") == {"blue"}
    tmp = os.path.join(s.dir, "site.new")
    os.symlink("green", tmp)
    os.rename(tmp, os.path.join(s.dir, "site"))
    assert s.get_edited("/e", "green").text == "green"
    assert fetch_many(s, "green") == {"green"}


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_unwatchable_path_is_stat_ed_and_says_so(request, which):
    """A chain of more symbolic links than the watch follows: the worker
    says once (at info) that it stats the file on every run, and edits are
    still seen, once two looks 20 ms apart find the file unchanged (the
    writer is done), with no other answer meanwhile than the old one."""
    s, cls = start(request, which, "{dir}/l0/e.rb", {})
    s.write("real/e.rb", code(cls, "one"))
    os.symlink("real", os.path.join(s.dir, "l9"))
    for i in range(9):
        os.symlink(f"l{i + 1}", os.path.join(s.dir, f"l{i}"))
    assert fetch_many(s, "one") == {"one"}
    log = s.wait_log("not watched for changes (more than 8 symbolic "
                     "links): stat() on every run")
    assert f"{s.dir}/l0/e.rb: not watched" in log
    for v in range(1, 6):
        s.write("real/e.rb", code(cls, f"edit {v}"))
        seen, t0 = [], time.monotonic()
        while not seen or seen[-1] != f"edit {v}":
            r = s.get("/e")
            assert r.status_code == 200
            seen.append(r.text)
            assert time.monotonic() - t0 < 5.0, seen
        assert set(seen) <= {f"edit {v - 1}" if v > 1 else "one",
                             f"edit {v}"}


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_writer_keeping_the_file_open_counts_after_the_quiet_interval(
        request, which):
    """A new version written but not closed: the old one answers until
    500 ms pass without a write (nginx: a timer of its event loop; Apache:
    the next run after the interval), then the new one."""
    s, cls = start(request, which, "{dir}/e.rb", {})
    s.write("e.rb", code(cls, "old"))
    assert fetch_many(s, "old") == {"old"}
    with open(os.path.join(s.dir, "e.rb"), "w") as f:
        f.write(code(cls, "new, still open"))
        f.flush()
        # a few quick requests on one connection: fetch_many's rounds on
        # new connections can outlast the 500 ms on a loaded machine
        assert {s.get("/e").text for _ in range(4)} == {"old"}
        time.sleep(0.8)
        assert fetch_many(s, "new, still open") == {"new, still open"}


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_startup_says_what_the_watch_needs(request, which):
    """One line at startup: the stat scripts of the configuration, the
    inotify watches they need per process, against the kernel's limits."""
    s, cls = start(request, which, "{dir}/e.rb", {"e.rb": code(cls_of(which),
                                                               "x")})
    depth = len([p for p in s.dir.split("/") if p]) + 1
    line = (f"1 stat scripts need {depth + 1} inotify watches in each of ")
    log = s.wait_log(line)
    assert "fs.inotify.max_user_watches" in log


def cls_of(which):
    return SERVERS[which][1]
