#!/bin/sh
# make deb: builds the Debian packages from this tree with Debian's own
# tools (dpkg-buildpackage -b -us -uc) and leaves them in OUT.
#
#   scripts/build-deb.sh [--from TREE] [OUT] [VERSION]
#
# OUT (default build/deb) gets a copy of the tree in OUT/src, because
# dpkg-buildpackage writes its .deb files next to the tree it builds: here
# that is OUT, not the directory that holds this checkout.  The copy is
# the working tree as it is (uncommitted changes included) without build/
# and .git, or TREE (test-deb builds the copy of a first build again, in
# another directory, to compare the two).  VERSION, if given, adds a changelog entry for that version
# (the test uses it to build an upgrade): it reuses the OUT/src of an
# earlier run with -nc, so that a second version costs a packaging run, not
# a compile.
#
# dpkg-buildpackage sets SOURCE_DATE_EPOCH from debian/changelog, so two
# builds of the same tree give identical .deb files.
set -eu

REPO=$(cd "$(dirname "$0")/.." && pwd)
TREE=$REPO
if [ "${1:-}" = --from ]; then TREE=$(cd "$2" && pwd); shift 2; fi
OUT=${1:-build/deb}
VERSION=${2:-}

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
case "$OUT/" in
    "$REPO/build/"*) ;;
    *) echo "build-deb: OUT must be under $REPO/build" >&2; exit 1 ;;
esac

reuse=""
if [ -n "$VERSION" ] && [ -f "$OUT/src/debian/changelog" ]; then
    reuse=-nc
    rm -rf "$OUT"/*.deb "$OUT"/dbgsym "$OUT"/*.changes "$OUT"/*.buildinfo
else
    rm -rf "$OUT" && mkdir -p "$OUT/src"
    (cd "$TREE" && tar -c --exclude=./build --exclude=./.git \
        --exclude=__pycache__ --exclude=.pytest_cache -f - .) \
        | tar -x -C "$OUT/src" -f -
fi

if [ -n "$VERSION" ]; then
    cd "$OUT/src"
    # The entry is dated like the one before it: the new version is the
    # only difference, and the build stays reproducible.
    date=$(dpkg-parsechangelog -S Date)
    maint=$(dpkg-parsechangelog -S Maintainer)
    { printf 'mod-mruby (%s) unstable; urgency=medium\n\n' "$VERSION"
      printf '  * Rebuild as %s.\n\n -- %s  %s\n\n' "$VERSION" "$maint" "$date"
      cat debian/changelog; } > debian/changelog.new
    mv debian/changelog.new debian/changelog
fi

cd "$OUT/src"
nice dpkg-buildpackage -b -us -uc $reuse >"$OUT/build.log" 2>&1 || {
    tail -40 "$OUT/build.log"
    echo "build-deb: dpkg-buildpackage failed; full log in $OUT/build.log" >&2
    exit 1
}
# The debug symbols apart, so that `apt install ./build/deb/*.deb` installs
# the three module packages.
mkdir -p "$OUT/dbgsym"
mv "$OUT"/*-dbgsym_*.deb "$OUT/dbgsym/"
ls "$OUT"/*.deb
