/*
 * Regexp, MatchData and the String methods that take a pattern
 * (src/lib/mrb_regexp*.c, mrb_matchdata.c, regexp.rb): a compatibility
 * list, each case an expression and what CRuby 3.x gives for it.
 */

#include <stdio.h>
#include <string.h>
#include <mruby.h>

#include "lib_eval.h"
#include "mrb_interp.h"
#include "unit.h"

typedef struct {
    const char  *code;
    const char  *expected;
} lib_case;

static const lib_case  regexp_cases[] = {
    /* literals, options, the pattern itself */
    { "/\\.php$/ =~ '/index.php'", "6" },
    { "'/a.html' =~ /\\.php$/", "nil" },
    { "%r{^/api/(\\d+)} =~ '/api/42'", "0" },
    { "/ABC/i =~ 'xabc'", "1" },
    { "/a.c/m =~ \"a\\nc\"", "0" },
    { "/a.c/ =~ \"a\\nc\"", "nil" },
    { "/a b c/x =~ 'abc'", "0" },
    { "/a#{1 + 1}b/ =~ 'xa2b'", "1" },
    { "/ab+/i.source", "\"ab+\"" },
    { "/ab+/mix.options", "7" },
    { "/ab/i.inspect", "\"/ab/i\"" },
    { "%r{a/b}.inspect", "\"/a\\\\/b/\"" },
    { "/ab/i.to_s", "\"(?i-mx:ab)\"" },
    { "/ab/mix.to_s", "\"(?mix:ab)\"" },
    { "/ab/i.casefold?", "true" },
    { "/a/ == /a/", "true" },
    { "/a/ == /a/i", "false" },
    { "Regexp.new('a+b', Regexp::IGNORECASE) =~ 'AAB'", "0" },
    { "Regexp.new('a', true).options", "1" },
    { "Regexp.escape('a.b*c?(d) [e] {f} ^$|+-#\\\\')",
      "\"a\\\\.b\\\\*c\\\\?\\\\(d\\\\)\\\\ \\\\[e\\\\]\\\\ \\\\{f\\\\}\\\\ "
      "\\\\^\\\\$\\\\|\\\\+\\\\-\\\\#\\\\\\\\\"" },
    { "Regexp.escape(\"\\n\\t\\r\\f\\v/\")",
      "\"\\\\n\\\\t\\\\r\\\\f\\\\v/\"" },
    { "Regexp.quote('1.5')", "\"1\\\\.5\"" },
    { "Regexp.union('a.b', /c/i) =~ 'xxC'", "2" },
    { "Regexp.union('a.b', 'c').source", "\"a\\\\.b|c\"" },
    { "Regexp.union.source", "\"(?!)\"" },
    { "begin; Regexp.new('a('); rescue RegexpError => e; e.class; end",
      "RegexpError" },
    { "/(?<y>\\d+)-(?<m>\\d+)/.names", "[\"y\", \"m\"]" },
    { "/(?<y>\\d+)-(?<m>\\d+)/.named_captures",
      "{\"y\"=>[1], \"m\"=>[2]}" },

    /* =~ !~ match match? === */
    { "'foo' !~ /o/", "false" },
    { "'foo' !~ /x/", "true" },
    { "/o/.match?('foo')", "true" },
    { "/o/.match?(nil)", "false" },
    { "'foo'.match?(/x/)", "false" },
    { "/o/.match('foo', 2).begin(0)", "2" },
    { "/o/.match('foo', 3)", "nil" },
    { "/a/.match(nil)", "nil" },
    { "'foo'.match('o.').to_s", "\"oo\"" },
    { "'foo'.match(/(o)/) { |m| m[1] * 2 }", "\"oo\"" },
    { "case '/img/a.png' when /\\.css$/ then 1 when /\\.png$/ then 2 end",
      "2" },
    { "/a/ === :cat", "true" },
    { "/a/ === 12", "false" },
    { ":cat =~ /t/", "2" },

    /* MatchData */
    { "m = /(\\d+)-(\\d+)/.match('tel 03-1234 x'); "
      "[m[0], m[1], m[2], m[-1], m[3]]",
      "[\"03-1234\", \"03\", \"1234\", \"1234\", nil]" },
    { "m = /(?<y>\\d+)-(?<m>\\d+)/.match('2024-05'); "
      "[m[:y], m['m'], m.named_captures, m.names]",
      "[\"2024\", \"05\", {\"y\"=>\"2024\", \"m\"=>\"05\"}, [\"y\", \"m\"]]" },
    { "m = /b(c)/.match('abcd'); [m.pre_match, m.post_match, m.captures, "
      "m.to_a, m.to_s, m.begin(0), m.end(0), m.begin(1), m.offset(1), "
      "m.size]",
      "[\"a\", \"d\", [\"c\"], [\"bc\", \"c\"], \"bc\", 1, 3, 2, [2, 3], 2]" },
    { "m = /(a)|(b)/.match('b'); [m[1], m.begin(1), m.captures]",
      "[nil, nil, [nil, \"b\"]]" },
    { "m = /(.)(.)(.)/.match('abc'); [m[1, 2], m[1..], m.values_at(1, 3)]",
      "[[\"a\", \"b\"], [\"a\", \"b\", \"c\"], [\"a\", \"c\"]]" },
    { "/(?<x>a)/.match('a').inspect", "\"#<MatchData \\\"a\\\" x:\\\"a\\\">\"" },
    { "/(a)(b)?/.match('a').inspect",
      "\"#<MatchData \\\"a\\\" 1:\\\"a\\\" 2:nil>\"" },
    { "begin; /a/.match('a')[:nope]; rescue IndexError => e; e.message; end",
      "\"undefined group name reference: nope\"" },
    { "/b/.match('abc').string", "\"abc\"" },
    { "/b/.match('abc').regexp", "/b/" },
    { "m = /(a)(b)/.match('ab').dup; [m[2], m.regexp, m.string, m.size]",
      "[\"b\", /(a)(b)/, \"ab\", 3]" },
    { "m = /(?<x>a)|(?<x>b)/.match('b'); [m[:x], m.begin('x')]",
      "[\"b\", 0]" },
    { "begin; MatchData.allocate; rescue NoMethodError => e; e.class; end",
      "NoMethodError" },
    /* a MatchData keeps its String and Regexp alive: nothing else holds
     * these (a subclass's pattern is not in the literal cache) */
    { "m = Class.new(Regexp).new('(\\w+)@').match('user' + '@host'); "
      "GC.start; 200.times { 'x' * 40 }; GC.start; "
      "[m[1], m.post_match, m.regexp.source]",
      "[\"user\", \"host\", \"(\\\\w+)@\"]" },

    /* the match globals */
    { "'key=value' =~ /(\\w+)=(\\w+)/; [$~[0], $1, $2, $3, $&, $`, $', $+]",
      "[\"key=value\", \"key\", \"value\", nil, \"key=value\", \"\", \"\", "
      "\"value\"]" },
    { "'ab' =~ /x/; [$~, $1]", "[nil, nil]" },
    { "'xaby' =~ /a(b)/; [Regexp.last_match(0), Regexp.last_match(1), "
      "Regexp.last_match.pre_match]", "[\"ab\", \"b\", \"x\"]" },
    { "case 'v1.2' when /v(\\d+)\\.(\\d+)/ then [$1, $2] end",
      "[\"1\", \"2\"]" },
    { "'a1b22'.gsub(/\\d+/) { $&.size.to_s }", "\"a1b2\"" },
    { "'john smith'.gsub(/(\\w)(\\w*)/) { \"#{$1.upcase}#{$2}\" }",
      "\"John Smith\"" },
    { "'x'.sub(/(x)/, 'y'); $1", "\"x\"" },
    { "/(a)/.match?('a'); $1", "nil" },

    /* sub gsub and their bang forms */
    { "'hello world'.sub(/o/, '0')", "\"hell0 world\"" },
    { "'hello world'.gsub(/o/, '0')", "\"hell0 w0rld\"" },
    { "'hello'.gsub(/l/) { |s| s.upcase }", "\"heLLo\"" },
    { "'cat hat'.gsub(/[ch]at/, 'cat' => 'dog', 'hat' => 'cap')",
      "\"dog cap\"" },
    { "'2024-05-06'.sub(/(\\d+)-(\\d+)-(\\d+)/, '\\3/\\2/\\1')",
      "\"06/05/2024\"" },
    { "'2024-05'.sub(/(?<y>\\d+)-(?<m>\\d+)/, '\\k<m>.\\k<y>')",
      "\"05.2024\"" },
    { "'abc'.sub(/b/, \"[\\\\0|\\\\&|\\\\`|\\\\'|\\\\\\\\]\")",
      "\"a[b|b|a|c|\\\\]c\"" },
    { "'abc'.gsub(/x*/, '-')", "\"-a-b-c-\"" },
    { "'abc'.gsub(//, '.')", "\".a.b.c.\"" },
    { "'héllo'.gsub(//, '.') == '.h.é.l.l.o.'", "true" },
    { "'aaa'.sub(/a/) { 'b' }", "\"baa\"" },
    { "s = 'abc'; [s.sub!(/x/, 'y'), s]", "[nil, \"abc\"]" },
    { "s = 'abc'; [s.gsub!(/[ac]/, '*'), s]", "[\"*b*\", \"*b*\"]" },
    { "s = 'abc'; s.sub!(/b/) { 'B' }; s", "\"aBc\"" },
    { "'a.b.c'.gsub('.', '-')", "\"a-b-c\"" },
    { "'a.b'.sub('.', '-')", "\"a-b\"" },
    { "'path/to/file'.gsub(%r{/}, '::')", "\"path::to::file\"" },
    { "'a-b'.gsub(/(-)/, '\\\\1\\\\1')", "\"a--b\"" },
    { "'Hello'.gsub(/l/, 'L' => 'x')", "\"Heo\"" },

    /* scan split */
    { "'a1b22c333'.scan(/\\d+/)", "[\"1\", \"22\", \"333\"]" },
    { "'k1=v1;k2=v2'.scan(/(\\w+)=(\\w+)/)",
      "[[\"k1\", \"v1\"], [\"k2\", \"v2\"]]" },
    { "r = []; 'abc'.scan(/./) { |c| r << c }; r", "[\"a\", \"b\", \"c\"]" },
    { "'a.b.c'.scan('.')", "[\".\", \".\"]" },
    { "'abc'.scan(//)", "[\"\", \"\", \"\", \"\"]" },
    { "'a, b,c ,d'.split(/\\s*,\\s*/)", "[\"a\", \"b\", \"c\", \"d\"]" },
    { "'a,b,,c,,'.split(/,/)", "[\"a\", \"b\", \"\", \"c\"]" },
    { "'a,b,,c,,'.split(/,/, -1)", "[\"a\", \"b\", \"\", \"c\", \"\", \"\"]" },
    { "'a,b,c,d'.split(/,/, 2)", "[\"a\", \"b,c,d\"]" },
    { "',a'.split(/,/)", "[\"\", \"a\"]" },
    { "'abc'.split(//)", "[\"a\", \"b\", \"c\"]" },
    { "'a1b2c'.split(/(\\d)/)", "[\"a\", \"1\", \"b\", \"2\", \"c\"]" },
    { "'a,b'.split(/,*/)", "[\"a\", \"b\"]" },
    { "''.split(/,/)", "[]" },
    { "' a  b '.split(/ /)", "[\"\", \"a\", \"\", \"b\"]" },
    { "' a  b '.split(' ')", "[\"a\", \"b\"]" },
    { "'a b'.split", "[\"a\", \"b\"]" },
    { "'a-b'.split('-')", "[\"a\", \"b\"]" },
    { "'abc'.split(/b/, 1)", "[\"abc\"]" },

    /* index rindex slice [] start_with? partition rpartition */
    { "'hello'.index(/l+/)", "2" },
    { "'hello'.index(/l/, 3)", "3" },
    { "'hello'.index(/z/)", "nil" },
    { "'hello'.rindex(/l/)", "3" },
    { "'hello'.rindex(/l/, 2)", "2" },
    { "'hello'.index('l')", "2" },
    { "'hello'.rindex('l')", "3" },
    { "'hello'[/l+o/]", "\"llo\"" },
    { "'key: val'[/(\\w+): (\\w+)/, 2]", "\"val\"" },
    { "'2024-05'[/(?<m>\\d+)$/, 'm']", "\"05\"" },
    { "'hello'.slice(/e(l)/, 1)", "\"l\"" },
    { "'hello'[/z/]", "nil" },
    { "'hello'[1, 2]", "\"el\"" },
    { "'hello'[1..]", "\"ello\"" },
    { "'hello'.slice(0)", "\"h\"" },
    { "'hello'.start_with?(/h.l/)", "true" },
    { "'hello'.start_with?(/l/)", "false" },
    { "'hello'.start_with?('he')", "true" },
    { "'a=b=c'.partition(/=/)", "[\"a\", \"=\", \"b=c\"]" },
    { "'a=b=c'.rpartition(/=/)", "[\"a=b\", \"=\", \"c\"]" },
    { "'abc'.partition(/x/)", "[\"abc\", \"\", \"\"]" },
    { "'abc'.rpartition(/x/)", "[\"\", \"\", \"abc\"]" },
    { "'a=b'.partition('=')", "[\"a\", \"=\", \"b\"]" },
    { "begin; 'a' =~ 'a'; rescue TypeError => e; e.class; end",
      "TypeError" },

    /* bytes that are not UTF-8 */
    { "begin; \"\\xff\" =~ /a/; rescue ArgumentError => e; e.message; end",
      "\"invalid byte sequence in UTF-8\"" },
    { "\"\\xff\" =~ /\\xff/n", "0" },
    { "begin; \"ab\\xe3\".index(/b/, 1); rescue ArgumentError; :bad; end",
      ":bad" },
    { "begin; \"a\\xe3\".gsub(/a/, 'b'); rescue ArgumentError; :bad; end",
      ":bad" },
    /* with a named group, plain groups do not capture (Ruby's rule; they
     * did here, so captures, size and \\2 differed from CRuby) */
    { "m = /(?<a>x)(y)/.match('xy'); [m.captures, m.size, m.to_a, "
      "'xy'.sub(/(?<a>x)(y)/, '[\\2]'), 'xy'.sub(/(?<a>x)(y)/, '[\\k<a>]'), "
      "/(x)(y)/.match('xy').captures]",
      "[[\"x\"], 2, [\"xy\", \"x\"], \"[]\", \"[x]\", [\"x\", \"y\"]]" },
    /* the arguments, read without mrb_get_args in the common calls */
    { "[->{ Regexp.new }, ->{ Regexp.new('a', nil, nil, 1) }, "
      "->{ /a/.=~('a', 1) }, ->{ /a/ === ['a', 1] }, ->{ /a/.match }, "
      "->{ /a/.match?('a', 0, 1) }].map { |f| "
      "begin; f.call; rescue ArgumentError; :argument_error; end }",
      "[:argument_error, :argument_error, :argument_error, false, "
      ":argument_error, :argument_error]" },
    { "[/b/.match('abcb') { |m| m.begin(0) }, /b/.match('abcb', 2).begin(0), "
      "/b/.match?('abcb', 2), /b/.match?('abc', 2), Regexp.new('x', 'i').options, "
      "Regexp.new('x', nil, 'n').options, Regexp.new(/y/).source]",
      "[1, 3, true, false, 1, 32, \"y\"]" },
    { NULL, NULL }
};


