#!/bin/bash
# make test-dist DIST=bookworm|trixie|forky: `make test` on a fresh
# Debian machine of that suite, as a new user runs it (as root).
#
#   scripts/test-dist.sh DIST [TARGET...]
#
# TARGET (default: test) are the make targets run in the root, each by a
# make of its own (a Makefile read before `make deps` installed mruby
# would not know its flags), for example "deps deb" to build the suite's
# packages there.
#
#  1. The suite's minimal root (debootstrap --variant=minbase, plus make,
#     which the README's two commands need) is built once from Debian's
#     archive and kept as a tarball in $CACHE (/var/cache/mruby-test-dist).
#  2. Each run unpacks that tarball into a new directory under /var/tmp,
#     copies in the git-tracked files of this tree (as they are in the
#     working tree, without build/) into /root/mod_mruby, root's home as
#     a new user's clone would be, and runs `make test` (TARGET) there with
#     chroot: make test installs what it needs itself.
#  3. The root's processes run in their own PID and mount namespaces
#     (unshare): /proc, /dev, /dev/pts, /dev/shm, /sys and /run are mounted
#     in the root inside them only, so the host never sees those mounts,
#     and when the run ends, fails or is interrupted, the kernel kills what
#     is left of it (the servers the tests start included) and drops the
#     mounts.  The run's directory is then removed.
#
# The root shares the host's network (apt and pip need Debian's archive
# and PyPI; the tests use loopback ports that are free at the time), and
# gets what this machine set up to use it: its resolver, the CA
# certificates it added (/usr/local/share/ca-certificates, with the bundle
# made from them) and pip's configuration (/etc/pip.conf), so that a
# network whose egress inspects TLS lets pip reach PyPI.  A policy-rc.d
# keeps the packages' maintainer scripts from starting Apache, nginx and
# Redis on the host's ports 80 and 6379: invoke-rc.d skips them, as in
# Debian's own build chroots.  The downloaded .deb files and pip's
# downloads are kept in $CACHE between runs of a suite (when no other run
# of it holds them), which changes what is downloaded, not what is
# installed.
#
# Each part's time is printed at the end; the whole output is also in
# build/test-dist-DIST.log (-TARGET for other targets), each line of
# make's prefixed with its time since make started.
set -euo pipefail

DIST=${1:-}
shift || true
TARGETS=${*:-test}
REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${MRUBY_TEST_DIST_CACHE:-/var/cache/mruby-test-dist}
MIRROR=http://deb.debian.org/debian
SECURITY_MIRROR=http://deb.debian.org/debian-security
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
SRC=/root/mod_mruby   # where the tree is, inside the root

say() { echo "test-dist: $*"; }
fail() { echo "test-dist: FAIL: $*" >&2; exit 1; }

# The suites a new machine's sources list.  The archive these machines
# reach serves testing (forky) as of a past date, whose Release files have
# expired (apt refuses them unless told not to check): forky is read
# without that check, and without forky-security (testing gets its fixes
# through unstable anyway).
case "$DIST" in
    bookworm|trixie) SUITES="$DIST $DIST-updates"; SECURITY_SUITES="$DIST-security"
                     VALID_UNTIL=yes ;;
    forky) SUITES="$DIST"; SECURITY_SUITES=""; VALID_UNTIL=no ;;
    *) fail "DIST must be bookworm, trixie or forky (got '${DIST}')" ;;
esac
[ "$(id -u)" = 0 ] || fail "run as root (debootstrap, chroot, mounts)"
if ! command -v debootstrap >/dev/null; then
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        debootstrap debian-archive-keyring >/dev/null || fail "apt-get install debootstrap"
fi

TIMES=()
STARTED=$SECONDS
PART=""
part_start() { PART=$1; PART_T0=$SECONDS; say "$PART"; }
part_end() {
    TIMES+=("$(printf '%-34s %5d s' "$PART" $((SECONDS - PART_T0)))")
    PART=""
}

# -- the cached pristine root -------------------------------------------------

TARBALL=$CACHE/$DIST.tar

build_cache() {
    local tmp=$CACHE/$DIST.building
    rm -rf "$tmp"
    mkdir -p "$tmp"
    # bookworm's debootstrap has no script named forky: every suite since
    # buster uses the one of sid.
    debootstrap --variant=minbase --include=make --keyring="$KEYRING" \
        "$DIST" "$tmp/root" "$MIRROR" /usr/share/debootstrap/scripts/sid \
        >"$CACHE/$DIST.debootstrap.log" 2>&1 ||
        { tail -20 "$CACHE/$DIST.debootstrap.log"; rm -rf "$tmp"; fail "debootstrap $DIST"; }
    tar -C "$tmp/root" -cf "$tmp/root.tar" .
    mv "$tmp/root.tar" "$TARBALL"
    rm -rf "$tmp"
}

# -- one run ------------------------------------------------------------------

ROOT=""
NS_PID=""

