/*
 * JSON (src/lib/mrb_json.c, json.rb): a compatibility list, each case an
 * expression and what CRuby 3.x with its json gives for it.
 */

#include <stdio.h>
#include <string.h>

#include "lib_eval.h"
#include "unit.h"

typedef struct {
    const char  *code;
    const char  *expected;
} lib_case;

static const lib_case  json_cases[] = {
    /* parse */
    { "JSON.parse('{\"a\":1,\"b\":[true,false,null],\"c\":\"x\"}')",
      "{\"a\"=>1, \"b\"=>[true, false, nil], \"c\"=>\"x\"}" },
    { "JSON.parse('{\"a\":{\"b\":2}}', symbolize_names: true)",
      "{:a=>{:b=>2}}" },
    { "JSON.parse('[1.5, -2, 1e3, 0.1]')", "[1.5, -2, 1000.0, 0.1]" },
    { "JSON.parse('\"\\\\u00e9\\\\n\\\\\"\\\\/\"') == \"\\u00e9\\n\\\"/\"",
      "true" },
    { "JSON.parse('\"\\\\ud83d\\\\ude00\"').bytes.size", "4" },
    { "JSON.parse('null')", "nil" },
    { "JSON.parse('12')", "12" },
    { "JSON.parse('{\"a\":1,\"a\":2}')", "{\"a\"=>2}" },
    { "JSON.parse('{\"k\":\"a\\\\u0000b\"}')['k'].size", "3" },
    { "begin; JSON.parse('{\"a\":}'); rescue JSON::ParserError => e; "
      "e.class; end", "JSON::ParserError" },
    { "begin; JSON.parse(''); rescue JSON::ParserError; :err; end", ":err" },
    { "begin; JSON.parse('[NaN]'); rescue JSON::ParserError; :err; end",
      ":err" },
    { "JSON::ParserError.ancestors.include?(StandardError)", "true" },
    { "begin; JSON.parse('[' * 101 + ']' * 101); "
      "rescue JSON::NestingError => e; e.message; end",
      "\"nesting of 101 is too deep\"" },
    { "JSON.parse('[' * 101 + ']' * 101, max_nesting: false).size", "1" },
    { "JSON.load(nil)", "nil" },
    /* what RFC 8259 refuses, each a ParserError */
    { "['[1,]', '{\"a\" 1}', '01', '1.', '-', '.5', '1e', '[1] x', "
      "'\"abc', '\"\\\\x\"', '\"\\\\ud800\"', '\"\\\\udc00x\"', "
      "\"\\\"a\\tb\\\"\", \"\\\"\\xff\\\"\", '{\"a\":1,}', 'tru', "
      "'[1 2]', '{1:2}', '99999999999999999999', ' '].map { |s| "
      "begin; JSON.parse(s); :accepted; rescue JSON::ParserError; :refused; "
      "end }.uniq", "[:refused]" },
    { "JSON.parse(' [ 1 , -0 , 2.5e-3 , 1E2 , \"\" ] ')",
      "[1, 0, 0.0025, 100.0, \"\"]" },
    { "JSON.parse('\"\\\\u00e9\\\\t\\\\u0041\"').bytes",
      "[195, 169, 9, 65]" },
    { "JSON.parse('-9223372036854775808')", "-9223372036854775808" },
    { "JSON.parse('[' * 3000 + ']' * 3000, max_nesting: false).size", "1" },
    { "JSON.parse('{\"k\":{\"n\":[{}]}}', symbolize_names: true)",
      "{:k=>{:n=>[{}]}}" },
    { "JSON.load('[1]')", "[1]" },
    /* raw UTF-8 of 2, 3 and 4 bytes, without and with an escape; an
     * overlong form and a surrogate refused */
    { "JSON.parse(\"\\\"\\u00e9\\u20ac\\u{1f600}\\\"\").bytes.size", "9" },
    { "JSON.parse(\"\\\"\\u00e9\\\\n\\u{1f600}\\\"\").bytes.size", "7" },
    { "[\"\\\"\\xc0\\xaf\\\"\", \"\\\"\\xed\\xa0\\x80\\\"\"].map { |s| "
      "begin; JSON.parse(s); :accepted; rescue JSON::ParserError; :refused; "
      "end }", "[:refused, :refused]" },

    /* generate: CRuby's bytes */
    { "JSON.generate({'a' => 1, :b => [1, 2.5, nil, true], 'c' => 'x'})",
      "\"{\\\"a\\\":1,\\\"b\\\":[1,2.5,null,true],\\\"c\\\":\\\"x\\\"}\"" },
    { "JSON.generate('a/b')", "\"\\\"a/b\\\"\"" },
    { "JSON.generate(\"q\\\"\\\\\\b\\f\\n\\r\\t\\x01\\x1f\\x7f\")",
      "\"\\\"q\\\\\\\"\\\\\\\\\\\\b\\\\f\\\\n\\\\r\\\\t\\\\u0001\\\\u001f\\x7f\\\"\"" },
    { "JSON.generate('é') == '\"é\"'", "true" },
    { "JSON.generate([1.0, 100.0, 1.0e20, -0.5])",
      "\"[1.0,100.0,1.0e+20,-0.5]\"" },
    /* the fewest digits that read back as the same Float; mruby's
     * Float#to_s keeps 15, and "8.03333333333333" read back as another
     * number (found by fuzz_lib_json_regexp) */
    { "JSON.generate(JSON.parse('[0.1, 0.30000000000000004, 1.5e-07]'))",
      "\"[0.1,0.30000000000000004,1.5e-07]\"" },
    { "x = JSON.parse('[8.0333333333333333]'); "
      "JSON.parse(JSON.generate(x)) == x", "true" },
    /* the short form when it reads back as the same mruby Float: a word
     * boxed Float drops low bits, so the value that "9.67" reads as was
     * written as 9.669999999999995 (16 digits).  (mruby's own literals
     * are read by another routine than strtod: 0.85 in Ruby code is not
     * the Float JSON's "0.85" is.) */
    { "JSON.generate(JSON.parse('[9.67, 8.92, -9.1, 73359.646, 0.0001, "
      "1.5e-4, 100.0, 1.0e14, 187.45, 0.85]'))",
      "\"[9.67,8.92,-9.1,73359.646,0.0001,0.00015,100.0,"
      "100000000000000.0,187.45,0.85]\"" },
    { "a = (1..400).map { |i| i / 7.0 } + (1..400).map { |i| i * 1.37 }; "
      "JSON.parse(JSON.generate(a)) == a", "true" },
    /* numbers read without strtod when exact, and with it when not */
    { "JSON.generate(JSON.parse('[1e22, 1e23, 0.1e1, 1E-22, 123.456, -0.0, "
      "123456789012345678, 1234567890123456789, 0.000001234, "
      "1234567890.12345, 1234567890.123456]'))",
      "\"[1.0e+22,1.0e+23,1.0,1.0e-22,123.456,-0.0,123456789012345678,"
      "1234567890123456789,1.234e-06,1234567890.12345,1234567890.123456]\"" },
    /* keys are frozen Strings, as a Hash makes them; values are not */
    { "h = JSON.parse('{\"a\":\"b\",\"c\\n\":[\"d\"]}'); "
      "[h.keys.map(&:frozen?), h['a'].frozen?, h[\"c\\n\"][0].frozen?]",
      "[[true, true], false, false]" },
    /* a to_json that changes the Hash being written: the rest is written
     * by the keys it has then (run under ASan too) */
    { "class Mut; def initialize(h); @h = h; end; "
      "def to_json(*); 20.times { |i| @h[\"k#{i}\"] = i }; '\"m\"'; end; "
      "end; h = {'a' => 1}; h['b'] = Mut.new(h); h['c'] = 3; "
      "JSON.generate(h) == '{\"a\":1,\"b\":\"m\",\"c\":3,' + "
      "(0..19).map { |i| \"\\\"k#{i}\\\":#{i}\" }.join(',') + '}'",
      "true" },
    { "JSON.generate({1 => 2, nil => 3})", "\"{\\\"1\\\":2,\\\"\\\":3}\"" },
    { "JSON.generate(:sym)", "\"\\\"sym\\\"\"" },
    { "JSON.generate([])", "\"[]\"" },
    { "JSON.generate({})", "\"{}\"" },
    { "begin; JSON.generate([0.0 / 0]); rescue JSON::GeneratorError => e; "
      "e.message; end", "\"NaN not allowed in JSON\"" },
    { "begin; JSON.generate(\"\\xff\"); rescue JSON::GeneratorError => e; "
      "e.class; end", "JSON::GeneratorError" },
    { "a = []; a << a; begin; JSON.generate(a); "
      "rescue JSON::NestingError => e; e.message; end",
      "\"nesting of 101 is too deep\"" },
    { "JSON.pretty_generate({'a' => 1, 'b' => [1, 2], 'c' => {}, 'd' => []})",
      "\"{\\n  \\\"a\\\": 1,\\n  \\\"b\\\": [\\n    1,\\n    2\\n  ],\\n  "
      "\\\"c\\\": {},\\n  \\\"d\\\": []\\n}\"" },
    { "JSON.dump({'a' => nil})", "\"{\\\"a\\\":null}\"" },

    /* to_json */
    { "{'a' => [1, 'x']}.to_json", "\"{\\\"a\\\":[1,\\\"x\\\"]}\"" },
    { "[1, nil].to_json", "\"[1,null]\"" },
    { "'x'.to_json", "\"\\\"x\\\"\"" },
    { "nil.to_json", "\"null\"" },
    { "1.5.to_json", "\"1.5\"" },
    { "class Pt; def initialize(x); @x = x; end; "
      "def to_json(*a); {'x' => @x}.to_json; end; end; "
      "JSON.generate([Pt.new(3)])", "\"[{\\\"x\\\":3}]\"" },
    { "class Pl; def to_s; 'plain'; end; end; JSON.generate([Pl.new])",
      "\"[\\\"plain\\\"]\"" },
    { "JSON.parse(JSON.generate({'k' => \"v\\u00e9\\n\"})) == "
      "{'k' => \"v\\u00e9\\n\"}", "true" },
    { NULL, NULL }
};


