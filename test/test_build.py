"""What the build promises beyond the tests of behaviour: the built modules
export only what their server looks up, and the code that leans on the
insides of the mruby releases it supports does not build against another."""

import os
import re
import shutil
import subprocess

import pytest

from harness import BUILD, MOD_MRUBY, NGX_HTTP_MRUBY, NGX_STREAM_MRUBY, REPO

NGINX_EXPORTS = {"ngx_modules", "ngx_module_names", "ngx_module_order"}


def exported(path):
    """The names a shared object defines in its dynamic symbol table."""
    assert os.path.exists(path), f"{path} is not built (make)"
    out = subprocess.run(["nm", "-D", "--defined-only", path], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.mark.parametrize("path, expected", [
    (MOD_MRUBY, {"mruby_module"}),
    (NGX_HTTP_MRUBY, NGINX_EXPORTS),
    (NGX_STREAM_MRUBY, NGINX_EXPORTS),
], ids=["mod_mruby", "ngx_http_mruby", "ngx_stream_mruby"])
def test_a_module_exports_only_what_its_server_looks_up(path, expected):
    names = exported(path)
    assert names == expected, (
        f"{os.path.basename(path)} exports {len(names)} names; "
        f"unexpected: {sorted(names - expected)[:20]}, "
        f"missing: {sorted(expected - names)}")


# What only mruby's insides have: a file that uses one must carry the guard.
INSIDES = [r"struct iv_tbl\b", r"\btl_tbl\b", r"->cibase\b", r"->ci\b",
           r"->root_c\b", r"\bmrb->jmp\b", r"\bmrb_vm_ci_env", r"\bmrb_vm_run\b",
           r"\bmrb_env_unshare\b", r"\bgc\.arena\b", r"->globals\b",
           r"->filename_sym\b", r"->symidx\b", r"\bMRB_TT_STRUCT\b"]


def guarded(text):
    return ('#include "mrb_mruby_version.h"' in text
            or "MRUBY_RELEASE_NO" in text)


def sources():
    for sub in ("src/core", "src/apache", "src/nginx", "src/lib"):
        d = os.path.join(REPO, sub)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if name.endswith((".c", ".h")):
                yield os.path.join(sub, name)


def test_code_that_uses_mruby_insides_carries_the_version_guard():
    unguarded = []
    for rel in sources():
        text = open(os.path.join(REPO, rel)).read()
        used = [p for p in INSIDES if re.search(p, text)]
        if used and not guarded(text):
            unguarded.append(f"{rel}: {', '.join(used)}")
    assert not unguarded, ("include mrb_mruby_version.h in:\n  "
                           + "\n  ".join(unguarded))


def mruby_headers(tmp_path, teeny):
    """A copy of Debian's mruby headers claiming its release's teeny number
    to be teeny (x.y.<teeny>)."""
    inc = tmp_path / f"include-{teeny}"
    inc.mkdir()
    for name in ("mruby.h", "mrbconf.h"):
        shutil.copy(f"/usr/include/{name}", inc / name)
    shutil.copytree("/usr/include/mruby", inc / "mruby")
    version = inc / "mruby" / "version.h"
    text, n = re.subn(r"#define MRUBY_RELEASE_TEENY \d+",
                      f"#define MRUBY_RELEASE_TEENY {teeny}",
                      version.read_text())
    assert n == 1
    version.write_text(text)
    return inc


def mruby_defs():
    """The -D flags of Debian's mruby build, as the Makefile takes them."""
    out = subprocess.run(["mruby-config", "--cflags"], check=True,
                         capture_output=True, text=True).stdout
    return [f for f in out.split() if f.startswith("-D")]


def compile_core(rel, inc):
    # mruby 4.0: the presym/id.h the Makefile made from the library
    presym = [f"-I{BUILD}/include"] if os.path.isdir(f"{BUILD}/include") else []
    return subprocess.run(
        ["gcc", "-fsyntax-only", "-std=gnu11", *mruby_defs(),
         f"-I{inc}", *presym, f"-I{REPO}/src/core", f"-I{REPO}/src/lib",
         f"-I{BUILD}",
         os.path.join(REPO, rel)],
        capture_output=True, text=True)


def test_the_guarded_core_fails_to_build_against_another_mruby(tmp_path):
    files = [rel for rel in sources()
             if rel.startswith("src/core/") and rel.endswith(".c")
             and guarded(open(os.path.join(REPO, rel)).read())]
    assert "src/core/mrb_interp.c" in files

    same, other = mruby_headers(tmp_path, 0), mruby_headers(tmp_path, 1)
    for rel in files:
        ok = compile_core(rel, same)
        assert ok.returncode == 0, f"{rel} against x.y.0:\n{ok.stderr[-2000:]}"

        bad = compile_core(rel, other)
        assert bad.returncode != 0, f"{rel} builds against mruby x.y.1"
        assert "#error" in bad.stderr and "mruby" in bad.stderr, bad.stderr


def symbols(obj, *flags):
    out = subprocess.run(["nm", *flags, obj], check=True, capture_output=True,
                         text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def core_objects():
    """{source name: object} of the core and library, as the Apache module
    was built from them."""
    objs = {}
    for sub in ("core", "lib"):
        d = os.path.join(BUILD, "apache", "src", sub)
        assert os.path.isdir(d), f"{d} is not built (make)"
        for f in sorted(os.listdir(d)):
            if f.endswith(".o"):
                objs[f"src/{sub}/{f[:-2]}.c"] = os.path.join(d, f)
    return objs


REDIS_FILES = {"src/core/mrb_redis.c", "src/core/mrb_redis_conn.c",
               "src/core/mrb_redis_cluster.c", "src/core/mrb_redis_slots.c"}


def test_the_core_calls_no_part_by_name():
    """The core reaches the library and Redis only through the parts an
    adapter hands it (mrb_part.h): no other core file refers to a name
    they define, or includes their headers; and the interpreter calls
    nothing of mrb_wait.c (the script run decides what runs on a
    coroutine, and mrb_wait.c calls the interpreter)."""
    objs = core_objects()
    parts = {src: o for src, o in objs.items()
             if src.startswith("src/lib/") or src in REDIS_FILES}
    part_names = set()
    for o in parts.values():
        part_names |= symbols(o, "--defined-only", "--extern-only")
    for src, o in objs.items():
        if src in parts:
            continue
        used = symbols(o, "--undefined-only") & part_names
        assert not used, f"{src} calls into a part by name: {sorted(used)}"
        with open(os.path.join(REPO, src)) as f:
            text = f.read()
        assert not re.search(r'#include "(mrb_lib|mrb_regexp|mrb_json|'
                             r'mrb_digest|mrb_sys|mrb_securerandom|'
                             r'mrb_redis(_conn|_cluster|_slots)?)\.h"',
                             text), src

    wait = symbols(objs["src/core/mrb_wait.c"], "--defined-only",
                   "--extern-only")
    used = symbols(objs["src/core/mrb_interp.c"], "--undefined-only") & wait
    assert not used, f"mrb_interp.c calls mrb_wait.c: {sorted(used)}"


def test_the_wrapped_entry_points_are_one_list():
    """The link wraps the names of src/core/mrb_stack_check.wrap (the
    Makefile and src/nginx/config read it), and mrb_stack_check.c wraps
    exactly those: a name added to one side only would leave an entry
    point unchecked, or a wrapper nothing calls."""
    with open(os.path.join(REPO, "src/core/mrb_stack_check.wrap")) as f:
        listed = {line.strip() for line in f
                  if line.strip() and not line.startswith("#")}
    obj = core_objects()["src/core/mrb_stack_check.c"]
    wrapped = {s[len("__wrap_"):] for s in symbols(obj, "--defined-only")
               if s.startswith("__wrap_")}
    assert wrapped == listed
    for path in ("Makefile", "src/nginx/config"):
        with open(os.path.join(REPO, path)) as f:
            assert "mrb_stack_check.wrap" in f.read(), path
