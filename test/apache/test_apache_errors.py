"""Errors as a user meets them: a raising script, syntax errors, missing
files, wrong directive arguments."""


import pytest

MPMS = ["event", "prefork"]


def mruby_errors(log):
    return [l for l in log.splitlines() if "[mruby:error]" in l]


@pytest.mark.parametrize("mpm", MPMS)
def test_raising_script_gives_500_and_one_log_line(apache, mpm):
    # info: the one-line error (at debug its frames get lines of their own)
    a = apache("""
<Location /raise>
    mrubyHandlerMiddle {dir}/raise.rb
</Location>
""", mpm=mpm, loglevel="info", files={"raise.rb": """\
def deeper
  raise ArgumentError, "secret detail 42"
end
deeper
"""})
    r = a.get("/raise")
    assert r.status_code == 500
    assert "secret detail" not in r.text
    assert "ArgumentError" not in r.text
    log = a.wait_log("secret detail 42")
    lines = mruby_errors(log)
    assert len(lines) == 1, lines
    line = lines[0]
    assert "mrubyHandlerMiddle: ArgumentError: secret detail 42" in line
    assert f"{a.dir}/raise.rb:2" in line
    assert "[client 127.0.0.1:" in line


@pytest.mark.parametrize("phase", ["PostReadRequest", "TranslateName",
                                   "AccessChecker", "Fixups", "Handler"])
def test_raise_in_any_phase_gives_500(apache, phase):
    a = apache(f"mruby{phase}MiddleCode 'raise \"broken {phase}\"'",
               docs={"x.txt": "x"})
    r = a.get("/x.txt")
    assert r.status_code == 500
    assert "broken" not in r.text
    a.wait_log(f"mruby{phase}Middle: RuntimeError: broken {phase}")