TEST(lib_regexp_compatibility)
{
    mrb_interp      *interp = lib_interp();
    const lib_case  *c;

    REQUIRE(interp != NULL);
    for (c = regexp_cases; c->code != NULL; c++) {
        CHECK_RUBY(interp, c->code, c->expected);
    }
    mrb_interp_close(interp);
}


/* A literal in a script run again is the same object: compiled once. */
TEST(lib_regexp_literal_compiled_once)
{
    mrb_interp  *interp = lib_interp();

    REQUIRE(interp != NULL);
    CHECK_RUBY(interp, "a = []; 2.times { a << /x(y)/i }; "
                       "a[0].equal?(a[1])", "true");
    CHECK_RUBY(interp, "/x(y)/i.frozen?", "true");
    /* a pattern made from request data shares no slot it should not */
    CHECK_RUBY(interp, "(1..600).map { |i| /v#{i}/ =~ \"v#{i}\" }.uniq",
               "[0]");
    mrb_interp_close(interp);
}


/* $~ and $1 set by one request are gone in the next one. */
TEST(lib_regexp_globals_do_not_outlive_the_run)
{
    mrb_interp  *interp = lib_interp();

    REQUIRE(interp != NULL);
    CHECK_RUBY(interp, "'secret-token' =~ /(\\w+)-/; $1", "\"secret\"");
    CHECK_RUBY(interp, "[$~, $1, Regexp.last_match]", "[nil, nil, nil]");
    mrb_interp_close(interp);
}


