"""The Ruby API and its documentation agree: every method a running server
defines (under its server class, Redis and Kernel) is named in the section
of docs/apache.md, docs/nginx.md or docs/shared_state.md that documents its
class, and every method those sections name is defined.

The servers are asked, not the C tables: what a script sees is what counts
(mrblib's methods included).  A section documents the classes its heading
names in backticks or as a list (`Apache::Request`, `Nginx::Headers_in,
Nginx::Headers_out`; `Server::` stands for the server class); it names a method in backticks or
in a Ruby code block: `uri`, `uri=`, `uri = "/x"`, `r.uri`, `t[key] = v`,
`Nginx.rputs(str)`, `Kernel#server_name`.  In a paragraph that begins
"Read and write", a name documents its setter too."""

import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DOCS = {"apache": ["docs/apache.md", "docs/shared_state.md"],
        "nginx": ["docs/nginx.md", "docs/shared_state.md"]}
# where else `Kernel#name` may be documented (the standard library's
# Kernel methods are both servers'): every document of these directories
KERNEL_DOCS = ["docs", "src/lib"]

# Ruby's own protocol, documented by what it does (`X.new`, `var.name`)
PROTOCOL = {"initialize", "new", "method_missing", "respond_to_missing?"}
KEYWORDS = {"nil", "true", "false", "self"}

# what the API sections name besides methods: nginx's directives (and every
# mruby_* directive of ours), httpd's modules and functions
NOT_RUBY = {"error_log", "error_page", "listen", "proxy_pass", "rewrite",
            "root", "alias", "map", "try_files",
            "mod_proxy", "mod_proxy_http", "ap_set_content_type"}

# "Owner name" for every method this module adds, "class Owner Super" for
# every class, under the server class and Redis: one a line in out.
SURFACE = r'''
out = []
seen = {}
walk = lambda do |mod|
  next if seen[mod]
  seen[mod] = true
  out << "class #{mod} #{mod.is_a?(Class) ? mod.superclass : ''}"
  (mod.instance_methods(false) + mod.singleton_methods(false)).each do |m|
    out << "#{mod} #{m}"
  end
  mod.constants.each do |c|
    v = mod.const_get(c)
    walk.call(v) if v.is_a?(Module) && v.to_s.start_with?("#{mod}::")
  end
end
[get_server_class, Redis].each { |m| walk.call(m) }
Kernel.instance_methods(false).each { |m| out << "Kernel #{m}" }
'''

NAME = r"[a-z][a-z0-9_]*[?!]?"
CLASS = r"[A-Z][A-Za-z0-9_]*(?:::[A-Z][A-Za-z0-9_]*)*"


def plain_kernel():
    """Kernel's methods in mruby without this module."""
    out = subprocess.run(["mruby", "-e", "puts Kernel.instance_methods(false)"],
                         check=True, capture_output=True, text=True).stdout
    return set(out.split())


def parse_surface(lines):
    """{class: its own method names}, {class: superclass} from SURFACE."""
    defined, supers = {}, {}
    plain = plain_kernel()
    for line in lines:
        kind, name = line.split(" ", 1)
        if kind == "class":
            cls, _, sup = name.partition(" ")
            defined.setdefault(cls, set())
            supers[cls] = sup.strip()
        elif kind != "Kernel" or name not in plain:
            defined.setdefault(kind, set()).add(name)
    return defined, supers


def ancestors(cls, supers):
    while cls:
        yield cls
        cls = supers.get(cls)


def call_name(span):
    """(receiver or None, method) that a backtick span names, or None."""
    span = " ".join(span.split())
    if re.search(r"\.(c|h|rb|md|so)$", span):
        return None  # a file
    m = re.fullmatch(rf"({CLASS})#({NAME}=?)(\(.*\))?", span)
    if m:
        return m.group(1), m.group(2)
    recv, var = None, False
    m = re.match(rf"({CLASS})\.", span)
    if m:
        recv, span = m.group(1), span[m.end():]
    else:
        m = re.match(rf"{NAME}(\.(?=[a-z])|(?=\[))", span)
        if m:
            var, span = True, span[m.end():]
    m = re.fullmatch(r"\[\]=?(\(.*\))?|\[[^\]]*\](\s*=\s*.*)?", span)
    if m and (var or span.startswith("[]")):
        setter = span.startswith("[]=") or m.group(2) is not None
        return recv, "[]=" if setter else "[]"
    if re.fullmatch(rf"{NAME}\s*=\s*{CLASS}\.new.*", span):
        return None  # a variable: r = Apache::Request.new
    m = re.fullmatch(rf"({NAME})(=|\s*=(\s*[^=].*)?)?(\(.*\))?", span)
    # a name of NOT_RUBY with an argument list is a call: `error_log(l, m)`
    if m and m.group(1).startswith("mruby_") and not m.group(4):
        return None
    if m and (m.group(1) not in KEYWORDS | NOT_RUBY or m.group(4)):
        return recv, m.group(1) + ("=" if m.group(2) else "")
    return None


