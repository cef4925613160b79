"""Each phase hook on a real Apache: that it runs, in which order, and what
its return value does."""

import pytest

import harness

MPMS = ["event", "prefork"]


# A handler that shows the phases that ran before it, in the order they ran.
SHOW_ORDER = """\
r = Apache::Request.new
r.content_type = "text/plain"
Apache.rputs r.notes["order"].to_s.strip
"""


def record(phase):
    """A one-line script that appends phase to the request's "order" note."""
    return ('n = Apache::Request.new.notes; '
            f'n["order"] = "#{{n["order"]}} {phase}"')


@pytest.mark.parametrize("mpm", MPMS)
def test_request_phases_run_in_order(apache, mpm):
    """post_read_request, translate_name, map_to_storage, access_checker,
    fixups, insert_filter and handler scripts all run for one request."""
    a = apache(f"""
mrubyPostReadRequestMiddleCode '{record("prr")}'
mrubyTranslateNameMiddleCode '{record("trans")}'
mrubyMapToStorageMiddleCode '{record("m2s")}'
<Location /p/>
    mrubyInsertFilterMiddleCode '{record("insert")}'
    mrubyFixupsMiddleCode '{record("fixups")}'
    mrubyAccessCheckerMiddleCode '{record("access")}'
    mrubyHandlerMiddle {{dir}}/show.rb
</Location>
""", mpm=mpm, files={"show.rb": SHOW_ORDER})
    r = a.get("/p/x")
    assert r.status_code == 200
    assert r.text == "prr trans m2s access fixups insert"


def test_first_middle_last_order(apache):
    """Within a phase: First, then Middle, then Last."""
    def add(ch):
        return ('r = Apache::Request.new; '
                f'r.notes["o"] = r.notes["o"].to_s + "{ch}"')
    a = apache(f"""
<Location /o>
    mrubyFixupsLastCode '{add("L")}'
    mrubyFixupsFirstCode '{add("F")}'
    mrubyFixupsMiddleCode '{add("M")}'
    mrubyHandlerMiddleCode 'Apache.rputs Apache::Request.new.notes["o"]'
</Location>
""")
    assert a.get("/o").text == "FML"


def test_handler_first_declines_to_middle_and_last(apache):
    a = apache("""
<Location /h>
    mrubyHandlerFirstCode 'Apache.return Apache::DECLINED'
    mrubyHandlerMiddleCode 'Apache.rputs "middle"'
    mrubyHandlerLastCode 'Apache.rputs "last"'
</Location>
<Location /h/last>
    mrubyHandlerMiddleCode 'Apache.return Apache::DECLINED'
</Location>
<Location /h/first>
    mrubyHandlerFirstCode 'Apache.rputs "first"'
</Location>
""")
    assert a.get("/h").text == "middle"
    assert a.get("/h/last").text == "last"
    assert a.get("/h/first").text == "first"


def test_handler_defaults_to_ok(apache):
    """A handler script that returns nothing has produced the response."""
    a = apache("""
<Location /empty>
    mrubyHandlerMiddleCode 'x = 1'
</Location>
<Location /status>
    mrubyHandlerMiddleCode 'r = Apache::Request.new; r.status = 201; Apache.rputs "made"'
</Location>
""")
    r = a.get("/empty")
    assert r.status_code == 200
    assert r.text == ""
    r = a.get("/status")
    assert r.status_code == 201
    assert r.text == "made"


def test_handler_only_where_configured(apache):
    """mrubyHandler* handles the requests of its container, and only
    those: elsewhere Apache serves as usual."""
    a = apache("""
<Directory {docroot}/app>
    mrubyHandlerMiddleCode 'Apache.rputs "app: " + Apache::Request.new.uri'
</Directory>
""", docs={"app/page.html": "static app page", "other.html": "other"})
    assert a.get("/app/page.html").text == "app: /app/page.html"
    assert a.get("/app/missing").text == "app: /app/missing"
    assert a.get("/other.html").text == "other"


