"""Configuration: contexts and merging, the named handlers
(mruby-native-script, mruby-script), filters, the authn provider, shared
dictionaries."""

import hashlib
import os

import pytest

import harness

# Each level sets its own X-Level; the handler shows what it inherited.
LEVEL = ("mrubyFixupsMiddleCode 'Apache::Request.new.headers_out"
         "[\"X-Level\"] = \"{}\"'")

MERGE = f"""
{LEVEL.format("server")}
mrubyAccessCheckerMiddleCode 'Apache::Request.new.headers_out["X-Access"] = "server"'
<Directory {{docroot}}/d>
    {LEVEL.format("directory")}
</Directory>
<Directory {{docroot}}/d/sub>
    mrubyAccessCheckerMiddleCode 'Apache::Request.new.headers_out["X-Access"] = "sub"'
</Directory>
<Files "special.txt">
    {LEVEL.format("files")}
</Files>
<Location /d/loc>
    {LEVEL.format("location")}
</Location>
<VirtualHost 127.0.0.1:{{port}}>
    ServerName v.example
    DocumentRoot {{docroot}}
</VirtualHost>
<VirtualHost 127.0.0.1:{{port}}>
    ServerName w.example
    DocumentRoot {{docroot}}
    {LEVEL.format("vhost")}
</VirtualHost>
"""


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_nested_containers_inherit_and_override(apache, mpm):
    a = apache(MERGE, mpm=mpm, docs={
        "top.txt": "t", "d/in.txt": "i", "d/sub/deep.txt": "s",
        "d/special.txt": "f", "d/loc/x.txt": "l"})

    def levels(path, host="v.example"):
        r = a.get(path, headers={"Host": host})
        assert r.status_code == 200, path
        return r.headers.get("X-Level"), r.headers.get("X-Access")

    assert levels("/top.txt") == ("server", "server")
    assert levels("/d/in.txt") == ("directory", "server")
    # a deeper <Directory> overrides one phase and inherits the other
    assert levels("/d/sub/deep.txt") == ("directory", "sub")
    # <Files> and <Location> apply after <Directory>, and win
    assert levels("/d/special.txt") == ("files", "server")
    assert levels("/d/loc/x.txt") == ("location", "server")
    # a virtual host inherits the main server's scripts, or overrides them
    assert levels("/top.txt", "w.example") == ("vhost", "server")
    assert levels("/d/in.txt", "w.example") == ("directory", "server")


def test_location_overrides_each_order_separately(apache):
    a = apache("""
<Location /m>
    mrubyFixupsFirstCode 'r = Apache::Request.new; r.notes["o"] = r.notes["o"].to_s + "f"'
    mrubyFixupsLastCode 'r = Apache::Request.new; r.notes["o"] = r.notes["o"].to_s + "l"'
    mrubyHandlerMiddleCode 'Apache.rputs Apache::Request.new.notes["o"]'
</Location>
<Location /m/n>
    mrubyFixupsLastCode 'r = Apache::Request.new; r.notes["o"] = r.notes["o"].to_s + "L"'
</Location>
""")
    assert a.get("/m").text == "fl"
    assert a.get("/m/n").text == "fL"


def test_native_handler_in_directory_and_location(apache):
    a = apache("""
<Directory {docroot}/native>
    SetHandler mruby-native-script
    mrubyHandlerCode 'Apache.rputs "native dir " + Apache::Request.new.uri'
</Directory>
<Location /native/inner>
    mrubyHandlerCode 'Apache.rputs "native location"'
</Location>
""", docs={"native/a.html": "static"})
    assert a.get("/native/a.html").text == "native dir /native/a.html"
    assert a.get("/native/inner").text == "native location"


SCRIPT_HANDLER = """
AddHandler mruby-script .rb
<Directory {docroot}/app>
    mrubyHandlerEnable On
</Directory>
<Directory {docroot}/app/never>
    mrubyCodeCache never
</Directory>
"""


