/*
 * Unit tests of the process's cluster slot maps (mrb_redis_slots.h): one
 * map per name, readings and MOVED, the replica a process reads from,
 * the limits, the first reading's claim, and readers that never see a
 * slot without a node while a writer replaces the map.
 */

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mrb_redis_slots.h"
#include "unit.h"

#define ERRLEN  256


static const char  *seven000[] = { "127.0.0.1:7000", "127.0.0.1:7003",
                                   "127.0.0.1:7004" };
static const char  *seven001[] = { "127.0.0.1:7001" };


/* 0-8191 on 7000 (replicas 7003 and 7004), 8192-16383 on 7001 */
static int
load_two(mrb_redis_slots *m, char *err)
{
    mrb_redis_slots_range  r[2] = {
        { 0, 8191, seven000, 3 },
        { 8192, 16383, seven001, 1 }
    };

    return mrb_redis_slots_load(m, r, 2, err, ERRLEN);
}


TEST(redis_slots_one_map_per_name)
{
    mrb_redis_slots  *a, *b, *c;

    a = mrb_redis_slots_hold("127.0.0.1:7000");
    b = mrb_redis_slots_hold("127.0.0.1:7000");
    c = mrb_redis_slots_hold("127.0.0.1:7000 user");
    REQUIRE(a != NULL && c != NULL);
    CHECK(a == b);
    CHECK(a != c);
    CHECK(!mrb_redis_slots_loaded(a));
    CHECK(mrb_redis_slots_master(a, 0) == MRB_REDIS_SLOTS_NONE);

    mrb_redis_slots_give_back(b);
    /* a still holds it: the same map */
    b = mrb_redis_slots_hold("127.0.0.1:7000");
    CHECK(a == b);
    mrb_redis_slots_give_back(a);
    mrb_redis_slots_give_back(b);
    mrb_redis_slots_give_back(c);
}


TEST(redis_slots_a_reading_names_each_slots_nodes)
{
    char              err[ERRLEN];
    unsigned          n7000, n7001, replicas[4];
    mrb_redis_slots  *m = mrb_redis_slots_hold("reading");

    REQUIRE(m != NULL);
    REQUIRE(load_two(m, err) == 0);
    CHECK(mrb_redis_slots_loaded(m));
    CHECK(mrb_redis_slots_nodes(m) == 4);

    n7000 = mrb_redis_slots_find(m, "127.0.0.1:7000");
    n7001 = mrb_redis_slots_find(m, "127.0.0.1:7001");
    CHECK(mrb_redis_slots_master(m, 0) == n7000);
    CHECK(mrb_redis_slots_master(m, 8191) == n7000);
    CHECK(mrb_redis_slots_master(m, 8192) == n7001);
    CHECK(mrb_redis_slots_master(m, 16383) == n7001);
    CHECK(strcmp(mrb_redis_slots_address(m, n7001), "127.0.0.1:7001") == 0);
    CHECK(mrb_redis_slots_address(m, 4) == NULL);
    CHECK(mrb_redis_slots_find(m, "127.0.0.1:9") == MRB_REDIS_SLOTS_NONE);

    /* the replica this process reads from: by its pid, among two */
    CHECK(strcmp(mrb_redis_slots_address(m, mrb_redis_slots_replica(m, 5)),
                 seven000[1 + getpid() % 2]) == 0);
    CHECK(mrb_redis_slots_replica(m, 9000) == MRB_REDIS_SLOTS_NONE);

    CHECK(mrb_redis_slots_replicas(m, n7000, replicas, 4) == 2);
    CHECK(strcmp(mrb_redis_slots_address(m, replicas[1]),
                 "127.0.0.1:7004") == 0);
    CHECK(mrb_redis_slots_replicas(m, n7001, replicas, 4) == 0);
    CHECK(mrb_redis_slots_replicas(m, MRB_REDIS_SLOTS_NONE, replicas, 4)
          == 0);

    mrb_redis_slots_give_back(m);
}


TEST(redis_slots_a_new_reading_replaces_the_map)
{
    char                    err[ERRLEN];
    unsigned                n7001;
    mrb_redis_slots        *m = mrb_redis_slots_hold("replaced");
    mrb_redis_slots_range   r = { 100, 200, seven001, 1 };

    REQUIRE(m != NULL);
    REQUIRE(load_two(m, err) == 0);
    n7001 = mrb_redis_slots_find(m, "127.0.0.1:7001");

    REQUIRE(mrb_redis_slots_load(m, &r, 1, err, sizeof(err)) == 0);
    CHECK(mrb_redis_slots_master(m, 150) == n7001);
    CHECK(mrb_redis_slots_replica(m, 150) == MRB_REDIS_SLOTS_NONE);
    CHECK(mrb_redis_slots_master(m, 0) == MRB_REDIS_SLOTS_NONE);
    CHECK(mrb_redis_slots_master(m, 9000) == MRB_REDIS_SLOTS_NONE);
    /* a node keeps its number */
    CHECK(mrb_redis_slots_find(m, "127.0.0.1:7001") == n7001);
    CHECK(mrb_redis_slots_nodes(m) == 4);

    mrb_redis_slots_give_back(m);
}