def test_handler_return_code(apache):
    a = apache("""
<Location /gone>
    mrubyHandlerMiddleCode 'Apache.return Apache::HTTP_GONE'
</Location>
""")
    r = a.get("/gone")
    assert r.status_code == 410
    assert "Gone" in r.text


@pytest.mark.parametrize("mpm", MPMS)
def test_access_checker_return_values(apache, mpm):
    a = apache("""
<Location /busy>
    mrubyAccessCheckerMiddleCode 'Apache.return Apache::HTTP_SERVICE_UNAVAILABLE'
</Location>
<Location /forbidden>
    mrubyAccessCheckerMiddleCode 'Apache.return Apache::HTTP_FORBIDDEN'
</Location>
<Location /open>
    mrubyAccessCheckerMiddleCode 'x = 1'
</Location>
<Location /ok>
    mrubyAccessCheckerMiddleCode 'Apache.return Apache::OK'
</Location>
""", mpm=mpm, docs={"busy": "b", "forbidden": "f", "open": "o", "ok": "k"})
    assert a.get("/busy").status_code == 503
    assert a.get("/forbidden").status_code == 403
    assert a.get("/open").text == "o"
    assert a.get("/ok").text == "k"


def test_access_checker_done_ends_the_request(apache):
    """DONE: the script has answered; nothing else runs."""
    a = apache("""
<Location /done>
    mrubyAccessCheckerMiddleCode 'r = Apache::Request.new; r.content_type = "text/plain"; Apache.rputs "answered early"; Apache.return Apache::DONE'
    mrubyHandlerMiddleCode 'Apache.rputs "handler"'
</Location>
""")
    r = a.get("/done")
    assert r.status_code == 200
    assert r.text == "answered early"


def test_post_read_request(apache):
    a = apache("""
mrubyPostReadRequestMiddleCode 'r = Apache::Request.new; Apache.return Apache::HTTP_FORBIDDEN if r.uri == "/deny"; r.headers_in["X-Seen"] = "prr"'
<Location /show>
    mrubyHandlerMiddleCode 'Apache.rputs Apache::Headers_in.new["X-Seen"].to_s'
</Location>
""")
    assert a.get("/show").text == "prr"
    assert a.get("/deny").status_code == 403


def test_quick_handler(apache):
    """OK from the quick handler serves the request there and then; the
    default (DECLINED) lets Apache go on."""
    a = apache("""
mrubyQuickHandlerMiddleCode 'r = Apache::Request.new; if r.uri == "/quick" then Apache.rputs "quick"; Apache.return Apache::OK end'
<Location /quick>
    mrubyHandlerMiddleCode 'Apache.rputs "slow path"'
</Location>
""", docs={"static.txt": "static"})
    assert a.get("/quick").text == "quick"
    assert a.get("/static.txt").text == "static"


def test_translate_name(apache, tmpdir_www):
    """OK with r.filename set maps the URI; DECLINED leaves it to Apache."""
    a = apache("""
<Location /mapped/>
    mrubyTranslateNameMiddleCode 'r = Apache::Request.new; r.filename = r.document_root + "/real.txt"; Apache.return Apache::OK'
</Location>
<Location /declined/>
    mrubyTranslateNameMiddleCode 'Apache::Request.new.filename = "/nonexistent"'
</Location>
""", docs={"real.txt": "real", "declined/x.txt": "x"})
    assert a.get("/mapped/whatever").text == "real"
    assert a.get("/declined/x.txt").text == "x"


def test_map_to_storage(apache):
    """OK skips Apache's file-system walk; an HTTP status ends there."""
    a = apache("""
mrubyMapToStorageMiddleCode 'r = Apache::Request.new; Apache.return Apache::HTTP_GONE if r.uri == "/old"; Apache.return Apache::OK if r.uri.start_with?("/virtual")'
<Location /virtual>
    mrubyHandlerMiddleCode 'Apache.rputs "virtual, finfo exist? " + Apache::Request.new.finfo.exist?.to_s'
</Location>
""", docs={"plain.txt": "plain"})
    assert a.get("/old").status_code == 410
    assert a.get("/virtual").text == "virtual, finfo exist? false"
    assert a.get("/plain.txt").text == "plain"


