/*
 * Userdata, ENV, Process, Dir, Uname, StringIO, Set, Kernel#sleep,
 * catch/throw and exit (src/lib): what CRuby and the originals' gems give.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib_eval.h"
#include "mrb_mruby_version.h"
#include "unit.h"

typedef struct {
    const char  *code;
    const char  *expected;
} lib_case;

static const lib_case  sys_cases[] = {
    { "ENV['LIB_TEST_VAR']", "\"from C\"" },
    { "ENV.fetch('LIB_TEST_NONE', 'dflt')", "\"dflt\"" },
    { "ENV['LIB_TEST_SET'] = 'x'; [ENV['LIB_TEST_SET'], "
      "ENV.key?('LIB_TEST_SET'), ENV.delete('LIB_TEST_SET'), "
      "ENV['LIB_TEST_SET']]", "[\"x\", true, \"x\", nil]" },
    { "ENV.to_hash['LIB_TEST_VAR']", "\"from C\"" },
    { "ENV.keys.include?('LIB_TEST_VAR')", "true" },
    { "begin; ENV.fetch('LIB_TEST_NONE'); rescue KeyError; :k; end", ":k" },

    { "Process.pid == File.open('/proc/self/stat') { |f| f.read }"
      ".split(' ')[0].to_i", "true" },
    { "Process.ppid > 0", "true" },
    { "Process.kill(0, Process.pid)", "1" },
    { "Process.kill(:EXIT, Process.pid)", "1" },
    { "begin; Process.kill('NOPE', 1); rescue ArgumentError => e; "
      "e.message; end", "\"unsupported signal 'SIGNOPE'\"" },

    { "Dir.exist?('/tmp')", "true" },
    { "Dir.exist?('/etc/passwd')", "false" },
    { "d = '/tmp/lib_dir_test'; Dir.mkdir(d) unless Dir.exist?(d); "
      "File.open(d + '/a', 'w') { |f| f.write('x') }; "
      "r = [Dir.children(d), Dir.entries(d).sort, Dir.glob(d + '/*')]; "
      "File.delete(d + '/a'); Dir.delete(d); r + [Dir.exist?(d)]",
      "[[\"a\"], [\".\", \"..\", \"a\"], [\"/tmp/lib_dir_test/a\"], false]" },
    { "Dir.chdir('/tmp') { Dir.pwd }", "\"/tmp\"" },
    { "begin; Dir.entries('/nonexistent'); rescue SystemCallError => e; "
      "e.message; end", "\"/nonexistent: No such file or directory\"" },

    { "Uname.sysname", "\"Linux\"" },
    { "Uname.machine.empty?", "false" },

    { "io = StringIO.new(\"a\\nb\\n\"); [io.gets, io.read, io.eof?]",
      "[\"a\\n\", \"b\\n\", true]" },
    { "io = StringIO.new; io.write('ab'); io << 'c'; io.puts 'd'; "
      "io.print 1, 2; io.string", "\"abcd\\n12\"" },
    { "io = StringIO.new('hello'); [io.read(2), io.read(10), io.read(1), "
      "io.read]", "[\"he\", \"llo\", nil, \"\"]" },
    { "StringIO.new(\"x\\ny\").each_line.to_a", "[\"x\\n\", \"y\"]" },
    /* mruby 3.1.0's < and > are wrong for 2**62 and more: such a
     * position read the string from its start */
    { "io = StringIO.new('abc'); io.seek(1); [io.read(1), io.pos]",
      "[\"b\", 2]" },
    { "io = StringIO.new('abc'); begin; io.pos = 2**62; rescue "
      "ArgumentError => e; [e.message, io.read]; end",
      "[\"invalid position: 4611686018427387904\", \"abc\"]" },
    { "io = StringIO.new('abc'); begin; io.seek(-1); rescue ArgumentError; "
      "io.pos; end", "0" },

    { "s = Set.new([1, 2, 2, 3]); [s.size, s.include?(2), s.to_a]",
      "[3, true, [1, 2, 3]]" },
    { "(Set[1, 2] | Set[2, 3]).to_a", "[1, 2, 3]" },
    { "(Set[1, 2] & [2, 3]).to_a", "[2]" },
    { "(Set[1, 2] - [2]).to_a", "[1]" },
    { "[Set[1].subset?(Set[1, 2]), Set[1, 2] == Set[2, 1], "
      "Set[1].add?(1)]", "[true, true, nil]" },
#if MRUBY_RELEASE_NO >= 40000
    { "Set[1, 2].inspect", "\"Set[1, 2]\"" },     /* mruby's own Set */
#else
    { "Set[1, 2].inspect", "\"#<Set: {1, 2}>\"" },
