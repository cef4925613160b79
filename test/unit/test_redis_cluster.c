/*
 * Unit tests of the cluster's key slots (mrb_redis_cluster.h): CRC16 as
 * Redis computes it (the values are redis-cli's CLUSTER KEYSLOT) and the
 * hash tag rules of Redis's keyHashSlot.
 */

#include "mrb_redis_cluster.h"
#include "unit.h"

#define SLOT(s)  mrb_redis_cluster_key_slot(s, sizeof(s) - 1)


TEST(redis_cluster_key_slot_is_crc16_of_the_key)
{
    CHECK(SLOT("") == 0);
    CHECK(SLOT("a") == 15495);
    CHECK(SLOT("b") == 3300);
    CHECK(SLOT("foo") == 12182);
    CHECK(SLOT("123456789") == 12739);       /* CRC16/XMODEM 0x31c3 */
    CHECK(SLOT("\xff\x00z") == mrb_redis_cluster_key_slot("\xff\x00z", 3));
    CHECK(SLOT("\xff\x00z") != SLOT("\xff"));
}


TEST(redis_cluster_key_slot_hashes_the_first_hash_tag)
{
    CHECK(SLOT("{user1}:a") == SLOT("user1"));
    CHECK(SLOT("{user1}:a") == 8106);
    CHECK(SLOT("x{user1}y{z}") == SLOT("user1"));
    CHECK(SLOT("{a}{b}") == SLOT("a"));
    CHECK(SLOT("{a{b}") == SLOT("a{b"));     /* the first } after the { */
    /* no tag: an empty one, or an unclosed one, hash the whole key */
    CHECK(SLOT("{}a") != SLOT("{}b"));
    CHECK(SLOT("{}a") == 10875);
    CHECK(SLOT("{a") != SLOT("a"));
    CHECK(SLOT("a}") != SLOT("a"));
}