/*
 * A pattern from the request cannot take the machine stack: the parse
 * depth a compile may use comes from the stack left, a chain of \\g calls
 * counts too, and a MatchData of 32,765 groups looks a name up in place.
 * On a coroutine's 256 KB each of these overflowed before.
 */
TEST(lib_regexp_compile_depth_comes_from_the_stack_left)
{
    static const char  *nested =
        "begin; Regexp.new('(' * 1500 + 'a' + ')' * 1500) =~ 'a'; "
        "rescue RegexpError => e; e.message[/parse depth limit \\d+/] "
        "&& :refused; end";
    static const char  *calls =
        "src = (0...300).map { |i| \"(?<a#{i}>x|\\\\g<a#{i + 1}>)\" }.join "
        "+ '(?<a300>y)'; "
        "begin; Regexp.new(src) =~ 'x' * 300 + 'y'; "
        "rescue RegexpError => e; e.message[/too many subexpression calls/] "
        "&& :refused; end";
    static const char  *groups =
        "m = Regexp.new('(?<x>a)' * 32765).match('a' * 32765); "
        "[m.size, m[:x], m['x'], m.begin(:x)]";
    mrb_interp  *interp = lib_interp();

    REQUIRE(interp != NULL);
    CHECK_RUBY_ON_COROUTINE(interp, nested, ":refused");
    CHECK_RUBY(interp, nested, "0");
    CHECK_RUBY_ON_COROUTINE(interp, calls, ":refused");
    CHECK_RUBY(interp, calls, "0");
    CHECK_RUBY_ON_COROUTINE(interp, groups, "[32766, \"a\", \"a\", 32764]");

    /* an ordinary pattern compiles on a coroutine as anywhere */
    CHECK_RUBY_ON_COROUTINE(interp,
        "Regexp.new('\\A(?<y>\\d{4})-(\\d\\d)(?:-((?:[a-z]|\\d)+))?\\z') "
        "=~ '2024-05-ab1'", "0");
    mrb_interp_close(interp);
}


