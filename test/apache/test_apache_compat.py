"""The original mod_mruby's API rows that were missing or different here
(../shared/spec/compat/mod_mruby.md), each as a script written for the
original would use it."""

import os
import re


def test_bare_mruby_handler_runs(apache):
    a = apache("<Location /h>\n    mrubyHandler {dir}/h.rb\n</Location>",
               files={"h.rb": 'Apache.rputs "bare handler"'})
    assert a.get("/h").text == "bare handler"


REQUEST = r'''
r = Apache::Request.new
r.vlist_validator = "v1"
Apache.rputs [r.header_only, r.chunked, r.assbackwards, r.read_body,
              r.read_chunked, r.used_path_info, r.eos_sent, r.no_cache,
              r.no_local_copy, r.vlist_validator, r.main?, r.sub_request?,
              r.next?, r.external_redirect?,
              r.headers_in.user_agent, r.headers_in.referer].inspect
r.error_log Apache::APLOG_ERR, 42
'''


def test_request_flags_and_shortcuts(apache):
    a = apache("<Location /r>\n    mrubyHandlerMiddle {dir}/r.rb\n"
                "</Location>", files={"r.rb": REQUEST})
    r = a.get("/r", headers={"User-Agent": "ua/1", "Referer": "http://x/"})
    assert r.text == ('[0, 0, 0, 0, 0, 2, 0, 0, 0, "v1", false, false, '
                      'false, false, "ua/1", "http://x/"]')
    assert a.head("/r").status_code == 200
    a.wait_log("] 42")


def test_main_is_true_in_a_subrequest_as_in_the_original(apache):
    """main? answers whether the request has a main request: true in an
    SSI include, false for the page itself."""
    a = apache("""
<Location /inc>
    mrubyHandlerMiddleCode 'r = Apache::Request.new; Apache.rputs "inc main?=#{r.main?}"'
</Location>
<Directory {docroot}>
    Options +Includes
    AddOutputFilter INCLUDES .shtml
</Directory>
""", modules=["include"], docs={
        "page.shtml": '[<!--#include virtual="/inc" -->]'})
    assert a.get("/page.shtml").text == "[inc main?=true]"


def test_run_handler_runs_the_handler_now(apache):
    a = apache("""
<Location /now>
    mrubyFixupsMiddleCode 'Apache.errlogger Apache::APLOG_NOTICE, "rc=#{Apache::Request.new.run_handler}"; Apache.return Apache::DONE'
</Location>
""", docs={"now": "the file\n"})
    r = a.get("/now")
    assert (r.status_code, r.text) == (200, "the file\n")
    a.wait_log("rc=0")


SERVER = r'''
s = Apache::Server.new
c = Apache::Connection.new
f = Apache::Request.new.finfo
Apache.rputs [s.timeout, s.keep_alive_timeout, s.pathlen,
              s.redirect_server_scheme, s.redirect_server_port,
              c.local_host, c.remote_logname, c.data_in_input_filters,
              f.permission.is_a?(Integer), f.csize >= f.size].inspect
s.timeout = 60_000_000
begin
  s.timeout = 0
rescue ArgumentError => e
  Apache.rputs " #{e.message}"
end
'''


def test_server_connection_finfo(apache):
    a = apache("<Location /s>\n    mrubyHandlerMiddle {dir}/s.rb\n"
               "</Location>", files={"s.rb": SERVER}, docs={"s": "x"})
    assert a.get("/s").text == (
        '[30000000, 5000000, 0, nil, 0, nil, nil, 0, true, true] '
        'timeout must be positive (microseconds)')


CLASS_METHODS = r'''
sb = Apache::Scoreboard.new
me = sb.access_counter(sb.pid)
Apache.syslog Apache::LOG_NOTICE, "from a test"
Apache.rputs [Apache.get_tid > 0, Apache.count_arena >= 0, me >= 1,
              sb.access_counter(1), sb.cpu_load.is_a?(Float),
              Apache::Load.new.getloadavg.size].inspect
'''


def test_class_methods_scoreboard_load(apache):
    a = apache("<Location /m>\n    mrubyHandlerMiddle {dir}/m.rb\n"
               "</Location>", files={"m.rb": CLASS_METHODS})
    a.get("/m")   # a first request counted for this child
    assert a.get("/m").text == "[true, true, true, -1, true, 3]"


def test_filter_owner_error_and_compat_names(apache):
    a = apache("""
<Location /f/>
    mrubyOutputFilter {dir}/f.rb
    SetOutputFilter mruby
</Location>
""", files={"f.rb": """\
f = Apache::Filter.new
if Apache::Request.new.uri.end_with?("fail")
  f.error_create 503
else
  owner = [f.uid, f.gid]
  f.destroy
  f.body = 7
  f.insert_tail owner.inspect
  f.insert_eos
end
"""}, docs={"f/page": "x", "f/fail": "x"})
    st = os.stat(os.path.join(a.docroot, "f", "page"))
    assert a.get("/f/page").text == f"7[{st.st_uid}, {st.st_gid}]"
    r = a.get("/f/fail")
    assert r.status_code == 503
    assert "<title>503 Service Unavailable</title>" in r.text


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
