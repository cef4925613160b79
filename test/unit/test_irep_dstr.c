/*
 * Unit tests of the interpolation rewrite (mrb_irep_dstr.c): a rewritten
 * interpolation gives the String that mruby's OP_STRCAT gave, whatever
 * its pieces are and whatever their to_s does, in the order it did; the
 * expected values are mruby's without the rewrite (where a case compares
 * two forms, the second is one the rewrite leaves: a piece that is a
 * call, [v][0], ends a run).
 */

#include <stdio.h>
#include <string.h>

#include "lib_eval.h"
#include "mrb_interp.h"
#include "mrb_irep_dstr.h"
#include "unit.h"


typedef struct {
    const char  *code;
    const char  *expected;
} dstr_case;


/* Each case's code in a new interpreter's run, its value inspected. */
static void
dstr_check(const dstr_case *c)
{
    mrb_interp  *interp = lib_interp();

    REQUIRE(interp != NULL);

    for (; c->code != NULL; c++) {
        lib_expect(interp, __FILE__, __LINE__, c->code, c->expected, 0);
    }

    mrb_interp_close(interp);
}


static const dstr_case  dstr_same[] = {
    /* Strings and Integers: the one-allocation way */
    { "h = 'x'; a = 'agent'; n = 42\n"
      "\"host=#{h} agent=#{a} hits=#{n}\\n\"",
      "\"host=x agent=agent hits=42\\n\"" },
    { "i = -9223372036854775807 - 1; j = 0; k = -7\n"
      "\"a#{i}b#{j}c#{k}d\"",
      "\"a-9223372036854775808b0c-7d\"" },
    { "e = ''; l = 'l' * 30\n\"#{e}[#{l}]#{e}\"",
      "\"[llllllllllllllllllllllllllllll]\"" },
    { "a = 'z'\n\"\\0x#{a}\\xff#{a}\".bytes",
      "[0, 120, 122, 255, 122]" },
    /* anything else: converted as OP_STRCAT converts it */
    { "x = nil; y = :sym; z = 1.5; k = String; "
      "t = :\"with space\"\n\"a#{x}b#{y}c#{z}d#{k}e#{t}f\"",
      "\"absymc1.5dStringewith spacef\"" },
    { "o = Object.new\ndef o.to_s; 'O'; end\n"
      "\"<#{o}|#{o}>\"", "\"<O|O>\"" },
    { "o = Object.new\ndef o.to_s; 5; end\n"
      "a = (\"<#{o}>\" rescue $!.class)\n"
      "b = (\"<#{[o][0]}>\" rescue $!.class)\n"
      "a == b", "true" },
    /* more values than one template holds; a run cut by a call */
    { "v = 'x'\n\"#{v}#{v}#{v}#{v}#{v}#{v}#{v}#{v}#{v}#{v}"
      "#{v}#{v}#{v}#{v}#{v}#{v}#{v}#{v}#{v}#{v}.\"",
      "\"xxxxxxxxxxxxxxxxxxxx.\"" },
    { "a = 'A'\n\"1#{a}2#{a.downcase}3#{a}4#{a}5\"",
      "\"1A2a3A4A5\"" },
    /* in methods, blocks, loops; a new String at each run */
    { "def f(a, b); \"<#{a}|#{b}>\"; end\nf(1, 'two')",
      "\"<1|two>\"" },
    { "[1, 2].map { |x| y = x * 2; \"#{x}:#{y}!\" }",
      "[\"1:2!\", \"2:4!\"]" },
    { "a = 'v'; r = []; i = 0\n"
      "while i < 2\n  r << \"x#{a}y#{i}\"\n  i += 1\nend\n"
      "r[0] << '!'\n[r, r[0].frozen?]",
      "[[\"xvy0!\", \"xvy1\"], false]" },
    /* literal arrays, regexps, symbols, heredocs */
    { "a = 'q'\n[%W[x#{a}y#{a}z w], :\"s#{a}t#{a}u\"]",
      "[[\"xqyqz\", \"w\"], :sqtqu]" },
    { "n = 3\ns = <<~T\n  a #{n}\n  b #{n}\nT\ns",
      "\"a 3\\nb 3\\n\"" },
    { NULL, NULL }
};


TEST(irep_dstr_builds_the_same_strings)
{
    dstr_check(dstr_same);
}


/* The point of it: an interpolation of Strings and Integers makes its
 * result and nothing else (OP_STRCAT's way made 4 here: a String of each
 * literal and one of the Integer).  mruby 4.0's bytecode is not rewritten. */
#ifdef MRB_IREP_DSTR_REWRITES
static const dstr_case  dstr_one[] = {
    { "x = 'x'; n = 7\nGC.disable\n"
      "a = ObjectSpace.count_objects[:T_STRING]\n"
      "s = \"a#{x}b#{n}c\"\n"
      "b = ObjectSpace.count_objects[:T_STRING]\nGC.enable\n"
      "[s, b - a]", "[\"axb7c\", 1]" },
    { NULL, NULL }
};


