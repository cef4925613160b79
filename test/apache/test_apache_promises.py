"""mod_mruby: what docs/apache.md promises about return values, merging,
Apache::Filter's compatibility names, tables, and the worker MPM, each
checked as a client sees it."""


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


def test_same_slot_twice_in_one_container_keeps_the_last(apache):
    a = apache("""
<Location /twice>
    mrubyHandlerMiddleCode 'Apache.rputs "first"'
    mrubyHandlerMiddleCode 'Apache.rputs "second"'
</Location>
""")
    assert a.get("/twice").text == "second"


def test_filter_compatibility_names(apache):
    """flatten = body, insert_tail = puts, size = length, cleanup empties."""
    a = apache("""
<Location /f>
    mrubyOutputFilter {dir}/f.rb
    SetOutputFilter mruby
</Location>
""", files={"f.rb": """\
f = Apache::Filter.new
whole = f.flatten
n = f.size
f.cleanup
empty = f.empty?
f.insert_tail "#{whole.reverse} #{n} #{empty}"
"""}, docs={"f": "abcdef"})
    r = a.get("/f")
    assert r.text == "fedcba 6 true"


def test_table_assign_nil_deletes(apache):
    a = apache("""
<Location /t>
    mrubyHandlerMiddleCode 'r = Apache::Request.new; t = r.headers_out; t["X-Gone"] = "1"; t["X-Kept"] = "1"; t["X-Gone"] = nil; Apache.rputs t["X-Gone"].inspect'
</Location>
""")
    r = a.get("/t")
    assert r.text == "nil"
    assert "X-Gone" not in r.headers
    assert r.headers["X-Kept"] == "1"


def test_worker_mpm_serves_and_follows_edits(apache):
    """The worker MPM (threads, no event loop): scripts run, state stays
    apart, an edit applies."""
    a = apache("""
<Location /w>
    mrubyHandlerMiddle {dir}/w.rb
</Location>
""", mpm="worker", files={"w.rb": 'Apache.rputs "one #{$seen.inspect}"; '
                                   '$seen = 1'})
    assert {r.text for r in a.get_spread("/w", count=12)} == {"one nil"}
    a.write("w.rb", 'Apache.rputs "two"')
    assert {r.text for r in a.get_spread_edited("/w", "two", count=12)} \
        == {"two"}
