#!/bin/bash
# make test-deb: the Debian packages as a sysadmin uses them, on this
# machine's own Apache and nginx (run as root; `make test` calls it).
#
#  1. builds the packages (scripts/build-deb.sh), builds them again in
#     another directory and compares the two with cmp, runs lintian (no
#     errors, no warnings);
#  2. shows that apt refuses the nginx modules next to an nginx of another
#     ABI (apt-get --simulate on a copy of dpkg's status where nginx
#     provides another nginx-abi-*): nothing on the machine changes;
#  3. apt-get installs them, checks that they are enabled the Debian way
#     (a2enmod, modules-enabled links after 50-mod-stream.conf), starts the
#     distribution's Apache and nginx with their stock configuration
#     (apache2ctl start, nginx) and serves scripts from each, one of them
#     counting in a shared dictionary;
#  4. upgrades to a rebuilt package of a higher version while both run,
#     reloads them and serves again from the new files (Apache's count
#     goes on: its graceful restart keeps the dictionary);
#  5. apt-get remove, then purge, and checks after each that the servers
#     still start, and after purge that no file is left behind (a listing
#     of the server and package directories, compared with the one taken
#     before the install; the directories of a2enmod's state markers are
#     not in it, below).
#
# The stock configuration is used as it is, except for its ports: for the
# duration of the test, ports.conf listens on 127.0.0.1:<free port> and
# nginx's default site on another.  Only the servers this test starts are
# stopped, through the stock pid files.  On exit, failed or not, the trap
# stops them, purges the packages, removes the test's site files and puts
# back the port files, the logs, and any module files a `make install` had
# left at the packages' paths.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=$REPO/build/deb-test
PKGS="libapache2-mod-mruby libnginx-mod-http-mruby libnginx-mod-stream-mruby"
UPGRADE_VERSION_SUFFIX="+debtest1"
APACHE_PID=/var/run/apache2/apache2.pid
NGINX_PID=/run/nginx.pid
APT="apt-get -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends"
export DEBIAN_FRONTEND=noninteractive

# What the packages install or their scripts create, and what `make
# install` puts at the same paths.
PACKAGE_PATHS="/usr/lib/apache2/modules/mod_mruby.so
/etc/apache2/mods-available/mruby.load /etc/apache2/mods-available/mruby.conf
/etc/apache2/mods-enabled/mruby.load /etc/apache2/mods-enabled/mruby.conf
/var/lib/apache2/module/enabled_by_maint/mruby
/var/lib/apache2/module/disabled_by_maint/mruby
/var/lib/apache2/module/enabled_by_admin/mruby
/var/lib/apache2/module/disabled_by_admin/mruby
/usr/lib/nginx/modules/ngx_http_mruby_module.so
/usr/lib/nginx/modules/ngx_stream_mruby_module.so
/usr/share/nginx/modules-available/mod-http-mruby.conf
/usr/share/nginx/modules-available/mod-stream-mruby.conf"
# Listed before the install and after the purge: must be the same.
WATCHED="/etc/apache2 /etc/nginx /usr/lib/apache2/modules /usr/lib/nginx/modules
/usr/share/nginx /usr/share/doc /var/lib/apache2 /var/www"
# a2enmod, a2enconf and their a2dis* keep a marker file per name in
# /var/lib/apache2/{module,conf,site}/{en,dis}abled_by_{admin,maint}/ and
# create that directory the first time a name is switched so on a machine
# (the postrm's purge creates module/disabled_by_admin, the test's own
# a2enconf and a2disconf conf/*_by_admin): Debian's bookkeeping, not the
# packages'.  The snapshot leaves these directories out (their markers
# stay in it), and the restore removes those the test created, if empty.
MARKER_DIRS='/var/lib/apache2/\(module\|conf\|site\)/\(en\|dis\)abled_by_\(admin\|maint\)'

SITE=mruby-test-deb
SCRIPT_DIR=/var/www/$SITE

say() { echo "test-deb: $*"; }
fail() { printf 'test-deb: FAIL: %b\n' "$*" >&2; exit 1; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# -- the machine's state ----------------------------------------------------

STATE=""
APACHE_STARTED=""
NGINX_STARTED=""

pid_alive() { kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }

# The packages dpkg knows as installed or with their conffiles left.
installed_pkgs() {
    local p s out=""
    for p in $PKGS; do
        s=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        case "$s" in ""|*not-installed) ;; *) out="$out $p" ;; esac
    done
    echo "$out"
}