def test_handler_enable_runs_the_requested_file(apache):
    a = apache(SCRIPT_HANDLER, docs={
        "app/hello.rb": 'r = Apache::Request.new\n'
                        'Apache.rputs "hello from #{r.filename} #{r.path_info}"',
        "off/secret.rb": 'Apache.rputs "must not run"  # and not be shown',
        "app/broken.rb": "raise 'script failed'"})
    r = a.get("/app/hello.rb")
    assert r.text == f"hello from {a.docroot}/app/hello.rb "
    r = a.get("/app/hello.rb/extra/path")
    assert r.text == f"hello from {a.docroot}/app/hello.rb /extra/path"
    assert a.get("/app/missing.rb").status_code == 404
    # where it is not enabled, the script is neither run nor sent
    r = a.get("/off/secret.rb")
    assert r.status_code == 403
    assert "must not run" not in r.text
    a.wait_log("mrubyHandlerEnable is not On here")
    assert a.get("/app/broken.rb").status_code == 500
    a.wait_log("mruby-script: RuntimeError: script failed")


def test_handler_enable_scripts_follow_edits_and_policy(apache):
    # one child: every request below runs where the watch saw the edits
    a = apache(SCRIPT_HANDLER, mpm_conf=harness.ONE_CHILD["event"],
               docs={"app/v.rb": 'Apache.rputs "11"',
                     "app/never/v.rb": 'Apache.rputs "11"'})
    writers = [harness.UnnoticedWriter(os.path.join(a.docroot, rel))
               for rel in ("app/v.rb", "app/never/v.rb")]
    # the first runs put the file under watch
    for _ in range(3):
        assert a.get("/app/v.rb").text == "11"
    assert a.get("/app/never/v.rb").text == "11"
    # a change no file watch reports: only `never`, which reads the file on
    # every run, shows it; the cached script is served as compiled
    for w in writers:
        w.replace(b"11", b"22")
    assert a.get("/app/v.rb").text == "11"
    assert a.get("/app/never/v.rb").text == "22"
    for w in writers:
        w.close()
    # an edit the watch sees applies under both
    a.write_doc("app/v.rb", 'Apache.rputs "333"')
    a.write_doc("app/never/v.rb", 'Apache.rputs "333"')
    assert a.get_edited("/app/v.rb", "333").text == "333"
    assert a.get("/app/never/v.rb").text == "333"


def test_sethandler_mruby_script(apache):
    a = apache("""
<Location /run>
    SetHandler mruby-script
    mrubyHandlerEnable On
</Location>
""", docs={"run/page": 'Apache.rputs "ran page"'})
    assert a.get("/run/page").text == "ran page"


def test_output_filter(apache):
    a = apache("""
<Location /f/>
    mrubyOutputFilter {dir}/filter.rb
    SetOutputFilter mruby
</Location>
<Location /f/dyn>
    mrubyHandlerMiddleCode '3.times { |i| Apache.rputs "part#{i} " * 5000 }'
</Location>
""", files={"filter.rb": """\
f = Apache::Filter.new
body = f.body
f.body = "[" + body.upcase + "]"
f.insert_head "<<"
f.puts ">>"
Apache.rputs "#{body.size}"
Apache::Request.new.headers_out["X-Filtered"] = f.output?.to_s
"""}, docs={"f/static.txt": "static text"})
    r = a.get("/f/static.txt")
    assert r.text == "<<[STATIC TEXT]>>11"
    assert r.headers["Content-Length"] == str(len(r.text))
    assert r.headers["X-Filtered"] == "true"
    assert "ETag" not in r.headers
    r = a.get("/f/dyn")
    expected = "".join(f"part{i} " * 5000 for i in range(3))
    assert r.text == "<<[" + expected.upper() + "]>>" + str(len(expected))