TEST(irep_dstr_makes_one_string)
{
    dstr_check(dstr_one);
}
#endif


/* A to_s that changes a later piece (a variable through a block, a String
 * in place): seen where OP_STRCAT saw it. */
static const dstr_case  dstr_order[] = {
    { "x = 'before'; o = Object.new\n"
      "o.define_singleton_method(:to_s) { x = 'after'; 'o' }\n"
      "\"#{o}-#{x}-end\"", "\"o-after-end\"" },
    { "x = 'before'; o = Object.new\n"
      "o.define_singleton_method(:to_s) { x = 'after'; 'o' }\n"
      "\"#{x}-#{o}-end\"", "\"before-o-end\"" },
    { "x = 's'; o = Object.new\n"
      "o.define_singleton_method(:to_s) { x << '!'; 'o' }\n"
      "[\"#{x}-#{o}-#{x}\", x]", "[\"s-o-s!\", \"s!\"]" },
    { NULL, NULL }
};


TEST(irep_dstr_reads_each_piece_when_it_is_reached)
{
    dstr_check(dstr_order);
}


/* A script that finds the builder (ObjectSpace) and calls it itself gets
 * an ArgumentError, whatever its pool holds.  mruby 4.0 has no builder. */
#ifdef MRB_IREP_DSTR_REWRITES
static const dstr_case  dstr_reached[] = {
    { "r = []\nObjectSpace.each_object do |o|\n  begin\n"
      "    o.__send__(:\"(interpolation)\", 0)\n    r << :built\n"
      "  rescue NoMethodError\n  rescue ArgumentError => e\n"
      "    r << e.message\n  end\nend\nr.uniq",
      "[\"not an interpolation of this code\"]" },
    { NULL, NULL }
};


TEST(irep_dstr_builder_called_by_a_script_raises)
{
    dstr_check(dstr_reached);
}
#endif


/* An error converting a piece (raised in the builder's C, where
 * OP_STRCAT raised it) is reported on the interpolation's line. */
TEST(irep_dstr_error_names_the_line)
{
    mrb_interp  *interp = lib_interp();
    char         out[1024];

    REQUIRE(interp != NULL);

    /* lib_eval's wrapper puts the code from line 2 */
    CHECK(lib_eval(interp, "o = BasicObject.new\n\nx = 1\n\"a#{x}b#{o}c\"",
                   out, sizeof(out)) == -1);
    if (strstr(out, "TypeError") == NULL || strstr(out, "case:5") == NULL) {
        unit_fail(__FILE__, __LINE__, "error: %s", out);
    }

    mrb_interp_close(interp);
}


/* A run longer than a 16-bit jump reaches (a heredoc of thousands of short
 * lines, here 3,300 empty pieces of 10 bytes of code each): the jump over
 * its rest must land past it, not wrap backwards into it. */
TEST(irep_dstr_long_run_jumps_past_itself)
{
    mrb_interp  *interp = lib_interp();
    static char  code[64 + 3300 * 6];
    char        *p = code;
    int          i;

    REQUIRE(interp != NULL);

    p += sprintf(p, "x = 'v'\ns = \"<#{x}");
    for (i = 0; i < 3300; i++) {
        p += sprintf(p, "#{\"\"}");
    }
    sprintf(p, ">\"\n[s, s.size]");
    CHECK_RUBY(interp, code, "[\"<v>\", 3]");

    mrb_interp_close(interp);
}



/* A script that reaches the builder (ObjectSpace) and calls it with a
 * template of its own (its first literal, pool index 0) may name only the
 * registers under its call: those above are leftovers of earlier calls,
 * which the GC neither marks nor keeps (here an Integer of the Array
 * literal's; a String there could be freed while the result is made).
 * mruby 4.0 has no builder. */
#ifdef MRB_IREP_DSTR_REWRITES
static const dstr_case  dstr_forged[] = {
    { "t = \"\\x01\\0\\0\\0\\x1e\\0\\0\\x80\"\n"
      "c = nil\n"
      "ObjectSpace.each_object(Class) do |k|\n"
      "  c = k if k.instance_methods(false).include?(:\"(interpolation)\")\n"
      "end\n"
      "b = nil\n"
      "ObjectSpace.each_object(c) { |o| b = o }\n"
      "x = [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139]\n"
      "begin\n"
      "  b.__send__(:\"(interpolation)\", 0)\n"
      "rescue ArgumentError => e\n"
      "  e.message\n"
      "end",
      "\"not an interpolation of this code\"" },
    { NULL, NULL }
};


TEST(irep_dstr_builder_reads_no_register_above_its_call)
{
    dstr_check(dstr_forged);
}
#endif