teardown() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if [ -n "$PART" ]; then
        TIMES+=("$(printf '%-34s %5d s (stopped)' "$PART" $((SECONDS - PART_T0)))")
    fi
    if [ -n "$NS_PID" ] && kill -0 "$NS_PID" 2>/dev/null; then
        # unshare --kill-child: its child, the namespace's init, dies with
        # it, and the kernel kills every other process of the namespace.
        # SIGKILL: unshare ignores SIGTERM and SIGINT while it waits.
        kill -KILL "$NS_PID" 2>/dev/null
        wait "$NS_PID" 2>/dev/null
    fi
    if [ -n "$ROOT" ] && [ -d "$ROOT" ]; then
        # The mounts were made in the run's own mount namespace: none is
        # visible here, so rm cannot reach the host's /dev or /proc.
        if findmnt -rn -o TARGET | grep -q "^$ROOT"; then
            say "left in place: $ROOT has mounts: $(findmnt -rn -o TARGET | grep "^$ROOT" | tr '\n' ' ')"
        else
            rm -rf --one-file-system "$ROOT"
        fi
    fi
    if [ ${#TIMES[@]} -gt 0 ]; then
        say "times:"
        printf '  %s\n' "${TIMES[@]}"
        printf '  %-34s %5d s\n' "total" $((SECONDS - STARTED))
    fi
    [ $rc = 0 ] && say "passed ($DIST)" || say "FAILED ($DIST)"
    exit $rc
}

write_root_config() {
    local r=$1
    # what the tests read to know they run in a root (test_test_dist.py)
    echo "$DIST" > "$r/etc/mruby-test-dist"
    cp /etc/resolv.conf "$r/etc/resolv.conf"
    if [ -d /usr/local/share/ca-certificates ]; then
        mkdir -p "$r/usr/local/share/ca-certificates"
        cp -a /usr/local/share/ca-certificates/. "$r/usr/local/share/ca-certificates/"
    fi
    if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
        mkdir -p "$r/etc/ssl/certs"
        cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
    fi
    if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$r/etc/pip.conf"; fi
    # as Debian's installer writes it: the host's name resolves (Apache
    # looks it up at start)
    printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' \
        "$(hostname)" > "$r/etc/hosts"
    rm -f "$r/etc/apt/sources.list"
    cat > "$r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITES
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
Check-Valid-Until: $VALID_UNTIL
EOF
    if [ -n "$SECURITY_SUITES" ]; then
        cat >> "$r/etc/apt/sources.list.d/debian.sources" <<EOF

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SECURITY_SUITES
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    fi
    printf '#!/bin/sh\n# test-dist: no daemon starts at install (the root shares the host'"'"'s ports)\nexit 101\n' \
        > "$r/usr/sbin/policy-rc.d"
    chmod 755 "$r/usr/sbin/policy-rc.d"
}

copy_tree() {
    mkdir -p "$ROOT$SRC"
    # The tracked files as they are in the working tree (a tracked file
    # deleted there is skipped); untracked files and build/ stay out.
    (cd "$REPO" && git ls-files -z | while IFS= read -r -d '' f; do
        if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
    done | tar --null -T - -cf -) | tar -C "$ROOT$SRC" -xf -
}

# Runs in the new namespaces (unshare), as their init: mounts what the
# servers and tests need inside the root, then runs make test there.
# $1: the root; $2: the host's download caches, or ""; $3: the targets.
INNER='
set -e
r=$1
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$r/dev/shm"
mount -t sysfs -o ro sysfs "$r/sys"
mount -t tmpfs -o mode=755,nosuid,nodev run "$r/run"
mkdir -m 1777 "$r/run/lock"
if [ -n "$2" ]; then
    mount --bind "$2/archives" "$r/var/cache/apt/archives"
    mkdir -p "$r/root/.cache/pip"
    mount --bind "$2/pip" "$r/root/.cache/pip"
fi
set +e
chroot "$r" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    TERM="${TERM:-dumb}" /bin/bash -lc "cd '"$SRC"' && for t in $3; do make \$t || exit; done" </dev/null
'

# Prefixes each line with the time since the start of make test.
stamp() {
    local t0=$SECONDS line
    while IFS= read -r line; do
        printf '[%3d:%02d] %s\n' $(((SECONDS - t0) / 60)) $(((SECONDS - t0) % 60)) "$line"
    done
}

main() {
    trap teardown EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    mkdir -p "$CACHE"
    if [ ! -f "$TARBALL" ]; then
        part_start "debootstrap $DIST (once: $TARBALL)"
        build_cache
        part_end
    fi

    part_start "fresh root from the cached tarball"
    ROOT=$(mktemp -d "/var/tmp/mruby-test-dist.$DIST.XXXXXX")
    chmod 755 "$ROOT"
    tar -C "$ROOT" -xpf "$TARBALL"
    write_root_config "$ROOT"
    part_end

    part_start "copy the tree's tracked files in"
    copy_tree
    part_end

    # The download caches, unless another run of this suite uses them.
    local downloads=$CACHE/$DIST-downloads
    mkdir -p "$downloads/archives/partial" "$downloads/pip"
    exec 8>"$downloads/lock"
    if ! flock -n 8; then
        say "another run of $DIST uses $downloads: downloading afresh"
        downloads=""
    fi

    local name=test-dist-$DIST
    [ "$TARGETS" = test ] || name=$name-$(echo "$TARGETS" | tr ' ' -)
    local log=$REPO/build/$name.log
    mkdir -p "$REPO/build"
    part_start "make $TARGETS in the $DIST root (log: build/$name.log)"
    # The namespace's init runs in the background so that this shell's
    # traps see Ctrl-C and TERM at once.
    unshare --pid --fork --kill-child --mount --propagation private \
        /bin/sh -c "$INNER" sh "$ROOT" "$downloads" "$TARGETS" \
        > >(stamp | tee "$log") 2>&1 &
    NS_PID=$!
    local rc=0
    wait "$NS_PID" || rc=$?
    NS_PID=""
    part_end
    [ $rc = 0 ] || fail "make $TARGETS in the $DIST root exited $rc (log: build/$name.log)"
}

main "$@"; exit
