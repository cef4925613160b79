"""bench/'s own tools: what they keep of docs/benchmarks.md when they
rewrite it, and what bench/ab.py asks of the two builds it compares."""

import json
import os
import shutil
import sys

import harness

BENCH = os.path.join(harness.REPO, "bench")
sys.path.insert(0, BENCH)

import ab  # noqa: E402
import releases  # noqa: E402
import render  # noqa: E402


def headings(text):
    return [line for line in text.splitlines() if line.startswith("#")]


def test_render_keeps_every_section_of_the_page(tmp_path):
    """A section written outside the renderer's reach (not generated from
    results.json, not in bench/notes.md, not between markers) was lost
    by every make bench; all of today's page comes back."""
    doc = tmp_path / "benchmarks.md"
    shutil.copy(os.path.join(harness.REPO, "docs", "benchmarks.md"), doc)
    before = headings(doc.read_text())
    with open(os.path.join(BENCH, "results.json")) as f:
        results = json.load(f)
    render.render(results, str(doc), str(tmp_path / "img"))
    after = headings(doc.read_text())
    assert [h for h in before if h not in after] == []


def test_splice_block_replaces_its_block_and_only_it(tmp_path):
    doc = tmp_path / "page.md"
    begin, end = "<!-- x:begin -->", "<!-- x:end -->"
    doc.write_text("# page\n\n<!-- y:begin -->\ny\n<!-- y:end -->\n")
    render.splice_block(str(doc), begin, end, f"{begin}\none\n{end}\n")
    render.splice_block(str(doc), begin, end, f"{begin}\ntwo\n{end}\n")
    text = doc.read_text()
    assert text == ("# page\n\n<!-- y:begin -->\ny\n<!-- y:end -->\n\n"
                    f"{begin}\ntwo\n{end}\n")
    assert render.kept_blocks(str(doc)) == (
        "\n<!-- y:begin -->\ny\n<!-- y:end -->\n"
        f"\n{begin}\ntwo\n{end}\n")


def test_ab_asks_only_for_the_modules_its_servers_load(tmp_path):
    """A build without the stream module compares Apache and http
    configurations; one without the http module is refused by name."""
    for name in ("mod_mruby.so", "ngx_http_mruby_module.so"):
        (tmp_path / name).write_bytes(b"")
    modules = ab.modules_of(str(tmp_path))
    configs = ab.configs_named(["apache:forever", "nginx:cached"])
    assert ab.missing_module(modules, configs) is None
    os.remove(tmp_path / "ngx_http_mruby_module.so")
    assert ab.missing_module(modules, configs) == str(
        tmp_path / "ngx_http_mruby_module.so")
    apache_only = ab.configs_named(["apache:forever"])
    assert ab.missing_module(modules, apache_only) is None


def test_releases_merges_each_suites_records_and_keeps_a_failed_row(tmp_path):
    """bench/releases.py --table: a suite's instruction and wall records
    (two logs) become one column, suites in mruby's version order (10.0
    after 4.0), and a configuration make bench never measured shows as
    failed instead of ending the run."""
    wall = {"apache": [releases.wall_row(
        {"key": "c", "label": "C module", "ratio": 1.0,
         "ratio_runs": [1.0, 1.0]}), releases.wall_row(
        {"key": "never", "label": "never", "error": "HarnessError: x"})],
        "nginx": []}
    logs = []
    for name, line in [
            ("a", {"suite": "forky", "mruby": "4.0.0-1",
                   "instructions": {"nginx cache": 2}}),
            ("b", {"suite": "next", "mruby": "10.0.0-1",
                   "instructions": {"nginx cache": 3}}),
            ("c", {"suite": "forky", "mruby": "4.0.0-1", "wall": wall,
                   "rounds": 3, "seconds": 6})]:
        path = tmp_path / name
        path.write_text("[ 1:00] releases: " + json.dumps(line) + "\n")
        logs.append(str(path))
    recs = releases.records(logs)
    assert [r["suite"] for r in recs] == ["forky", "next"]
    assert recs[0]["instructions"] == {"nginx cache": 2}
    assert "wall" in recs[0]
    table = releases.wall_table(recs, "apache", "the C module")
    assert "| never | failed |" in table
    assert "| C module | 1.000 (1.00-1.00) |" in table