def test_raise_after_output_started_truncates(apache):
    """Once the response is on its way, the client must not take a cut
    body for a whole one: no last chunk, the connection closes."""
    a = apache("""
<Location /late>
    mrubyHandlerMiddleCode 'Apache.rputs "x" * 100000; raise "too late"'
</Location>
""")
    resp = a.raw(b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = resp.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"Transfer-Encoding: chunked" in head
    assert not body.endswith(b"0\r\n\r\n")
    assert b"too late" not in body
    a.wait_log("RuntimeError: too late")


def test_small_output_then_raise_is_a_clean_500(apache):
    """Output still buffered when the script raises is dropped."""
    a = apache("""
<Location /early>
    mrubyHandlerMiddleCode 'Apache.rputs "partial output"; raise "oops"'
</Location>
""")
    r = a.get("/early")
    assert r.status_code == 500
    assert "partial output" not in r.text


def test_error_in_log_phase_after_response(apache):
    a = apache("mrubyLogTransactionMiddleCode 'raise \"log phase\"'",
               docs={"x.txt": "fine"})
    r = a.get("/x.txt")
    assert r.status_code == 200 and r.text == "fine"
    a.wait_log("mrubyLogTransactionMiddle: RuntimeError: log phase")
    assert a.get("/x.txt").text == "fine"   # the connection still works


def test_syntax_error_in_cached_script_fails_configtest(apache):
    a = apache("mrubyHandlerMiddle {dir}/bad.rb cache", start=False,
               files={"bad.rb": "x = 1\nif x\n  Apache.rputs 'no end'\n"})
    rc, out = a.configtest()
    assert rc != 0
    assert "mrubyHandlerMiddle" in out
    assert f"{a.dir}/bad.rb:" in out
    assert "syntax error" in out


def test_syntax_error_in_inline_code_fails_configtest(apache):
    a = apache("<Location /x>\nmrubyHandlerMiddleCode 'Apache.rputs(('\n"
               "</Location>", start=False)
    rc, out = a.configtest()
    assert rc != 0
    assert "mrubyHandlerMiddleCode" in out
    assert f"{a.dir}/httpd.conf:" in out
    line = [n for n, l in enumerate(open(a.conf_path), 1)
            if "mrubyHandlerMiddleCode" in l][0]
    assert f"httpd.conf:{line}:" in out


def test_missing_cached_script_fails_configtest(apache):
    a = apache("mrubyHandlerMiddle {dir}/nope.rb cache", start=False)
    rc, out = a.configtest()
    assert rc != 0
    assert f"mrubyHandlerMiddle: {a.dir}/nope.rb: cannot open" in out


def test_code_cache_forever_compiles_at_config_time(apache):
    a = apache("mrubyCodeCache forever\nmrubyHandlerMiddle {dir}/bad.rb",
               start=False, files={"bad.rb": "def x("})
    rc, out = a.configtest()
    assert rc != 0
    assert f"{a.dir}/bad.rb:" in out


@pytest.mark.parametrize("mpm", MPMS)
def test_stat_script_missing_then_created(apache, mpm):
    a = apache("<Location /s>\nmrubyHandlerMiddle {dir}/later.rb\n"
               "</Location>", mpm=mpm)
    r = a.get("/s")
    assert r.status_code == 500
    a.wait_log(f"mrubyHandlerMiddle: {a.dir}/later.rb: cannot")
    a.write("later.rb", 'Apache.rputs "now here"')
    assert a.get_edited("/s", "now here").text == "now here"


@pytest.mark.parametrize("mpm", MPMS)
def test_stat_syntax_error_then_fixed(apache, mpm):
    """With mrubyStatOnError fail (by default the last version that
    compiled goes on: test/shared/test_stat_edits_live.py)."""
    a = apache("mrubyStatOnError fail\n"
               "<Location /s>\nmrubyHandlerMiddle {dir}/s.rb\n</Location>",
               mpm=mpm, files={"s.rb": "Apache.rputs 'v1'"})
    assert a.get("/s").text == "v1"
    # no pause: the watch sees a rewrite within the same mtime tick
    a.write("s.rb", "Apache.rputs('broken'\n\n")
    r = a.get_edited("/s", lambda r: r.status_code == 500)
    assert r.status_code == 500
    assert "broken" not in r.text
    a.wait_log(f"{a.dir}/s.rb:")
    assert "syntax error" in a.error_log()
    a.write("s.rb", "Apache.rputs 'fixed, v2'")
    assert a.get_edited("/s", "fixed, v2").text == "fixed, v2"


def test_configtest_ok(apache):
    a = apache("""
mrubyCodeCache stat
mrubyChildInitMiddle {dir}/ok.rb cache
<Location /x>
    mrubyHandlerMiddle {dir}/ok.rb
    mrubyHandlerMiddleCode 'Apache.rputs "x"'
</Location>
""", start=False, files={"ok.rb": "x = 1"})
    rc, out = a.configtest()
    assert rc == 0, out
    assert "Syntax OK" in out


@pytest.mark.parametrize("conf, expect", [
    ("mrubyHandlerMiddle {dir}/ok.rb forever",
     'mrubyHandlerMiddle: the second argument must be "cache", not "forever"'),
    ("mrubyHandlerMiddle",
     'mrubyHandlerMiddle takes 1-2 arguments, a Ruby script file and '
     'optionally "cache"'),
    ("mrubyHandlerMiddle a b c",
     "mrubyHandlerMiddle takes 1-2 arguments"),
    ("mrubyHandlerCode",
     "mrubyHandlerCode takes one argument"),
    ("mrubyCodeCache sometimes",
     'mrubyCodeCache: expected stat, forever or never, not "sometimes"'),
    ("mrubyHandlerEnable maybe",
     "mrubyHandlerEnable must be On or Off"),
    ("mrubySharedDict d lots",
     'mrubySharedDict: invalid size "lots"'),
    ("mrubyOutputFilter {dir}/ok.rb nocache",
     'mrubyOutputFilter: the second argument must be "cache"'),
])
def test_wrong_arguments_name_the_directive(apache, conf, expect):
    a = apache(conf, start=False, files={"ok.rb": "x = 1"})
    rc, out = a.configtest()
    assert rc != 0
    assert expect in out


@pytest.mark.parametrize("conf, expect", [
    ("<Location /x>\nmrubyPostReadRequestMiddle {dir}/ok.rb\n</Location>",
     "mrubyPostReadRequestMiddle cannot occur within directory context: "
     "Apache runs post_read_request before it knows the request's "
     "container, so use it at server or <VirtualHost> level"),
    ("<Directory {docroot}>\nmrubyQuickHandlerFirstCode 'x'\n</Directory>",
     "mrubyQuickHandlerFirstCode cannot occur within directory context"),
    ("<Location /x>\nmrubyMapToStorageLast {dir}/ok.rb\n</Location>",
     "Apache runs map_to_storage before it knows the request's container"),
    ("<Directory {docroot}>\nmrubyTranslateNameMiddle {dir}/ok.rb\n"
     "</Directory>",
     "or in <Location>"),
    ("<VirtualHost 127.0.0.1:{port}>\nmrubyChildInitMiddle {dir}/ok.rb\n"
     "</VirtualHost>",
     "mrubyChildInitMiddle cannot occur within <VirtualHost> section: "
     "post_config and child_init scripts run once per server process"),
    ("<Location /x>\nmrubyPostConfigFirstCode 'x'\n</Location>",
     "use it in the main server config"),
    ("<Location /x>\nmrubySharedDict d 1m\n</Location>",
     "declare it in the main server config"),
    ("<VirtualHost 127.0.0.1:{port}>\nmrubyCacheDir {dir}/c\n</VirtualHost>",
     "mrubyCacheDir cannot occur within <VirtualHost> section: the Cache "
     "directory belongs to the whole server: set it in the main server "
     "config"),
])
def test_wrong_context_says_why(apache, conf, expect):
    a = apache(conf, start=False, files={"ok.rb": "x = 1"})
    rc, out = a.configtest()
    assert rc != 0
    assert expect in out


def test_not_in_htaccess(apache):
    a = apache("<Directory {docroot}>\nAllowOverride All\n</Directory>",
               docs={".htaccess": "mrubyHandlerMiddleCode 'Apache.rputs 1'\n",
                     "x.txt": "x"})
    assert a.get("/x.txt").status_code == 500
    a.wait_log("mrubyHandlerMiddleCode not allowed here")


def test_native_handler_without_code(apache):
    a = apache("<Location /n>\nSetHandler mruby-native-script\n</Location>")
    assert a.get("/n").status_code == 500
    a.wait_log("handler mruby-native-script without mrubyHandlerCode")


def test_error_line_stays_one_line(apache):
    """Newlines in a message are escaped; a NUL byte does not cut off the
    rest of the line and its file:line; an exception whose message method
    itself raises is still named."""
    # info: the one-line error (at debug its frames get lines of their own)
    a = apache("""
<Location /nl>
    mrubyHandlerMiddleCode 'raise "first\\nsecond\\r\\nthird"'
</Location>
<Location /nul>
    mrubyHandlerMiddle {dir}/nul.rb
</Location>
<Location /msg>
    mrubyHandlerMiddle {dir}/msg.rb
</Location>
""", loglevel="info",
       files={"nul.rb": 'raise ArgumentError, "bad\\0byte, after NUL"\n',
           "msg.rb": """\
class OddError < StandardError
  def message
    raise "no message today"
  end
end
raise OddError
"""})
    assert a.get("/nl").status_code == 500
    assert a.get("/nul").status_code == 500
    assert a.get("/msg").status_code == 500
    log = a.wait_log("OddError")
    lines = mruby_errors(log)
    assert len(lines) == 3, lines
    nul = lines.pop(1)
    assert "ArgumentError: bad" in nul
    assert "byte, after NUL" in nul and f"{a.dir}/nul.rb:1" in nul
    # (Apache escapes the backslash of the core's "\\n" once more)
    assert "RuntimeError: first\\" in lines[0]
    assert "second\\" in lines[0] and "third (" in lines[0]
    assert "mrubyHandlerMiddle: OddError: " in lines[1]
    assert f"{a.dir}/msg.rb:6" in lines[1]
