"""What one script can do to the interpreter it shares with every later
request: freezing the top level, reassigning the module's own constants and
redefining its methods.  Neither may crash the worker or break the next
request (docs/security.md)."""

import pytest

# The worker process that answers (mruby has no Process.pid).
PID = 'File.open("/proc/self/stat") { |f| f.read }.split(" ")[0]'

ONE_CHILD = ("StartServers 1\nMinSpareServers 1\nMaxSpareServers 1\n"
             "ServerLimit 1\nMaxRequestWorkers 1\n")

PROBE = ('Server = get_server_class\n'
         'Server.rputs [' + PID + ', Server::HTTP_OK, server_name.size > 0, '
         'Object.const_defined?(:X), self.frozen?, Object.frozen?].inspect')


def one_worker(kind, apache, nginx, scripts):
    """One worker process, so that every request runs in the same
    interpreter; {"/path": code}."""
    files = {f"s{i}.rb": code for i, code in enumerate(scripts.values())}
    if kind == "apache":
        conf = "\n".join(f"<Location {loc}>\n    mrubyHandlerMiddle {{dir}}/s{i}.rb"
                         f"\n</Location>" for i, loc in enumerate(scripts))
        return apache(conf, mpm="prefork", mpm_conf=ONE_CHILD, files=files)
    locs = "\n".join(f"location {loc} {{ mruby_content_handler {{dir}}/s{i}.rb; }}"
                     for i, loc in enumerate(scripts))
    return nginx("server {\n    listen 127.0.0.1:{port};\n" + locs + "\n}",
                 workers=1, files=files)


@pytest.mark.parametrize("kind", ["apache", "nginx"])
@pytest.mark.parametrize("hostile", [
    "@a = 1; freeze",
    "X = 1; Object.freeze",
    "X = 1; Object.freeze; raise 'and fails'",
    "Kernel.freeze; get_server_class.freeze",
])
def test_a_frozen_top_level_does_not_kill_the_worker(kind, apache, nginx,
                                                       hostile):
    s = one_worker(kind, apache, nginx, {"/probe": PROBE, "/bad": hostile})
    first = s.get("/probe")
    assert first.status_code == 200, s.error_log()[-2000:]
    pid = first.text.split(",")[0]
    s.get("/bad")
    after = s.get("/probe")
    assert after.status_code == 200, s.error_log()[-2000:]
    assert after.text == first.text
    assert after.text.startswith(pid)
    assert "Aborted" not in s.error_log() and "signal" not in s.error_log()


# The second half of the table changes the API only through a method called
# by name: runs whose bytecode shows no constant or method definition skip
# the comparison of those tables' values (mrb_toplevel_scan.c), and these
# must still be put back.
@pytest.mark.parametrize("kind", ["apache", "nginx"])
@pytest.mark.parametrize("hostile", [
    "{cls} = 5",
    "Object.send(:remove_const, :{cls})",
    "{cls}::HTTP_OK = 1",
    "def {cls}.rputs(s); end",
    "module Kernel; def get_server_class; nil; end; end",
    "module Kernel; def server_name; ''; end; end",
    "Kernel.send(:define_method, :server_name) {{ '' }}",
    "{cls}.const_set(:HTTP_OK, 1)",
    "eval('{cls}::HTTP_OK = 1')",
    "Kernel.instance_eval {{ define_method(:server_name) {{ '' }} }}",
    "get_server_class.define_singleton_method(:rputs) {{ |s| }}",
    "Kernel.module_eval('def server_name; \"\"; end')",
])
def test_the_module_api_survives_a_script(kind, apache, nginx, hostile):
    cls = "Apache" if kind == "apache" else "Nginx"
    s = one_worker(kind, apache, nginx,
                   {"/probe": PROBE, "/bad": hostile.format(cls=cls)})
    first = s.get("/probe")
    assert first.status_code == 200, s.error_log()[-2000:]
    s.get("/bad")
    for _ in range(2):
        after = s.get("/probe")
        assert after.status_code == 200, s.error_log()[-2000:]
        assert after.text == first.text


# What one script leaves (an alias, a block in a Userdata) lets a later
# script that names nothing change the API: from then on every run of
# that interpreter compares the tables.
@pytest.mark.parametrize("kind", ["apache", "nginx"])
@pytest.mark.parametrize("leave,use", [
    ("class Module; alias cs const_set; end", "{cls}.cs(:HTTP_OK, 1)"),
    ("Userdata.new.f = -> {{ {cls}.const_set(:HTTP_OK, 1) }}",
     "Userdata.new.f.call"),
])
def test_code_a_script_left_cannot_change_the_api_later(kind, apache, nginx,
                                                         leave, use):
    cls = "Apache" if kind == "apache" else "Nginx"
    s = one_worker(kind, apache, nginx,
                   {"/probe": PROBE, "/leave": leave.format(cls=cls),
                    "/use": use.format(cls=cls)})
    first = s.get("/probe")
    assert first.status_code == 200, s.error_log()[-2000:]
    s.get("/leave")
    s.get("/use")
    after = s.get("/probe")
    assert after.status_code == 200, s.error_log()[-2000:]
    assert after.text == first.text