preflight() {
    [ "$(id -u)" = 0 ] || fail "run as root (it installs packages)"
    local left
    left=$(installed_pkgs)
    [ -z "$left" ] || fail "already installed:$left. The test installs and \
purges them: 'apt-get purge$left' first"
    ! pid_alive $APACHE_PID || fail "the stock Apache runs (pid \
$(cat $APACHE_PID)); the test starts its own: stop it first"
    ! pid_alive $NGINX_PID || fail "the stock nginx runs (pid \
$(cat $NGINX_PID)); the test starts its own: stop it first"
}

save_state() {
    STATE=$(mktemp -d /tmp/mruby-test-deb.XXXXXX)
    local p existing=""
    for p in $PACKAGE_PATHS /etc/nginx/modules-enabled/*mruby*; do
        if [ -e "$p" ] || [ -L "$p" ]; then existing="$existing $p"; fi
    done
    if [ -n "$existing" ]; then
        say "moving aside what a source install left:$existing"
        tar -C / -cpf "$STATE/preexisting.tar" --absolute-names $existing
        rm -f $existing
    fi
    tar -C / -cpf "$STATE/logs.tar" var/log/apache2 var/log/nginx
    cp -a /etc/apache2/ports.conf "$STATE/ports.conf"
    cp -a /etc/nginx/sites-available/default "$STATE/nginx-default"
    marker_dirs > "$STATE/marker-dirs"
}

marker_dirs() {
    find /var/lib/apache2 -type d -regex "$MARKER_DIRS" | sort
}

stop_servers() {
    if [ -n "$APACHE_STARTED" ] && pid_alive $APACHE_PID; then
        apache2ctl stop >/dev/null 2>&1 || kill "$(cat $APACHE_PID)" || true
    fi
    if [ -n "$NGINX_STARTED" ] && pid_alive $NGINX_PID.oldbin; then
        kill -QUIT "$(cat $NGINX_PID.oldbin)" || true
    fi
    if [ -n "$NGINX_STARTED" ] && pid_alive $NGINX_PID; then
        nginx -s quit 2>/dev/null || kill "$(cat $NGINX_PID)" || true
    fi
    local i
    for i in $(seq 100); do
        if { [ -z "$APACHE_STARTED" ] || ! pid_alive $APACHE_PID; } &&
           { [ -z "$NGINX_STARTED" ] ||
             { ! pid_alive $NGINX_PID && ! pid_alive $NGINX_PID.oldbin; }; }; then
            APACHE_STARTED="" NGINX_STARTED=""
            return 0
        fi
        sleep 0.1
    done
    return 1
}

restore_state() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    [ $rc = 0 ] || say "failed: restoring the machine's state"
    if ! stop_servers 2>/dev/null; then
        say "the servers did not stop within 10 s: killing them"
        local masters
        masters=$(cat $APACHE_PID $NGINX_PID $NGINX_PID.oldbin 2>/dev/null)
        pkill -KILL -P "$(echo $masters | tr ' ' ,)"
        kill -KILL $masters
    fi
    if [ -n "$(installed_pkgs)" ]; then
        $APT purge $(installed_pkgs) >/dev/null 2>&1
    fi
    remove_site
    if [ -n "$STATE" ]; then
        cp -a "$STATE/ports.conf" /etc/apache2/ports.conf
        cp -a "$STATE/nginx-default" /etc/nginx/sites-available/default
        rm -rf /var/log/apache2/* /var/log/nginx/*
        tar -C / -xpf "$STATE/logs.tar"
        if [ -f "$STATE/preexisting.tar" ]; then
            tar -C / -xpf "$STATE/preexisting.tar" --absolute-names
        fi
        marker_dirs | comm -13 "$STATE/marker-dirs" - | xargs -r rmdir --ignore-fail-on-non-empty
        rm -rf "$STATE"
    fi
    [ $rc = 0 ] && say "machine restored" || say "machine restored; FAILED"
    exit $rc
}

# -- the sysadmin's side -----------------------------------------------------

set_ports() {
    APACHE_PORT=$(free_port)
    NGINX_PORT=$(free_port)
    NGINX_SITE_PORT=$(free_port)
    printf '# make test-deb: stock ports.conf, back after the test\nListen 127.0.0.1:%s\n' \
        "$APACHE_PORT" > /etc/apache2/ports.conf
    sed -i -e "s/^\(\s*\)listen 80 default_server;/\1listen 127.0.0.1:$NGINX_PORT default_server;/" \
           -e '/^\s*listen \[::\]:80 default_server;/d' \
           /etc/nginx/sites-available/default
    grep -q "listen 127.0.0.1:$NGINX_PORT" /etc/nginx/sites-available/default ||
        fail "nginx's default site has no 'listen 80 default_server' to move"
}

# The scripts and the site configuration an admin writes to use the
# modules: a hello world, and a count in a shared dictionary.
add_site() {
    mkdir -p $SCRIPT_DIR
    cat > $SCRIPT_DIR/hello.rb <<'EOF'
Server = get_server_class
r = Server::Request.new
Server.rputs "Hello #{Server.module_name} World! You asked for #{r.uri}\n"
EOF
    cat > $SCRIPT_DIR/count.rb <<'EOF'
Server = get_server_class
n = Server::SharedDict.new("test-deb").incr("n", 1, init: 0)
Server.rputs "#{Server.module_name} count #{n}\n"
EOF
    cat > /etc/apache2/conf-available/$SITE.conf <<EOF
mrubySharedDict test-deb 1m
<Location /$SITE/hello>
    mrubyHandlerMiddle $SCRIPT_DIR/hello.rb
</Location>
<Location /$SITE/count>
    mrubyHandlerMiddle $SCRIPT_DIR/count.rb
</Location>
EOF
    a2enconf -q $SITE
    cat > /etc/nginx/conf.d/$SITE.conf <<EOF
mruby_shared_dict test-deb 1m;
server {
    listen 127.0.0.1:$NGINX_SITE_PORT;
    location /$SITE/hello {
        mruby_content_handler $SCRIPT_DIR/hello.rb;
    }
    location /$SITE/count {
        mruby_content_handler $SCRIPT_DIR/count.rb;
    }
}
EOF
}

remove_site() {
    if [ -e /etc/apache2/conf-enabled/$SITE.conf ]; then a2disconf -q $SITE; fi
    rm -f /etc/apache2/conf-available/$SITE.conf /etc/nginx/conf.d/$SITE.conf
    rm -f /var/lib/apache2/conf/*/$SITE
    rm -rf $SCRIPT_DIR
}