TEST(redis_slots_moved_changes_one_slot)
{
    char              err[ERRLEN];
    unsigned          n7001, n7002;
    mrb_redis_slots  *m = mrb_redis_slots_hold("moved");

    REQUIRE(m != NULL);
    REQUIRE(load_two(m, err) == 0);
    n7001 = mrb_redis_slots_find(m, "127.0.0.1:7001");

    /* to a known master, without replicas: reads go to it */
    REQUIRE(mrb_redis_slots_move(m, 10, "127.0.0.1:7001", err,
                                 sizeof(err)) == 0);
    CHECK(mrb_redis_slots_master(m, 10) == n7001);
    CHECK(mrb_redis_slots_replica(m, 10) == MRB_REDIS_SLOTS_NONE);
    CHECK(mrb_redis_slots_master(m, 11) != n7001);

    /* to a node never seen: added */
    REQUIRE(mrb_redis_slots_move(m, 9000, "127.0.0.1:7002", err,
                                 sizeof(err)) == 0);
    n7002 = mrb_redis_slots_find(m, "127.0.0.1:7002");
    CHECK(n7002 == 4);
    CHECK(mrb_redis_slots_master(m, 9000) == n7002);

    /* back to 7000, whose replicas the map knows */
    REQUIRE(mrb_redis_slots_move(m, 9000, "127.0.0.1:7000", err,
                                 sizeof(err)) == 0);
    CHECK(mrb_redis_slots_replica(m, 9000) == mrb_redis_slots_replica(m, 0));

    CHECK(mrb_redis_slots_move(m, 16384, "127.0.0.1:7000", err,
                               sizeof(err)) == -1);
    CHECK(strcmp(err, "no slot 16384") == 0);

    mrb_redis_slots_give_back(m);
}


TEST(redis_slots_refuses_what_it_cannot_hold)
{
    char                    err[ERRLEN], addr[32];
    unsigned                i;
    mrb_redis_slots        *m = mrb_redis_slots_hold("limits");
    mrb_redis_slots_range   bad[] = {
        { 10, 5, seven001, 1 },
        { 0, 16384, seven001, 1 },
        { 0, 1, seven001, 0 },
    };

    REQUIRE(m != NULL);

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(mrb_redis_slots_load(m, &bad[i], 1, err, sizeof(err)) == -1);
        CHECK(strncmp(err, "a range of slots", 16) == 0);
    }
    CHECK(!mrb_redis_slots_loaded(m));

    for (i = 0; i < MRB_REDIS_SLOTS_NODES_MAX; i++) {
        snprintf(addr, sizeof(addr), "10.0.%u.%u:6379", i / 256, i % 256);
        REQUIRE(mrb_redis_slots_move(m, i % MRB_REDIS_SLOTS_COUNT, addr,
                                     err, sizeof(err)) == 0);
    }

    CHECK(mrb_redis_slots_move(m, 0, "10.1.0.0:6379", err, sizeof(err))
          == -1);
    CHECK(strcmp(err, "more than 2048 node addresses") == 0);
    /* a known one still moves */
    CHECK(mrb_redis_slots_move(m, 0, "10.0.0.5:6379", err, sizeof(err))
          == 0);

    mrb_redis_slots_give_back(m);
}


TEST(redis_slots_one_claim_at_a_time)
{
    mrb_redis_slots  *m = mrb_redis_slots_hold("claim");

    REQUIRE(m != NULL);
    CHECK(mrb_redis_slots_claim(m, 100, 200) == 1);
    CHECK(mrb_redis_slots_claim(m, 150, 250) == 0);
    /* a claim that ran out is taken over */
    CHECK(mrb_redis_slots_claim(m, 200, 300) == 1);
    mrb_redis_slots_unclaim(m);
    CHECK(mrb_redis_slots_claim(m, 201, 300) == 1);

    mrb_redis_slots_give_back(m);
}


/* Reader thread: every slot's master is one of the two nodes, never
 * none, however the writer's readings interleave with its loads. */
typedef struct {
    mrb_redis_slots  *m;
    int               stop;
    long              none;
} reader_arg;


static void *
reader(void *p)
{
    unsigned     s;
    reader_arg  *a = p;

    while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
        for (s = 0; s < MRB_REDIS_SLOTS_COUNT; s++) {
            if (mrb_redis_slots_master(a->m, s) == MRB_REDIS_SLOTS_NONE
                || mrb_redis_slots_address(a->m,
                       mrb_redis_slots_master(a->m, s)) == NULL)
            {
                a->none++;
            }
        }
    }

    return NULL;
}


TEST(redis_slots_readers_see_a_node_while_a_reading_replaces_the_map)
{
    char                    err[ERRLEN];
    int                     i;
    pthread_t               t;
    reader_arg              a;
    mrb_redis_slots_range   one = { 0, 16383, seven000, 3 },
                            two = { 0, 16383, seven001, 1 };

    a.m = mrb_redis_slots_hold("readers");
    a.stop = 0;
    a.none = 0;
    REQUIRE(a.m != NULL);
    REQUIRE(mrb_redis_slots_load(a.m, &one, 1, err, sizeof(err)) == 0);
    REQUIRE(pthread_create(&t, NULL, reader, &a) == 0);

    for (i = 0; i < 200; i++) {
        CHECK(mrb_redis_slots_load(a.m, i % 2 ? &one : &two, 1, err,
                                   sizeof(err)) == 0);
        CHECK(mrb_redis_slots_move(a.m, (unsigned) i, "127.0.0.1:7002",
                                   err, sizeof(err)) == 0);
    }

    __atomic_store_n(&a.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK(a.none == 0);

    mrb_redis_slots_give_back(a.m);
}