#endif
    { "[1, 1].to_set.size", "1" },

    { "t = Time.now; r = sleep(0.05); [r, Time.now - t >= 0.05]",
      "[0, true]" },
    { "usleep(1000)", "1000" },
    { "begin; sleep(-1); rescue ArgumentError; :neg; end", ":neg" },

    { "catch(:done) { 10.times { |i| throw :done, i if i == 3 }; :never }",
      "3" },
    { "catch { |tag| throw tag }", "nil" },
    { "catch(:a) { catch(:b) { throw :a, 1 }; 2 }", "1" },
    { "catch(:x) { begin; throw :x, 5; rescue => e; :rescued; end }", "5" },
    { "begin; throw :nope; rescue UncaughtThrowError => e; e.message; end",
      "\"uncaught throw :nope\"" },

    { "begin; exit; rescue SystemExit => e; [e.status, e.class]; end",
      "[0, SystemExit]" },
    { "begin; exit 3; rescue => e; :bare; rescue SystemExit => e; "
      "e.status; end", "3" },
    { "begin; abort('bye'); rescue SystemExit => e; e.message; end",
      "\"bye\"" },
    { NULL, NULL }
};


TEST(lib_sys_compatibility)
{
    mrb_interp      *interp;
    const lib_case  *c;

    setenv("LIB_TEST_VAR", "from C", 1);
    interp = lib_interp();
    REQUIRE(interp != NULL);
    for (c = sys_cases; c->code != NULL; c++) {
        CHECK_RUBY(interp, c->code, c->expected);
    }
    mrb_interp_close(interp);
}


/* The owner of a Mutex is the run that locked it (mrb_mutex.c): a run
 * that ends holding a startup Mutex lets it go. */
TEST(lib_mutex_owner_is_the_run)
{
    mrb_interp  *interp = lib_interp_startup("L = Mutex.new\n");

    REQUIRE(interp != NULL);
    CHECK_RUBY(interp, "L.lock; [L.locked?, L.owned?]", "[true, true]");
    CHECK_RUBY(interp, "[L.locked?, L.owned?, L.synchronize { L.owned? }]",
               "[false, false, true]");
    CHECK_RUBY(interp, "begin; L.unlock; rescue ThreadError => e; "
               "e.message; end",
               "\"attempt to unlock a mutex which is not locked\"");
    CHECK_RUBY(interp, "L.lock; begin; L.lock; rescue ThreadError => e; "
               "e.message; end", "\"deadlock; recursive locking\"");
    CHECK_RUBY(interp, "L.try_lock", "true");
    mrb_interp_close(interp);
}


/* exit in a script fails that run with a clear message; the process and
 * the interpreter go on. */
TEST(lib_exit_ends_the_run_not_the_process)
{
    mrb_interp  *interp = lib_interp();
    char         out[1024];

    REQUIRE(interp != NULL);
    CHECK(lib_eval(interp, "exit 2", out, sizeof(out)) == -1);
    CHECK(strstr(out, "SystemExit: exit(2) called in a script: the request "
                      "ends here, the server's worker does not") != NULL);
    CHECK_RUBY(interp, "1 + 1", "2");
    mrb_interp_close(interp);
}


/* Userdata keeps its values across requests; globals do not survive. */
TEST(lib_userdata_survives_isolation)
{
    mrb_interp  *interp = lib_interp();

    REQUIRE(interp != NULL);
    CHECK_RUBY(interp, "u = Userdata.new; u.count = 5; u.name = 'x'; "
                       "Userdata.new('other').count = 9; $g = 1; u.count",
               "5");
    CHECK_RUBY(interp, "u = Userdata.new; [u.count, u.name, u[:count], "
                       "Userdata.new('other').count, u.nothing, $g]",
               "[5, \"x\", 5, 9, nil, nil]");
    mrb_interp_close(interp);
}


static const lib_case  more_cases[] = {
    { "P = Data.define(:x, :y); a = P.new(x: 1, y: 2); b = P.new(1, 2); "
      "[a == b, a.x, a.frozen?, a.with(y: 5).to_h, a.inspect]",
      "[true, 1, true, {:x=>1, :y=>5}, \"#<data P x=1, y=2>\"]" },
    { "Q = Data.define(:a); begin; Q.new; rescue ArgumentError => e; "
      "e.message; end", "\"missing keyword: :a\"" },
    { "[1, 2].chain([3], 4..5).to_a", "[1, 2, 3, 4, 5]" },
    { "([1].each + [2]).to_a", "[1, 2]" },
    { "class Q2; extend Forwardable; def_delegators :@a, :size, :first; "
      "def_delegator :@a, :last, :final; def initialize; @a = [7, 8]; end; "
      "end; q = Q2.new; [q.size, q.first, q.final]", "[2, 7, 8]" },
    { NULL, NULL }
};


TEST(lib_data_chain_forwardable)
{
    mrb_interp      *interp = lib_interp();
    const lib_case  *c;

    REQUIRE(interp != NULL);
    for (c = more_cases; c->code != NULL; c++) {
        CHECK_RUBY(interp, c->code, c->expected);
    }
    mrb_interp_close(interp);
}