start_servers() {
    apache2ctl configtest >/dev/null 2>&1 || { apache2ctl configtest; fail "apache2ctl configtest"; }
    nginx -t -q || fail "nginx -t"
    APACHE_STARTED=1
    apache2ctl start || fail "apache2ctl start"
    NGINX_STARTED=1
    # By its full path, as the init script does: a binary upgrade (USR2)
    # execs argv[0].
    /usr/sbin/nginx || fail "nginx did not start"
    wait_port "$APACHE_PORT" Apache
    wait_port "$NGINX_PORT" nginx
}

wait_port() {
    local i
    for i in $(seq 100); do
        if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$1/"; then return 0; fi
        sleep 0.1
    done
    fail "$2 is not serving on 127.0.0.1:$1 after 10 s"
}

# GET url, expect the body to contain text.
expect_body() {
    local body
    body=$(curl -sS --max-time 5 "$1") || fail "GET $1: no answer"
    case "$body" in
        *"$2"*) say "  GET $1 -> $(echo "$body" | head -1)" ;;
        *) fail "GET $1: expected '$2', got: $(echo "$body" | head -3)" ;;
    esac
}

serve_scripts() {
    expect_body "http://127.0.0.1:$APACHE_PORT/$SITE/hello" "Hello mod_mruby World! You asked for /$SITE/hello"
    expect_body "http://127.0.0.1:$NGINX_SITE_PORT/$SITE/hello" "Hello ngx_mruby World! You asked for /$SITE/hello"
}

# The next count in each server's shared dictionary: Apache's $1, nginx's $2.
count_scripts() {
    expect_body "http://127.0.0.1:$APACHE_PORT/$SITE/count" "mod_mruby count $1"
    expect_body "http://127.0.0.1:$NGINX_SITE_PORT/$SITE/count" "ngx_mruby count $2"
}

