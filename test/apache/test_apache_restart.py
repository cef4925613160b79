"""Graceful restarts: a new configuration takes effect, and the parent,
which reads every configuration, does not grow with them."""

import pytest

import harness

CONF = """
mrubyPostConfigMiddleCode '$x = "p" * 1000'
mrubyChildInitMiddle {dir}/init.rb cache
<Location /r>
    mrubyHandlerMiddle {dir}/r.rb cache
    mrubyFixupsMiddleCode 'Apache::Request.new.headers_out["X-Gen"] = "GEN"'
</Location>
"""


def test_graceful_applies_new_configuration(apache):
    a = apache(CONF.replace("GEN", "1"), files={
        "init.rb": "$init = 1", "r.rb": 'Apache.rputs "cached one"'})
    r = a.get("/r")
    assert (r.text, r.headers["X-Gen"]) == ("cached one", "1")
    a.write("r.rb", 'Apache.rputs "cached two"')
    assert a.get("/r").text == "cached one"     # cached until a restart
    a.conf = CONF.replace("GEN", "2")
    a.graceful()
    r = a.get("/r")
    assert (r.text, r.headers["X-Gen"]) == ("cached two", "2")


def test_parent_does_not_grow_over_gracefuls(apache):
    if harness.ASAN:
        pytest.skip("AddressSanitizer holds freed memory in quarantine: "
                    "RSS says nothing about leaks there")
    a = apache(CONF.replace("GEN", "1"), mpm="prefork", files={
        "init.rb": "$init = 1", "r.rb": 'Apache.rputs "x"'})
    sizes = []
    for _ in range(6):
        a.graceful()
        assert a.get("/r").text == "x"
        sizes.append(harness.rss_kb(a.master_pid()))
    # the first restarts settle the heap; after that, nothing accumulates
    # (each configuration's compiler, interpreter and scripts are freed)
    assert sizes[-1] - sizes[1] < 150, sizes


PHASES_ADDED = """
mrubyPostReadRequestFirstCode 'Apache::Request.new.notes["prr"] = "1"'
<Location /r>
    mrubyAccessCheckerLastCode 'Apache.return Apache::HTTP_FORBIDDEN if Apache::Request.new.args == "deny"'
    mrubyFixupsFirstCode 'r = Apache::Request.new; r.headers_out["X-Fixups"] = r.notes["prr"].to_s'
    mrubyLogTransactionLastCode 'Apache.errlogger Apache::APLOG_NOTICE, "logged #{Apache::Request.new.args}"'
</Location>
"""


def test_restart_adds_and_drops_phases(apache):
    """Phases a configuration did not use start running after a graceful
    restart that adds them, and stop after one that takes them away."""
    handler = "<Location /r>\nmrubyHandlerMiddleCode 'Apache.rputs \"h\"'\n</Location>\n"
    a = apache(handler)
    r = a.get("/r?deny")
    assert (r.status_code, r.text, "X-Fixups" in r.headers) == (200, "h", False)
    for n, restart in enumerate((a.graceful, a.restart)):
        a.conf = handler + PHASES_ADDED
        restart()
        assert a.get("/r?deny").status_code == 403
        r = a.get(f"/r?ok{n}")
        assert (r.text, r.headers.get("X-Fixups")) == ("h", "1")
        a.wait_log(f"logged ok{n}")
        a.conf = handler
        restart()
        r = a.get("/r?deny")
        assert (r.status_code, "X-Fixups" in r.headers) == (200, False)
