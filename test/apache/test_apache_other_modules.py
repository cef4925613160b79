"""mod_mruby next to Apache's other modules (DirectoryIndex, SSI, mod_php,
ErrorDocument): each test is a statement of the "When scripts run" section
of docs/apache.md."""

import glob

import pytest

# the suite's PHP: 8.2 on Debian 12, 8.4 on Debian 13 and testing
PHP_SO = sorted(glob.glob("/usr/lib/apache2/modules/libphp*.so"))


@pytest.fixture
def php(monkeypatch):
    """mod_php without Debian's conf.d (the tests need no extension, and
    opcache's RTLD_DEEPBIND dlopen cannot load under AddressSanitizer)."""
    assert PHP_SO, "libapache2-mod-php (install-deps.sh)"
    monkeypatch.setenv("PHP_INI_SCAN_DIR", "")
    return ("php", PHP_SO[-1])


def trace(what):
    """Ruby: one error-log line per run, tagged by the client's X-T."""
    return ('r = Apache::Request.new; Apache.errlogger Apache::APLOG_NOTICE, '
            f'"trace #{{r.headers_in["X-T"]}} {what} #{{r.uri}} '
            'sub=#{r.sub_request?}"')


def traces(a, tag, expect_last):
    log = a.wait_log(f"trace {tag} {expect_last}")
    return [line.split(f"trace {tag} ", 1)[1].split(",")[0]
            for line in log.splitlines() if f"trace {tag} " in line]


def test_access_checkers_in_index_lookups_and_ssi(apache):
    """Apache runs access checkers again for a subrequest (DirectoryIndex
    lookup, SSI include) whose configuration differs from its parent's;
    with the same configuration it takes the parent's result."""
    a = apache(f"""
<Directory {{docroot}}>
    Options +Includes
    AddOutputFilter INCLUDES .shtml
    mrubyAccessCheckerMiddleCode '{trace("access")}'
</Directory>
<Directory {{docroot}}/other>
    mrubyAccessCheckerMiddleCode '{trace("other-access")}'
</Directory>
<Directory {{docroot}}/sub>
    DirectoryIndex own.html
</Directory>
<Files own.html>
    mrubyAccessCheckerMiddleCode '{trace("files-access")}'
</Files>
""", modules=["include"], docs={
        "index.html": "home\n",
        "sub/own.html": "own\n",
        "p.shtml": 'x<!--#include virtual="/inc.txt" -->'
                   '<!--#include virtual="/other/inc.txt" -->y\n',
        "inc.txt": "INC", "other/inc.txt": "OTHER"})
    assert a.get("/", headers={"X-T": "dir"}).text == "home\n"
    assert a.get("/sub/", headers={"X-T": "own"}).text == "own\n"
    assert a.get("/p.shtml", headers={"X-T": "ssi"}).text == "xINCOTHERy\n"
    assert traces(a, "ssi", "other-access /other/inc.txt sub=true") == [
        "access /p.shtml sub=false", "other-access /other/inc.txt sub=true"]
    assert traces(a, "own", "files-access /sub/own.html sub=true") == [
        "access /sub/ sub=false", "files-access /sub/own.html sub=true"]
    assert traces(a, "dir", "access / sub=false") == ["access / sub=false"]


def test_fixups_header_with_directory_index_and_main_guard(apache):
    """mod_dir's lookup is a subrequest whose headers Apache merges into the
    response: a fixups script's header comes out twice, once with a sub_request? guard."""
    set_acao = 'Apache::Request.new.headers_out["Access-Control-Allow-Origin"] = "*"'
    a = apache(f"""
<Directory {{docroot}}/twice>
    mrubyFixupsMiddleCode '{set_acao}'
</Directory>
<Directory {{docroot}}/once>
    mrubyFixupsMiddleCode 'r = Apache::Request.new; {set_acao.replace("Apache::Request.new", "r")} unless r.sub_request?'
</Directory>
""", docs={"twice/index.html": "t\n", "once/index.html": "o\n"})
    r = a.get("/twice/")
    assert r.raw.headers.getlist("Access-Control-Allow-Origin") == ["*", "*"]
    r = a.get("/once/")
    assert r.raw.headers.getlist("Access-Control-Allow-Origin") == ["*"]


def test_output_filter_sees_the_expanded_ssi_page(apache):
    a = apache("""
<Directory {docroot}>
    Options +Includes
    AddOutputFilter INCLUDES .shtml
    SetOutputFilter mruby
    mrubyOutputFilter {dir}/f.rb
</Directory>
""", modules=["include"], files={
        "f.rb": 'f = Apache::Filter.new; '
                'f.body = f.body.sub("RAW", f.body.include?("<!--#") ? '
                '"unexpanded" : "expanded")'},
        docs={"p.shtml": 'RAW <!--#echo var="DOCUMENT_URI" -->\n'})
    assert a.get("/p.shtml").text == "expanded /p.shtml\n"