def code_names(code):
    """(receiver or None, method) of each call in a Ruby code block."""
    names = []
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', code)
    code = re.sub(r"#.*", "", code)
    for m in re.finditer(rf"(?<![\w:])({CLASS}|{NAME})\.({NAME})(\s*=(?!=))?",
                         code):
        recv = m.group(1) if m.group(1)[0].isupper() else None
        names.append((recv, m.group(2) + ("=" if m.group(3) else "")))
    for m in re.finditer(r"\b[a-z_]\w*\[[^\]]*\](\s*=(?!=))?", code):
        names.append((None, "[]=" if m.group(1) else "[]"))
    return names


def kernel_docs():
    for d in KERNEL_DOCS:
        top = os.path.join(ROOT, d)
        for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
            if name.endswith(".md"):
                yield f"{d}/{name}"


def sections(path):
    """(heading, body) of each section of a document;
    fenced blocks other than Ruby (configuration, shell) left out."""
    lines, fence = [], None
    for line in open(os.path.join(ROOT, path)):
        if line.startswith("```"):
            if fence is None:
                fence = line[3:].strip()
            else:
                line, fence = ("```\n" if fence == "ruby" else ""), None
                lines.append(line)
                continue
        if fence is None or fence == "ruby":
            lines.append(line)
    parts = re.split(r"^#{1,4} (.*)$", "".join(lines), flags=re.M)
    for i in range(1, len(parts), 2):
        yield parts[i], parts[i + 1]


def heading_classes(heading):
    """The classes a heading names: those in backticks ("`Apache` (class
    methods)"), or a heading that is a list of class names
    ("Nginx::Connection, Nginx::Server"); prose that mentions a server
    ("When scripts run, next to Apache's own modules") names none."""
    if "`" in heading:
        return [c for span in re.findall(r"`([^`]+)`", heading)
                for c in re.findall(CLASS, span)]
    if re.fullmatch(rf"{CLASS}(, {CLASS})*( \(.*\))?", heading.strip()):
        return re.findall(CLASS, heading.split(" (")[0])
    return []


def documented(kind, server_class):
    """{class: names} the docs give, and [(where, class, name)] for checks."""
    docs, named = {}, []

    def add(where, cls, name):
        docs.setdefault(cls, set()).add(name)
        named.append((where, cls, name))

    for path in kernel_docs():
        if path not in DOCS[kind]:
            text = open(os.path.join(ROOT, path)).read()
            for name in re.findall(rf"`Kernel#({NAME})", text):
                docs.setdefault("Kernel", set()).add(name)

    for path in DOCS[kind]:
        for heading, body in sections(path):
            where = f"{path}, {heading}"
            subjects = [re.sub(r"^Server(?=::|$)", server_class, c)
                        for c in heading_classes(heading)]
            subjects = [c for c in subjects
                        if c.split("::")[0] in (server_class, "Redis")]
            found = []
            for block in re.findall(r"^```ruby\n(.*?)^```", body,
                                    re.S | re.M):
                found += code_names(block)
            body = re.sub(r"^```ruby\n.*?^```", "", body, flags=re.S | re.M)
            for para in re.split(r"\n\s*\n", body):
                if para.lstrip().startswith("Read and write"):
                    # the list, without what its parentheses say
                    for span in re.findall(r"`([^`]+)`",
                                           re.sub(r"\([^()]*\)", "", para)):
                        n = call_name(span)
                        if n and n[0] is None:
                            found.append((None, n[1] + "="))
                for span in re.findall(r"`([^`]+)`", para):
                    n = call_name(span)
                    if n:
                        found.append(n)
            for recv, name in found:
                if recv is not None:
                    recv = re.sub(r"^Server(?=::|$)", server_class, recv)
                    add(where, recv, name)
                else:
                    for c in subjects:
                        add(where, c, name)
    return docs, named