AUTH = """
<Location /auth>
    AuthType Token
    AuthName "test"
    Require valid-user
    mrubyCheckUserIdMiddle {dir}/authn.rb
    mrubyHandlerMiddleCode 'Apache.rputs "user=" + Apache::Request.new.user'
</Location>
<Location /auth/admin>
    mrubyAuthCheckerMiddle {dir}/authz.rb
</Location>
"""

# check_user_id: a token header names the user.
AUTHN = """\
r = Apache::Request.new
token = r.headers_in["X-Token"]
if token && token.start_with?("user:")
  r.user = token["user:".size..-1]
  r.ap_auth_type = "Token"
  Apache.return Apache::OK
else
  r.err_headers_out["WWW-Authenticate"] = "Token"
  Apache.return Apache::HTTP_UNAUTHORIZED
end
"""

# auth_checker: only admin may pass.
AUTHZ = """\
r = Apache::Request.new
Apache.return(r.user == "admin" ? Apache::OK : Apache::HTTP_FORBIDDEN)
"""


@pytest.mark.parametrize("mpm", MPMS)
def test_check_user_id_and_auth_checker(apache, mpm):
    a = apache(AUTH, mpm=mpm, files={"authn.rb": AUTHN, "authz.rb": AUTHZ})
    r = a.get("/auth")
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == "Token"
    r = a.get("/auth", headers={"X-Token": "user:alice"})
    assert r.status_code == 200
    assert r.text == "user=alice"
    r = a.get("/auth/admin", headers={"X-Token": "user:alice"})
    assert r.status_code == 403
    r = a.get("/auth/admin", headers={"X-Token": "user:admin"})
    assert r.status_code == 200
    assert r.text == "user=admin"


def test_auth_checker_default_leaves_it_to_apache(apache):
    """DECLINED from auth_checker: mod_authz_core's Require decides."""
    a = apache("""
<Location /authz>
    AuthType Token
    AuthName "test"
    Require user bob
    mrubyCheckUserIdMiddleCode 'r = Apache::Request.new; r.user = r.headers_in["X-User"]; Apache.return Apache::OK'
    mrubyAuthCheckerMiddleCode 'x = 1'
    mrubyHandlerMiddleCode 'Apache.rputs "in"'
</Location>
""")
    assert a.get("/authz", headers={"X-User": "bob"}).text == "in"
    assert a.get("/authz", headers={"X-User": "eve"}).status_code == 401


def test_fixups(apache):
    a = apache("""
<Location /f>
    mrubyFixupsMiddleCode 'r = Apache::Request.new; r.headers_out["X-Fixed"] = "yes"; Apache.return Apache::HTTP_FORBIDDEN if r.args == "deny"'
</Location>
""", docs={"f": "file"})
    r = a.get("/f")
    assert r.text == "file"
    assert r.headers["X-Fixed"] == "yes"
    assert a.get("/f?deny").status_code == 403


@pytest.mark.parametrize("mpm", MPMS)
def test_log_transaction(apache, mpm):
    a = apache("""
<Location /logged>
    mrubyLogTransactionMiddleCode 'r = Apache::Request.new; Apache.errlogger Apache::APLOG_NOTICE, "logged #{r.uri} #{r.status}"'
</Location>
""", mpm=mpm, docs={"logged": "x"})
    assert a.get("/logged").text == "x"
    a.wait_log("logged /logged 200")