def test_output_filter_that_reads_only(apache):
    a = apache("""
<Location /ro>
    mrubyOutputFilter {dir}/ro.rb
    SetOutputFilter mruby
</Location>
""", files={"ro.rb": 'f = Apache::Filter.new; Apache::Request.new.'
                      'headers_out["X-Len"] = f.length.to_s + " " + '
                      'f.empty?.to_s'},
        docs={"ro": "12345"})
    r = a.get("/ro")
    assert r.text == "12345"
    assert r.headers["X-Len"] == "5 false"
    assert "ETag" in r.headers


def test_output_filter_error(apache):
    a = apache("""
<Location /bad>
    mrubyOutputFilter {dir}/bad.rb
    SetOutputFilter mruby
</Location>
""", files={"bad.rb": "Apache::Filter.new.body = 1 + nil"},
        docs={"bad": "secret content"})
    r = a.get("/bad")
    assert r.status_code == 500
    assert "secret content" not in r.text
    a.wait_log("mrubyOutputFilter: TypeError")


def test_output_filter_without_script_passes(apache):
    a = apache("<Location /nf>\nSetOutputFilter mruby\n</Location>",
               docs={"nf": "unchanged"})
    assert a.get("/nf").text == "unchanged"
    a.wait_log("without mrubyOutputFilter here")


def test_input_filter(apache):
    a = apache("""
<Location /in>
    mrubyInputFilter {dir}/in.rb
    SetInputFilter mruby
    mrubyHandlerMiddleCode 'r = Apache::Request.new; Apache.rputs r.body + "|" + r.headers_in["Content-Length"].to_s'
</Location>
""", files={"in.rb": 'f = Apache::Filter.new; f.body = f.body.reverse + '
                     '"!"; Apache::Request.new.notes["dir"] = '
                     'f.output?.to_s'})
    r = a.post("/in", data=b"abcdef")
    assert r.text == "fedcba!|7"
    big = b"x" * 100000 + b"y"
    r = a.post("/in", data=big)
    assert r.content == b"y" + b"x" * 100000 + b"!|100002"
    r = a.post("/in", data=iter([b"12", b"34"]))
    assert r.text == "4321!|5"


def test_input_filter_script_cannot_read_r_body(apache):
    a = apache("""
<Location /in>
    mrubyInputFilter {dir}/in.rb
    SetInputFilter mruby
    mrubyHandlerMiddleCode 'Apache.rputs Apache::Request.new.body'
</Location>
""", files={"in.rb": "Apache::Request.new.body"})
    assert a.post("/in", data=b"abc").status_code == 500
    a.wait_log("r.body is the filter's input in an mrubyInputFilter script")


BASIC = """
<Location /secret>
    AuthType Basic
    AuthName "realm one"
    AuthBasicProvider mruby
    mrubyAuthnCheckPassword {dir}/check.rb
    Require valid-user
    mrubyHandlerMiddleCode 'r = Apache::Request.new; Apache.rputs "welcome #{r.user} to #{r.notes["realm"]}"'
</Location>
<Location /secret/error>
    mrubyAuthnCheckPassword {dir}/error.rb
</Location>
<Location /secret/default>
    mrubyAuthnCheckPassword {dir}/default.rb
</Location>
"""


def test_authn_check_password(apache):
    a = apache(BASIC, files={
        "check.rb": """\
a = Apache::AuthnProvider.new
Apache::Request.new.notes["realm"] = a.realm
if a.user == "ann" && a.password == "p:ss w\\u00f6rd"
  Apache.return Apache::AuthnProvider::AUTH_GRANTED
else
  Apache.return Apache::AuthnProvider::AUTH_DENIED
end
""",
        "error.rb": "raise 'authn broke'",
        "default.rb": "x = 1"})
    assert a.get("/secret").status_code == 401
    r = a.get("/secret", auth=("ann", "p:ss w\u00f6rd".encode()))
    assert r.status_code == 200
    # the provider saw the container's AuthName
    assert r.text == "welcome ann to realm one"
    assert a.get("/secret", auth=("ann", "nope")).status_code == 401
    assert a.get("/secret/error", auth=("ann", "x")).status_code == 500
    a.wait_log("mrubyAuthnCheckPassword: RuntimeError: authn broke")
    # a script that answers nothing denies
    assert a.get("/secret/default", auth=("ann", "p:ss w\u00f6rd".encode())
                 ).status_code == 401