def compare(kind, defined, supers, server_class):
    """The defined methods no section documents (for the class or one of
    its subclasses), and the documented names no class of theirs has."""
    docs, named = documented(kind, server_class)

    def documented_for(cls, name):
        return any(name in docs.get(c, set()) for c in defined
                   if cls in ancestors(c, supers))

    def has(cls, name):  # method_missing answers any name
        return any({name, "method_missing"} & defined.get(c, set())
                   for c in ancestors(cls, supers))

    # a name starting with "__" is the library's own (Cache's calls into
    # SharedDict, Mutex's bookkeeping), as in src/lib/*.rb
    undocumented = sorted(
        f"{cls} {name}" for cls, names in defined.items()
        for name in names - PROTOCOL
        if not name.startswith("__") and not documented_for(cls, name))

    # a section that documents several classes: each name is one's
    by_name = {}
    for where, cls, name in named:
        if name not in PROTOCOL and (cls in defined or cls == "Kernel"):
            by_name.setdefault((where, name), set()).add(cls)
    undefined = sorted(
        f"{'/'.join(sorted(classes))} {name} ({where})"
        for (where, name), classes in by_name.items()
        if not any(has(c, name) for c in classes))
    return undocumented, undefined


def report(undocumented, undefined):
    msg = []
    if undocumented:
        msg.append("defined but not documented:\n  "
                   + "\n  ".join(undocumented))
    if undefined:
        msg.append("documented but not defined:\n  " + "\n  ".join(undefined))
    return "\n".join(msg)


def apache_surface(apache):
    a = apache("<Location /s>\n    mrubyHandlerMiddle {dir}/s.rb\n</Location>",
               files={"s.rb": SURFACE + "Apache.rputs out.join(\"\\n\")"})
    r = a.get("/s")
    assert r.status_code == 200, a.error_log()[-2000:]
    return r.text.splitlines()


def nginx_surface(nginx):
    stream = ("mruby_stream_init_worker {dir}/stream.rb;\n"
              "server { listen 127.0.0.1:{port2}; return \"x\"; }")
    n = nginx("server {\n    listen 127.0.0.1:{port};\n"
              "    location /s { mruby_content_handler {dir}/s.rb; }\n}",
              stream_conf=stream,
              files={"s.rb": SURFACE + "Nginx.rputs out.join(\"\\n\")",
                     # stream scripts have no response: one log line each
                     "stream.rb": SURFACE + "out.each { |l| Nginx::Stream.log"
                                  " Nginx::Stream::LOG_NOTICE, \"surface: #{l}\" }"})
    r = n.get("/s")
    assert r.status_code == 200, n.error_log()[-2000:]
    n.wait_log("surface: class Nginx::Stream::Connection")
    stream_lines = re.findall(r"surface: (.*?)(?:,|$)", n.error_log(), re.M)
    return r.text.splitlines() + stream_lines


@pytest.mark.parametrize("kind", ["apache", "nginx"])
def test_every_method_documented_and_every_documented_method_defined(
        kind, apache, nginx):
    server_class = "Apache" if kind == "apache" else "Nginx"
    lines = apache_surface(apache) if kind == "apache" else nginx_surface(nginx)
    defined, supers = parse_surface(lines)
    assert f"{server_class}::Request" in defined and "Redis" in defined

    undocumented, undefined = compare(kind, defined, supers, server_class)
    assert not undocumented and not undefined, report(undocumented, undefined)


def test_the_check_sees_a_missing_and_an_invented_method():
    """The comparison itself: a method the docs lack, a name they invent."""
    defined = {"Nginx": {"rputs", "echo", "not_in_docs"},
               "Nginx::Request": {"uri", "uri="}}
    undocumented, undefined = compare("nginx", defined, {}, "Nginx")
    assert "Nginx not_in_docs" in undocumented
    assert "Nginx rputs" not in undocumented
    assert any(u.startswith("Nginx::Request args ") for u in undefined)