# GET url, expect 200 from that server (its Server header).
expect_server() {
    local head
    head=$(curl -sS --max-time 5 -o /dev/null -D - "$1") || fail "GET $1: no answer"
    grep -q "^HTTP/1.1 200" <<<"$head" && grep -qi "^server: $2" <<<"$head" ||
        fail "GET $1: expected 200 from $2, got:\n$head"
    say "  GET $1 -> $(head -1 <<<"$head" | tr -d '\r'), $(grep -i '^server:' <<<"$head" | tr -d '\r')"
}

serve_stock() {
    expect_server "http://127.0.0.1:$APACHE_PORT/" Apache
    expect_server "http://127.0.0.1:$NGINX_PORT/" nginx
}

# nginx -s reload keeps the module it has loaded: the new cycle's dlopen()
# finds the path still open in the old cycle and gets the old copy.  A new
# module file needs a new master: nginx's binary upgrade (USR2 starts one
# from the old, QUIT ends the old), as /etc/init.d/nginx upgrade does,
# without refusing a connection.
nginx_upgrade() {
    local old i
    old=$(cat $NGINX_PID)
    kill -USR2 "$old"
    for i in $(seq 100); do
        if pid_alive $NGINX_PID && [ "$(cat $NGINX_PID)" != "$old" ]; then break; fi
        sleep 0.1
    done
    pid_alive $NGINX_PID && [ "$(cat $NGINX_PID)" != "$old" ] ||
        fail "nginx: no new master 10 s after USR2:\n$(tail -5 /var/log/nginx/error.log)"
    kill -QUIT "$old"
    for i in $(seq 100); do
        kill -0 "$old" 2>/dev/null || return 0
        sleep 0.1
    done
    fail "nginx: the old master $old did not quit within 10 s"
}

# The module files mapped by the server's processes (from the pid file
# and its children): "path" or "path (deleted)" once a package replaced it.
module_maps() {
    local master pids p
    master=$(cat "$1")
    pids="$master $(pgrep -P "$master" || true)"
    for p in $pids; do
        grep -ho "$2.*" /proc/$p/maps 2>/dev/null || true
    done | sort -u
}

# Waits until every process of the server maps the module file as it is on
# disk now (a reload re-reads it), never the one the upgrade replaced.
wait_new_module() {
    local i maps
    for i in $(seq 100); do
        maps=$(module_maps "$1" "$2")
        if [ -n "$maps" ] && ! grep -q deleted <<<"$maps"; then return 0; fi
        sleep 0.1
    done
    fail "after the reload, $3 still maps: $maps"
}

# Every path under WATCHED with its type and mode; files with size and
# mtime, links with their target (a directory's mtime changes with any
# entry added and removed again, so it is left out).
snapshot() {
    find $WATCHED \( -type d -regex "$MARKER_DIRS" \) \
        -o \( -type d -printf '%p d %m\n' \) \
        -o \( -type f -printf '%p f %m %s %T@\n' \) \
        -o -printf '%p %y %m %l\n' | sort
}

# -- the steps ---------------------------------------------------------------