TEST(lib_json_compatibility)
{
    mrb_interp      *interp = lib_interp();
    const lib_case  *c;

    REQUIRE(interp != NULL);
    for (c = json_cases; c->code != NULL; c++) {
        CHECK_RUBY(interp, c->code, c->expected);
    }
    mrb_interp_close(interp);
}


/*
 * With max_nesting false, 0 or negative, both ways stop at the machine
 * stack left: on a thread's stack (8 MB here) and on a coroutine's 256 KB,
 * where 1,700 levels of parse overflowed before.
 */
TEST(lib_json_nesting_stops_at_the_stack_left)
{
    static const char  *self_contained =
        "a = []; a << a; [false, 0, -1].map { |m| "
        "begin; JSON.generate(a, max_nesting: m); "
        "rescue JSON::NestingError => e; e.message[/machine stack left/]; "
        "end }";
    static const char  *self_contained_out =
        "[\"machine stack left\", \"machine stack left\", "
        "\"machine stack left\"]";
    static const char  *deep_parse =
        "begin; JSON.parse('[' * 400_000 + ']' * 400_000, max_nesting: false); "
        "rescue JSON::NestingError => e; e.message[/machine stack left/]; end";
    mrb_interp  *interp = lib_interp();

    REQUIRE(interp != NULL);
    CHECK_RUBY(interp, self_contained, self_contained_out);
    CHECK_RUBY_ON_COROUTINE(interp, self_contained, self_contained_out);
    CHECK_RUBY_ON_COROUTINE(interp,
        "a = []; a << a; begin; JSON.pretty_generate({'a' => a}, "
        "max_nesting: false); rescue JSON::NestingError => e; "
        "e.message[/machine stack left/]; end", "\"machine stack left\"");
    CHECK_RUBY(interp, deep_parse, "\"machine stack left\"");
    CHECK_RUBY_ON_COROUTINE(interp, deep_parse, "\"machine stack left\"");

    /* what fits still parses (at -O2 1,345 levels, under ASan 635), and
     * the next run is served */
    CHECK_RUBY_ON_COROUTINE(interp,
        "JSON.parse('[' * 500 + ']' * 500, max_nesting: false).size", "1");
    CHECK_RUBY(interp,
        "JSON.parse('[' * 20_000 + ']' * 20_000, max_nesting: false).size",
        "1");
    mrb_interp_close(interp);
}


BENCH(lib_json_parse_generate_1k)
{
    mrb_interp  *interp = lib_interp();
    char         out[256];
    uint64_t     t0;
    int          n = 2000;

    REQUIRE(interp != NULL);
    t0 = unit_now_ns();
    if (lib_eval(interp,
        "users = (1..12).map do |i|\n"
        "  { 'id' => i, 'name' => \"user#{i}\", 'email' => \"u#{i}@example.com\",\n"
        "    'active' => i % 2 == 1, 'score' => i * 1.5, 'tags' => ['a', 'b'] }\n"
        "end\n"
        "d = JSON.generate({ 'users' => users })\n"
        "2000.times { JSON.generate(JSON.parse(d)) }\n"
        "d.size", out, sizeof(out)) != 0)
    {
        unit_fail(__FILE__, __LINE__, "%s", out);
        return;
    }
    printf("  document: %s bytes\n", out);
    unit_report("JSON.parse + JSON.generate of the document",
                (double) (unit_now_ns() - t0) / n / 1000.0, "us");
    mrb_interp_close(interp);
}