@pytest.mark.parametrize("mpm", MPMS)
def test_post_config_runs_once_per_start_and_restart(apache, mpm):
    a = apache("mrubyPostConfigMiddleCode "
               "'Apache.errlogger Apache::APLOG_NOTICE, \"post_config ran in #{Apache::Scoreboard.new.pid}\"'",
               mpm=mpm)
    log = a.wait_log("post_config ran")
    assert log.count("post_config ran") == 1
    assert f"post_config ran in {a.master_pid()}" in log
    a.graceful()
    log = a.wait_log("post_config ran")
    assert log.count("post_config ran") == 2


@pytest.mark.parametrize("mpm", ["event", "prefork"])
def test_post_config_state_in_the_children(apache, mpm):
    """A prefork child serves with its copy of the parent's post_config
    interpreter; each interpreter of an event child runs the post_config
    scripts again: the requests of both see what post_config defined."""
    a = apache("""
mrubyPostConfigMiddleCode '$from_post_config = "parent"'
<Location /g>
    mrubyHandlerMiddleCode 'Apache.rputs $from_post_config.inspect'
</Location>
""", mpm=mpm)
    assert a.get("/g").text == '"parent"'


@pytest.mark.parametrize("mpm", MPMS)
def test_child_init_state_is_shared_on_purpose(apache, mpm):
    """What child_init scripts define stays for every request of the
    worker: a global, a constant, a method."""
    a = apache("""
mrubyChildInitMiddle {dir}/init.rb
<Location /c>
    mrubyHandlerMiddleCode '$counter += 1; Apache.rputs "#{GREETING} #{greet} #{$counter}"'
</Location>
""", mpm=mpm, mpm_conf=harness.ONE_CHILD[mpm], files={"init.rb": """\
$counter = 0
GREETING = "hello"
def greet
  "from child_init"
end
Apache.errlogger Apache::APLOG_NOTICE, "child_init ran in #{Apache::Scoreboard.new.pid}"
"""})
    # one child, one interpreter: the counter goes on from request to
    # request
    assert [a.get("/c").text for _ in range(3)] == [
        f"hello from child_init {n}" for n in (1, 2, 3)]
    a.wait_log("child_init ran")


def test_child_init_runs_at_child_start_under_prefork(apache):
    a = apache("mrubyChildInitMiddleCode 'Apache.errlogger Apache::APLOG_NOTICE, \"child_init in #{Apache::Scoreboard.new.pid}\"'",
               mpm="prefork")
    for pid in a.worker_pids():
        a.wait_log(f"child_init in {pid}")


def test_startup_script_errors_are_logged(apache):
    a = apache("""
mrubyPostConfigMiddleCode 'raise "post_config broke"'
mrubyChildInitMiddleCode 'raise ArgumentError, "child_init broke"'
<Location /still>
    mrubyHandlerMiddleCode 'Apache.rputs "still serving"'
</Location>
""")
    log = a.wait_log("post_config broke")
    assert "mrubyPostConfigMiddle: RuntimeError: post_config broke" in log
    assert a.get("/still").text == "still serving"
    a.wait_log("mrubyChildInitMiddle: ArgumentError: child_init broke")


def test_invalid_return_value_is_an_error(apache):
    a = apache("""
<Location /weird>
    mrubyAccessCheckerMiddleCode 'Apache.return 42'
</Location>
""", docs={"weird": "x"})
    r = a.get("/weird")
    assert r.status_code == 500
    a.wait_log("returned 42, which is neither an Apache code")


def test_return_does_not_stop_the_script_and_error_document_applies(apache):
    """Apache.return sets the answer and the script goes on (a header set
    after it still arrives); the returned status gets the ErrorDocument."""
    a = apache("""
ErrorDocument 403 "custom denied page"
<Location /deny>
    mrubyAccessCheckerMiddleCode 'Apache.return Apache::HTTP_FORBIDDEN; Apache::Request.new.err_headers_out["X-After-Return"] = "ran"'
</Location>
""", docs={"deny": "the page"})
    r = a.get("/deny")
    assert r.status_code == 403
    assert r.text == "custom denied page"
    assert r.headers["X-After-Return"] == "ran"