build() {
    # make test has run the unit tests already; the package build's own
    # run of them (dh_auto_test) would only add minutes.
    export DEB_BUILD_OPTIONS="nocheck${DEB_BUILD_OPTIONS:+ $DEB_BUILD_OPTIONS}"
    say "building the packages (build/deb-test)"
    sh "$REPO/scripts/build-deb.sh" "$OUT" >/dev/null
    say "building them again, from a copy of that tree in another directory"
    sh "$REPO/scripts/build-deb.sh" --from "$OUT/src" "$OUT.again" >/dev/null
    local f rel n=0
    for f in "$OUT"/*.deb "$OUT"/dbgsym/*.deb; do
        rel=${f#"$OUT/"}
        cmp "$f" "$OUT.again/$rel" || fail "two builds differ: $rel"
        n=$((n + 1))
    done
    say "  $n .deb files, byte-identical (cmp)"
    rm -rf "$OUT.again"
    say "lintian"
    local tags
    tags=$(cd "$OUT" && lintian --fail-on none -I ./*.changes 2>&1 | grep -E '^[EW]:' || true)
    [ -z "$tags" ] || fail "lintian:\n$tags"
    say "  no errors, no warnings"
    VERSION=$(dpkg-parsechangelog -l "$OUT/src/debian/changelog" -S Version)
    NEW_VERSION=$VERSION$UPGRADE_VERSION_SUFFIX
    mkdir -p "$OUT/v1"
    mv "$OUT"/*.deb "$OUT/v1/"
    say "building $NEW_VERSION for the upgrade"
    sh "$REPO/scripts/build-deb.sh" "$OUT" "$NEW_VERSION" >/dev/null
    mkdir -p "$OUT/v2"
    mv "$OUT"/*.deb "$OUT/v2/"
}

debs() {  # the module packages (not -dbgsym) of one version
    local p
    for p in $PKGS; do ls "$OUT/$1/${p}_"*.deb; done
}

check_abi_refused() {
    local abi fake out
    abi=$(dpkg-deb -f "$OUT/v1/libnginx-mod-http-mruby_${VERSION}_amd64.deb" Depends |
          grep -o 'nginx-abi-[^, ]*')
    dpkg-query -W -f='${Provides}\n' nginx | grep -q "$abi" ||
        fail "the packages depend on $abi, which this machine's nginx does not provide"
    say "ABI: the nginx modules depend on $abi (this nginx provides it)"
    fake=$STATE/abi
    mkdir -p "$fake/lists/partial"
    # This machine, but with nginx 1.99.0-1 of ABI nginx-abi-1.99.0-1 and
    # without what depends on the old ABI (Debian's modules, nginx-dev).
    python3 - "$fake/status" <<'EOF'
import re, sys
stanzas = open("/var/lib/dpkg/status").read().split("\n\n")
def name(st):
    m = re.search(r"^Package: (\S+)$", st, re.M)
    return m.group(1) if m else None
def needs(st):
    for field in ("Depends", "Pre-Depends"):
        m = re.search(r"^%s: (.*)$" % field, st, re.M)
        for alt in (m.group(1).split(",") if m else []):
            yield {a.split()[0].split(":")[0] for a in alt.split("|")}
gone = {n for n in map(name, stanzas)
        if n and (n.startswith("libnginx-mod-") or n == "nginx-dev")}
grew = True
while grew:
    grew = False
    for st in stanzas:
        n = name(st)
        if n and n not in gone and any(alt <= gone for alt in needs(st)):
            gone.add(n)
            grew = True
out = []
for st in stanzas:
    if name(st) in gone:
        continue
    if name(st) == "nginx":
        st = re.sub(r"^Version: .*$", "Version: 1.99.0-1", st, flags=re.M)
        st = re.sub(r"nginx-abi-[0-9][^,\n]*", "nginx-abi-1.99.0-1", st)
    out.append(st)
open(sys.argv[1], "w").write("\n\n".join(out))
EOF
    local sim="apt-get -s -o Dir::State::Lists=$fake/lists -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= install --no-install-recommends"
    $sim $(debs v1) >/dev/null 2>&1 || fail "apt-get -s refuses the packages on this machine"
    if out=$($sim -o Dir::State::status="$fake/status" $(debs v1) 2>&1); then
        fail "apt-get -s accepts the nginx modules next to nginx-abi-1.99.0-1"
    fi
    grep -q "libnginx-mod-http-mruby : Depends: $abi but it is not installable" <<<"$out" ||
        fail "apt-get -s refused for another reason:\n$out"
    say "  next to an nginx of nginx-abi-1.99.0-1 apt refuses: $(grep -o "libnginx-mod-http-mruby : Depends: .*" <<<"$out")"
}

check_enabled() {
    [ -L /etc/apache2/mods-enabled/mruby.load ] || fail "mruby not enabled by the package"
    local out
    out=$(a2enmod mruby)
    grep -q "already enabled" <<<"$out" || fail "a2enmod mruby: $out"
    [ "$(readlink -f /etc/nginx/modules-enabled/50-mod-http-mruby.conf)" = \
      /usr/share/nginx/modules-available/mod-http-mruby.conf ] || fail "no 50-mod-http-mruby.conf link"
    [ "$(readlink -f /etc/nginx/modules-enabled/60-mod-stream-mruby.conf)" = \
      /usr/share/nginx/modules-available/mod-stream-mruby.conf ] || fail "no 60-mod-stream-mruby.conf link"
    # nginx includes modules-enabled/*.conf in glob order: stream core first.
    out=$(printf '%s\n' /etc/nginx/modules-enabled/*.conf | grep -e '/50-mod-stream.conf$' -e '/60-mod-stream-mruby.conf$' | xargs -n1 basename | tr '\n' ' ')
    [ "$out" = "50-mod-stream.conf 60-mod-stream-mruby.conf " ] ||
        fail "modules-enabled: stream core and mruby stream in this order: $out"
    say "  enabled: mods-enabled/mruby.load (a2enmod: already enabled), modules-enabled/50-mod-http-mruby.conf, 60-mod-stream-mruby.conf"
}

main() {
    # One run at a time on a machine (the stock servers, the packages);
    # install-deps.sh leaves the stock servers alone while this is held.
    exec 9>/run/lock/mruby-test-deb.lock
    flock -w 900 9 || fail "another make test-deb held the lock for 15 min"
    preflight
    trap restore_state EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    save_state
    build
    check_abi_refused
    set_ports
    local before
    before=$(snapshot)

    say "apt-get install ./*.deb ($VERSION)"
    $APT install $(debs v1) >"$OUT/apt.log" 2>&1 || { cat "$OUT/apt.log"; fail "apt-get install"; }
    check_enabled
    add_site
    say "starting the stock Apache (127.0.0.1:$APACHE_PORT) and nginx (127.0.0.1:$NGINX_PORT, site :$NGINX_SITE_PORT)"
    start_servers
    serve_scripts
    count_scripts 1 1
    module_maps $NGINX_PID ngx_stream_mruby_module.so | grep -q . ||
        fail "nginx did not load ngx_stream_mruby_module.so"
    say "  nginx loaded ngx_stream_mruby_module.so after the stream core"

    say "upgrade to $NEW_VERSION while both serve"
    $APT install $(debs v2) >"$OUT/apt.log" 2>&1 || { cat "$OUT/apt.log"; fail "apt-get install (upgrade)"; }
    [ "$(dpkg-query -W -f='${Version}' libapache2-mod-mruby)" = "$NEW_VERSION" ] || fail "not upgraded"
    check_enabled
    serve_scripts
    apache2ctl graceful || fail "apache2ctl graceful"
    nginx_upgrade
    wait_new_module $APACHE_PID /usr/lib/apache2/modules/mod_mruby.so Apache
    wait_new_module $NGINX_PID /usr/lib/nginx/modules/ngx_http_mruby_module.so nginx
    say "  apache2ctl graceful, nginx upgrade: every process maps the upgraded modules"
    serve_scripts
    # Apache's graceful restart keeps the dictionary's contents; the binary
    # upgrade's new nginx master starts it empty
    count_scripts 2 1

    say "apt-get remove while both serve"
    $APT remove $PKGS >"$OUT/apt.log" 2>&1 || { cat "$OUT/apt.log"; fail "apt-get remove"; }
    [ ! -e /etc/apache2/mods-enabled/mruby.load ] || fail "mruby.load still enabled after remove"
    ! ls /etc/nginx/modules-enabled/*mruby*.conf >/dev/null 2>&1 || fail "an mruby link is still in modules-enabled after remove"
    serve_scripts
    say "  the admin removes the site that used the modules; restart"
    remove_site
    stop_servers || fail "the servers did not stop within 10 s"
    start_servers
    serve_stock

    say "apt-get purge"
    $APT purge $PKGS >"$OUT/apt.log" 2>&1 || { cat "$OUT/apt.log"; fail "apt-get purge"; }
    [ -z "$(installed_pkgs)" ] || fail "still known to dpkg after purge:$(installed_pkgs)"
    local after
    after=$(snapshot)
    if [ "$before" != "$after" ]; then
        diff <(echo "$before") <(echo "$after") >&2 || true
        fail "the purge left these differences from before the install"
    fi
    say "  nothing left behind ($(echo "$before" | wc -l) paths under $(echo $WATCHED | wc -w) directories as before the install)"
    stop_servers || fail "the servers did not stop within 10 s"
    start_servers
    serve_stock
    stop_servers || fail "the servers did not stop within 10 s"
    say "passed"
}

main "$@"; exit  # on one line: bash reads no further, whatever edits the file