def test_authn_get_realm_hash_for_digest(apache):
    realm, user, pw = "digest realm", "dee", "secret"
    ha1 = hashlib.md5(f"{user}:{realm}:{pw}".encode()).hexdigest()
    a = apache(f"""
<Location /digest>
    AuthType Digest
    AuthName "{realm}"
    AuthDigestProvider mruby
    mrubyAuthnGetRealmHash {{dir}}/hash.rb
    Require valid-user
    mrubyHandlerMiddleCode 'Apache.rputs "digest " + Apache::Request.new.user'
</Location>
""", modules=("auth_digest",), files={"hash.rb": f"""\
a = Apache::AuthnProvider.new
if a.user == "{user}" && a.realm == "{realm}"
  a.rethash = "{ha1}"
  Apache.return Apache::AuthnProvider::AUTH_USER_FOUND
end
"""})
    from requests.auth import HTTPDigestAuth
    assert a.get("/digest").status_code == 401
    r = a.get("/digest", auth=HTTPDigestAuth(user, pw))
    assert r.status_code == 200
    assert r.text == "digest dee"
    assert a.get("/digest", auth=HTTPDigestAuth(user, "wrong")
                 ).status_code == 401
    assert a.get("/digest", auth=HTTPDigestAuth("nobody", pw)
                 ).status_code == 401


def test_shared_dict(apache):
    a = apache("""
mrubySharedDict counters 1m
<Location /count>
    mrubyHandlerMiddle {dir}/count.rb
</Location>
""", mpm="prefork", files={"count.rb": (
        'd = Apache::SharedDict.new("counters")\n'
        'Apache.rputs "#{d.incr("hits", 1, init: 0)} #{' + harness.PID_RB
        + '}"')})
    answers = [r.text.split() for r in a.get_spread("/count", count=40)]
    # one counter, whichever child process answered
    assert sorted(int(n) for n, _ in answers) == list(range(1, 41))
    assert len({pid for _, pid in answers}) >= 2


def test_debian_snippets(apache):
    """What `make install` puts in mods-available: mruby.conf passes the
    config test as shipped, and mruby.load names Debian's module path."""
    a = apache("Include @REPO@/src/apache/mruby.conf", start=False)
    rc, out = a.configtest()
    assert rc == 0, out
    with open(os.path.join(harness.REPO, "src/apache/mruby.load")) as f:
        assert f.read() == ("LoadModule mruby_module "
                            "/usr/lib/apache2/modules/mod_mruby.so\n")


def test_same_slot_twice_in_one_container_keeps_the_last(apache):
    a = apache("""
<Location /twice>
    mrubyHandlerMiddleCode 'Apache.rputs "first"'
    mrubyHandlerMiddleCode 'Apache.rputs "second"'
</Location>
""")
    assert a.get("/twice").text == "second"


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def test_output_filter_limit_stops_reading_a_large_file(apache):
    """A static file comes to the filter as one brigade: past
    mrubyOutputFilterLimit the filter stops reading it there, rather than
    copying the whole file into memory and only then answering 500."""
    size = 48 << 20
    s = apache("""
<Location /f/>
    mrubyOutputFilterLimit 4096
    mrubyOutputFilter {dir}/f.rb
    SetOutputFilter mruby
</Location>
""", mpm="prefork", mpm_conf=harness.ONE_CHILD["prefork"],
        files={"f.rb": "f = Apache::Filter.new; f.body = f.body.upcase"},
        docs={"f/small": "x" * 100, "f/big": "x" * size})
    assert s.get("/f/small").text == "X" * 100
    (child,) = s.worker_pids()
    before = vm_hwm_kib(child)
    assert s.get("/f/big").status_code == 500
    grown = vm_hwm_kib(child) - before
    assert grown < (size >> 10) // 2, f"the child grew by {grown} KiB"