/* Runaway backtracking stops at the retry limits with a RegexpError that
 * names the limit, and what backtracks little still matches. */
TEST(lib_regexp_backtracking_stops_at_the_retry_limits)
{
    mrb_interp  *interp = lib_interp();

    REQUIRE(interp != NULL);
    CHECK_RUBY(interp,
        "begin; (('a' * 23 + '!') * 60) =~ /(a+)+$/; "
        "rescue RegexpError => e; e.message; end",
        "\"backtracking limit hit: more than 1000000 retries at one "
        "position (retry_limit_in_match): /(a+)+$/\"");
    CHECK_RUBY(interp,
        "begin; (('a' * 17 + '!') * 400) =~ /(a+)+$/; "
        "rescue RegexpError => e; e.message; end",
        "\"backtracking limit hit: more than 10000000 retries in one "
        "search (retry_limit_in_search): /(a+)+$/\"");
    CHECK_RUBY(interp,
        "s = '\"' + 'x\\\\\"' * 100_000 + '\"'; "
        "(s =~ /\"((?:[^\"\\\\]|\\\\.)*)\"/) && $1.size", "300000");
    /* and the next search of the run is served */
    CHECK_RUBY(interp,
        "begin; (('a' * 23 + '!') * 60) =~ /(a+)+$/; rescue RegexpError; end; "
        "'abc' =~ /b/", "1");
    mrb_interp_close(interp);
}


