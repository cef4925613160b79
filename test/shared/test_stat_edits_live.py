"""Editing a live `stat` script never serves an error.

Clients send requests without pause while the script is changed the ways
operators change files: `cp` over it, a new file renamed over it, `sed -i`,
a writer that pauses half way, a release link switched, a syntax error
saved and then fixed, the file removed and put back.  What a user must see:
no response but 200, no body but a whole version of the script (it prints
its version on its last line, so a half-written file that compiled would
answer with an empty body), and the new version soon after the writer is
done.  The same on nginx and on Apache's event MPM.
"""

import os
import re
import shutil
import subprocess
import threading
import time

import pytest
import requests

CLASSES = {"apache": "Apache", "nginx": "Nginx"}
CONF = {
    "apache": "<Location /e>\nmrubyHandlerMiddle {dir}/{name}\n</Location>",
    "nginx": "location /e { mruby_content_handler {dir}/{name}; }",
}
CLIENTS = 4
# From the writer's close to the new version answering (an Apache child
# also waits for its watcher thread), on this loaded
# 2-core machine; docs/architecture.md has the figures measured
# (target: 50 ms).
SEEN_WITHIN = 5.0
VERSION = re.compile(r"v\d+")
WARM_UP = 20


def script(cls, version, lines=400, broken_at=None):
    """A 400-line script whose last line prints its version."""
    body = ["a = []"] + [f"a << {i} * 2" for i in range(lines - 2)]
    if broken_at is not None:
        body[broken_at - 1] = "a << )"
    body.append(f'{cls}.rputs "{version}"')
    return "\n".join(body) + "\n"


class Load:
    """Clients requesting /e in a loop; every status and body is kept."""

    def __init__(self, server):
        self.url = server.url("/e")
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.count = 0
        self.bad = []
        self.threads = [threading.Thread(target=self.run, daemon=True)
                        for _ in range(CLIENTS)]

    def run(self):
        session = requests.Session()
        while not self.stop.is_set():
            try:
                r = session.get(self.url, timeout=10)
                status, text = r.status_code, r.text
            except requests.RequestException as e:
                status, text = "error", str(e)
            with self.lock:
                self.count += 1
                if status != 200 or not VERSION.fullmatch(text):
                    self.bad.append((round(time.monotonic(), 3), status,
                                     text[:200]))

    def __enter__(self):
        """Starts the clients, and runs the script in every server process
        (requests on new connections: a client's own keep-alive connection
        stays with one process).  A process that never ran the script has
        only the version compiled at startup, and its first run must take
        the file as it finds it, even half written."""
        for t in self.threads:
            t.start()
        for _ in range(WARM_UP):
            requests.get(self.url, timeout=10)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(20)


def start(request, which, name="e.rb", files=None):
    factory = request.getfixturevalue(which)
    conf = CONF[which].replace("{name}", name)
    return factory(conf, files=files or {})


def seen_after(server, version, start):
    """Seconds from start until /e answers version (a probe of its own)."""
    session = requests.Session()
    while True:
        r = session.get(server.url("/e"), timeout=10)
        if r.text == version:
            return time.monotonic() - start
        assert time.monotonic() - start < SEEN_WITHIN, (version, r.text)