def test_php_handler_comes_before_a_middle_handler(apache, php):
    a = apache("""
<FilesMatch "\\.php$">
    SetHandler application/x-httpd-php
</FilesMatch>
<Directory {docroot}/middle>
    mrubyHandlerMiddleCode 'Apache.rputs "ruby"'
</Directory>
<Directory {docroot}/first>
    mrubyHandlerFirstCode 'Apache.rputs "ruby"'
</Directory>
""", mpm="prefork", modules=[php],
        docs={"middle/i.php": "<?php echo 'php';", "first/i.php": "<?php echo 'php';"})
    assert a.get("/middle/i.php").text == "php"
    assert a.get("/first/i.php").text == "ruby"


def test_input_filter_length_change_is_not_php_content_length(apache, php):
    a = apache("""
<FilesMatch "\\.php$">
    SetHandler application/x-httpd-php
</FilesMatch>
<Directory {docroot}>
    mrubyInputFilter {dir}/in.rb
    SetInputFilter mruby
</Directory>
""", mpm="prefork", modules=[php],
        files={"in.rb": 'f = Apache::Filter.new; f.body = f.body * 2'},
        docs={"len.php": "<?php echo $_SERVER['CONTENT_LENGTH'], ' ', "
                         "strlen(file_get_contents('php://input'));"})
    assert a.post("/len.php", data="abc").text == "3 6"


def test_prev_tells_error_documents_from_requests(apache):
    """A script that refuses every request refuses an ErrorDocument in
    another directory too (in the same one Apache takes the first answer
    without asking again), unless it lets redirected requests (r.prev?)
    through."""
    conf = """
ErrorDocument 403 %s
<Directory {docroot}>
    mrubyAccessCheckerMiddleCode '%s'
</Directory>
<Directory {docroot}/errors>
    Options -Indexes
</Directory>
"""
    deny = "Apache.return Apache::HTTP_FORBIDDEN"
    guarded = "r = Apache::Request.new; " + deny + " unless r.prev?"
    pages = {"errors/403.html": "custom 403\n", "403.html": "custom 403\n",
             "index.html": "home\n"}
    a = apache(conf % ("/errors/403.html", deny), docs=pages)
    r = a.get("/index.html")
    assert r.status_code == 403 and "custom 403" not in r.text
    a = apache(conf % ("/403.html", deny), docs=pages)
    assert a.get("/index.html").text == "custom 403\n"
    a = apache(conf % ("/errors/403.html", guarded), docs=pages)
    r = a.get("/index.html")
    assert (r.status_code, r.text) == (403, "custom 403\n")


def test_connection_keepalive_and_id(apache):
    """keepalive? is Apache's decision, made when the header goes out; id
    tells apart the connections open at the same moment."""
    import requests
    a = apache("""
<Location /c>
    mrubyHandlerMiddleCode 'c = Apache::Connection.new; Apache.rputs "#{c.keepalive?} #{c.id}"'
    mrubyLogTransactionMiddleCode 'Apache.errlogger Apache::APLOG_NOTICE, "trace ka #{Apache::Connection.new.keepalive?}"'
</Location>
""")
    one, two = requests.Session(), requests.Session()
    ka1, id1 = one.get(a.url("/c")).text.split()
    ka2, id2 = two.get(a.url("/c")).text.split()
    assert (ka1, ka2) == ("false", "false") and id1 != id2
    a.wait_log("trace ka true")
    one.close()
    two.close()


def test_output_filter_drops_validators_of_the_original(apache):
    """A conditional request is not answered with 304 by the
    validators of the file an output filter rewrites (as mod_include)."""
    a = apache("""
Alias /plain/ {docroot}/
Alias /f/ {docroot}/
<Location /f/>
    SetOutputFilter mruby
    mrubyOutputFilter {dir}/f.rb
</Location>
""", files={"f.rb": "f = Apache::Filter.new; "
                    "f.body = f.body + Apache::Request.new.args.to_s"},
        docs={"page.html": "page\n"})
    orig = a.get("/plain/page.html")
    etag, lm = orig.headers["ETag"], orig.headers["Last-Modified"]
    r = a.get("/f/page.html?one", headers={"If-None-Match": etag})
    assert (r.status_code, r.text) == (200, "page\none")
    assert "ETag" not in r.headers and "Last-Modified" not in r.headers
    r = a.get("/f/page.html?two", headers={"If-Modified-Since": lm})
    assert (r.status_code, r.text) == (200, "page\ntwo")