BENCH(lib_regexp_route_10_matches)
{
    mrb_interp  *interp = lib_interp();
    char         out[256];
    uint64_t     t0;
    int          i, n = 20000;
    const char  *code =
        "u = '/api/v2/users/12345/profile'\n"
        "r = 0\n"
        "r += 1 if u =~ /^\\/static\\//\n"
        "r += 1 if u =~ /\\.(css|js|png)$/\n"
        "r += 1 if u =~ /^\\/api\\/v\\d+\\//\n"
        "r += 1 if u =~ /users\\/(\\d+)/\n"
        "r += 1 if u =~ /^\\/admin/\n"
        "r += 1 if u =~ /profile$/\n"
        "r += 1 if u =~ /\\/login/\n"
        "r += 1 if u =~ /^\\/health$/\n"
        "r += 1 if u =~ /v2/\n"
        "r += 1 if u =~ /\\d{5}/\n"
        "r";

    REQUIRE(interp != NULL);
    REQUIRE(lib_eval(interp, code, out, sizeof(out)) == 0);
    CHECK(strcmp(out, "5") == 0);

    t0 = unit_now_ns();
    for (i = 0; i < n; i++) {
        lib_eval(interp, code, out, sizeof(out));
    }
    unit_report("route script, 10 regexp matches (incl. compile of script)",
                (double) (unit_now_ns() - t0) / n / 1000.0, "us/run");
    mrb_interp_close(interp);
}


/* The match globals belong to the run that matched, whatever a startup
 * script matched or assigned: they are never sealed globals whose new
 * values would stay for the next run. */
TEST(lib_regexp_match_globals_are_the_runs_own_after_a_startup_match)
{
    mrb_interp  *interp = lib_interp_startup(
        "\"boot\" =~ /(b)oot/\n$boot = $1\n$~ = $~\n");

    REQUIRE(interp != NULL);
    CHECK_RUBY(interp, "\"#{$boot} #{$1.inspect} #{$~.inspect} "
               "#{$+.inspect}\"", "\"b nil nil nil\"");
    CHECK_RUBY(interp, "'tok=a' =~ /tok=(\\w)/\n$1", "\"a\"");
    CHECK_RUBY(interp, "[$1, $~, $&]", "[nil, nil, nil]");
    mrb_interp_close(interp);
}
