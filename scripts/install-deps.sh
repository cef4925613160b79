#!/bin/sh
# Installs what building, testing, running and benchmarking need, from
# Debian's packages and PyPI.  Quiet and quick when all is there already.
# The same names on Debian 12, 13 and testing: where a package carries a
# version (clang's runtime, mod_php), the suite's default is named through
# its unversioned package (libclang-rt-dev, libapache2-mod-php).
set -e

PACKAGES="build-essential pkg-config apache2 apache2-dev nginx nginx-dev
libmruby-dev mruby libhiredis-dev libpcre2-dev libssl-dev zlib1g-dev
libboost-context-dev libonig-dev
clang libclang-rt-dev llvm debhelper lintian dpkg-dev fakeroot lua-cjson
redis-server redis-sentinel wrk valgrind openssl curl python3 python3-venv iproute2 procps
libapache2-mod-perl2 libapache2-mod-php libnginx-mod-http-lua
libnginx-mod-stream debootstrap debian-archive-keyring"

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" \
        || missing="$missing $p"
done

if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: missing packages:$missing (run as root)" >&2
        exit 1
    fi
    echo "install-deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# Debian starts the servers it installs; the tests and demos start their own.
# Not while make test-deb (which holds this lock) runs the stock servers.
if flock -n /run/lock/mruby-test-deb.lock true 2>/dev/null; then
    for s in apache2 nginx redis-server redis-sentinel; do
        if command -v service >/dev/null 2>&1; then
            service "$s" stop >/dev/null 2>&1 || true
        fi
    done
fi
