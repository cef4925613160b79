/*
 * A tiny unit test framework for the core.
 *
 *   TEST(name) { CHECK(x == 1); REQUIRE(p != NULL); ... }
 *   BENCH(name) { ... unit_report("incr", 0.31, "us/call"); }
 *
 * Tests register themselves (a constructor per test) and run in the order
 * they are written, each in a process of its own under a time limit.
 * Benchmarks run only with --bench.  A failed CHECK records file:line and
 * the expression and goes on; a failed REQUIRE also returns from the test.
 * Checks belong in the test's process: a child it forks reports through its
 * exit status.
 */

#ifndef UNIT_H
#define UNIT_H

#include <stddef.h>
#include <stdint.h>

typedef struct unit_test_s  unit_test;

struct unit_test_s {
    const char  *name;
    const char  *file;
    void       (*fn)(void);
    int          bench;
    unit_test   *next;
};

void unit_register(unit_test *t);
void unit_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prints one benchmark figure. */
void unit_report(const char *what, double value, const char *unit);

/* Monotonic time in ns. */
uint64_t unit_now_ns(void);

/* Waits for the child pid: its exit status, or -1 if it did not exit (a
 * signal killed it). */
int unit_child_status(int pid);

/* Appends len bytes to the C string in buf (size bytes): 0, or -1 when
 * they do not fit (buf unchanged).  What a test's server writes or logs. */
int unit_append(char *buf, size_t size, const char *data, size_t len);

#define UNIT_DEFINE(name, is_bench)                                         \
    static void name(void);                                                 \
    static unit_test unit_##name = { #name, __FILE__, name, is_bench, 0 };  \
    __attribute__((constructor)) static void unit_register_##name(void)     \
    {                                                                       \
        unit_register(&unit_##name);                                        \
    }                                                                       \
    static void name(void)

#define TEST(name)   UNIT_DEFINE(name, 0)
#define BENCH(name)  UNIT_DEFINE(name, 1)

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            unit_fail(__FILE__, __LINE__, "%s", #cond);                     \
        }                                                                   \
    } while (0)

#define REQUIRE(cond)                                                       \
    do {                                                                    \
        if (!(cond)) {                                                      \
            unit_fail(__FILE__, __LINE__, "%s", #cond);                     \
            return;                                                         \
        }                                                                   \
    } while (0)

/* Integer equality, printing both sides. */
#define CHECK_EQ(a, b)                                                      \
    do {                                                                    \
        long long unit_a_ = (long long) (a), unit_b_ = (long long) (b);     \
        if (unit_a_ != unit_b_) {                                           \
            unit_fail(__FILE__, __LINE__, "%s == %s (%lld != %lld)",        \
                      #a, #b, unit_a_, unit_b_);                            \
        }                                                                   \
    } while (0)

#endif /* UNIT_H */