def report(name, which, load, delays):
    delays = sorted(delays)
    print(f"\n{which} {name}: {load.count} requests, {len(load.bad)} bad; "
          f"writer done -> new version: median "
          f"{delays[len(delays) // 2] * 1000:.1f} ms, max "
          f"{delays[-1] * 1000:.1f} ms")


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_200_rewrites_in_place_with_cp(request, which):
    cls = CLASSES[which]
    s = start(request, which, files={"e.rb": script(cls, "v0")})
    src = os.path.join(s.dir, "new.rb")
    delays = []
    with Load(s) as load:
        for v in range(1, 201):
            with open(src, "w") as f:
                f.write(script(cls, f"v{v}"))
            subprocess.run(["cp", src, os.path.join(s.dir, "e.rb")],
                           check=True)
            delays.append(seen_after(s, f"v{v}", time.monotonic()))
            time.sleep(0.02)
    report("cp", which, load, delays)
    assert load.bad == []
    assert load.count > 200


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_200_renames_over_the_file(request, which):
    cls = CLASSES[which]
    s = start(request, which, files={"e.rb": script(cls, "v0")})
    delays = []
    with Load(s) as load:
        for v in range(1, 201):
            tmp = s.write(f"e.rb.{v}", script(cls, f"v{v}"))
            os.rename(tmp, os.path.join(s.dir, "e.rb"))
            delays.append(seen_after(s, f"v{v}", time.monotonic()))
            time.sleep(0.02)
    report("rename", which, load, delays)
    assert load.bad == []


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_sed_in_place(request, which):
    cls = CLASSES[which]
    s = start(request, which, files={"e.rb": script(cls, "v0")})
    path = os.path.join(s.dir, "e.rb")
    delays = []
    with Load(s) as load:
        for v in range(1, 21):
            subprocess.run(["sed", "-i", f's/"v{v - 1}"/"v{v}"/', path],
                           check=True)
            delays.append(seen_after(s, f"v{v}", time.monotonic()))
    report("sed -i", which, load, delays)
    assert load.bad == []


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_writer_that_pauses_half_way(request, which):
    """Half the file, 200 ms, the rest: the old version answers until the
    writer closes the file, then the new one."""
    cls = CLASSES[which]
    s = start(request, which, files={"e.rb": script(cls, "v0")})
    path = os.path.join(s.dir, "e.rb")
    delays = []
    with Load(s) as load:
        for v in range(1, 6):
            text = script(cls, f"v{v}").encode()
            with open(path, "wb") as f:
                f.write(text[:len(text) // 2])
                f.flush()
                time.sleep(0.2)
                f.write(text[len(text) // 2:])
            delays.append(seen_after(s, f"v{v}", time.monotonic()))
    report("half-write", which, load, delays)
    assert load.bad == []
    assert "previous version is still served" not in s.error_log()


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_release_link_switch(request, which):
    cls = CLASSES[which]
    s = start(request, which, name="current/e.rb")
    for r in range(6):
        s.write(f"releases/{r}/e.rb", script(cls, f"v{r}"))
    os.symlink("releases/0", os.path.join(s.dir, "current"))
    assert s.get("/e").text == "v0"
    delays = []
    with Load(s) as load:
        for r in range(1, 6):
            tmp = os.path.join(s.dir, "current.new")
            os.symlink(f"releases/{r}", tmp)
            os.rename(tmp, os.path.join(s.dir, "current"))
            delays.append(seen_after(s, f"v{r}", time.monotonic()))
            time.sleep(0.05)
    report("link switch", which, load, delays)
    assert load.bad == []


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_syntax_error_saved_then_fixed(request, which):
    """The old version answers throughout; one log line per process that
    names the file and line and says the previous version is served; the
    fix then answers."""
    cls = CLASSES[which]
    s = start(request, which, files={"e.rb": script(cls, "v0")})
    with Load(s) as load:
        s.write("e.rb", script(cls, "v1", broken_at=200))
        time.sleep(1.0)
        assert s.get("/e").text == "v0"
        s.write("e.rb", script(cls, "v2"))
        delay = seen_after(s, "v2", time.monotonic())
        time.sleep(0.2)
    report("syntax error, fixed", which, load, [delay])
    assert load.bad == []
    line = re.compile(re.escape(s.dir) + r"/e\.rb:200: .*; the previous "
                      r"version is still served")
    lines = line.findall(s.error_log())
    # one per process that ran the script (nginx: one worker; Apache's
    # event MPM here: two children)
    assert 1 <= len(lines) <= (1 if which == "nginx" else 2), lines


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_removed_and_restored(request, which):
    cls = CLASSES[which]
    s = start(request, which, files={"e.rb": script(cls, "v0")})
    path = os.path.join(s.dir, "e.rb")
    with Load(s) as load:
        shutil.move(path, path + ".away")
        time.sleep(0.5)
        assert s.get("/e").text == "v0"
        s.write("e.rb", script(cls, "v1"))
        delay = seen_after(s, "v1", time.monotonic())
        time.sleep(0.2)
    report("removed, restored", which, load, [delay])
    assert load.bad == []
    assert "e.rb: cannot stat: No such file or directory; the previous " \
           "version is still served" in s.error_log()


STATUS = """
list = {cls}.stale_scripts
{cls}.rputs list.map { |s| [s["path"], s["serving"], s["reason"]].join("|") }.join("\\n")
"""


@pytest.mark.parametrize("which", ["apache", "nginx"])
def test_stale_scripts_says_what_runs_an_older_version(request, which):
    """Server.stale_scripts: the script whose new version does not compile,
    the version it serves and why; nothing once it is fixed."""
    cls = CLASSES[which]
    factory = request.getfixturevalue(which)
    if which == "nginx":
        conf = ("location /e { mruby_content_handler {dir}/e.rb; }\n"
                "location /status { mruby_content_handler {dir}/status.rb; }")
    else:
        conf = ("<Location /e>\nmrubyHandlerMiddle {dir}/e.rb\n</Location>\n"
                "<Location /status>\nmrubyHandlerMiddle {dir}/status.rb\n"
                "</Location>")
    s = factory(conf, files={"e.rb": script(cls, "v0"),
                             "status.rb": STATUS.replace("{cls}", cls)},
                **({"mpm": "prefork"} if which == "apache" else {}))
    for _ in range(4):
        assert s.get("/e").text == "v0"
    assert s.get("/status").text == ""
    s.write("e.rb", script(cls, "v1", broken_at=7))
    # a process that ran the broken version says so (on Apache, once its
    # watcher thread has read the edit: the rounds go on until then)
    expect = f"{s.dir}/e.rb|previous|{s.dir}/e.rb:7: syntax error"
    deadline = time.monotonic() + 10
    while True:
        for _ in range(4):
            assert s.get("/e").text == "v0"
        texts = {s.get("/status").text for _ in range(8)}
        if any(t.startswith(expect) for t in texts) \
                or not s.edit_window or time.monotonic() > deadline:
            break
    assert any(t.startswith(expect) for t in texts), texts
    s.write("e.rb", script(cls, "v2"))
    for _ in range(4):
        assert s.get_edited("/e", "v2").text == "v2"
    deadline = time.monotonic() + 10
    while True:
        texts = {s.get("/status").text for _ in range(8)}
        if texts <= {""} or not s.edit_window \
                or time.monotonic() > deadline:
            break
        s.get("/e")
    assert texts <= {""}, texts
