/*
 * Redis::Cluster's C half: which of the cluster's 16384 slots a command
 * goes to, the commands as methods, and the steady state's path.  The
 * routing (the slot map, MOVED, ASK, TRYAGAIN, failures) is Ruby, in
 * mrblib/redis_cluster.rb, over one ::Redis object per node, so that
 * every wait is a ::Redis wait (on nginx, on the event loop).
 *
 * The slot map itself is the process's (mrb_redis_slots.h): a SlotMap
 * object holds it for its interpreter, with that interpreter's ::Redis
 * object of each node (@node_objs, by the map's node numbers), and this
 * file gives SlotMap its C methods.
 *
 * The steady state is C: a command whose keys are Strings goes straight
 * to the ::Redis object of the node the map names for their slot (its
 * master, or for a read with replica: true its replica), through
 * mrb_redis_command; the Ruby half runs only when there is something to
 * decide (no map yet, a node this interpreter has no object for, a
 * suspect node, an error reply, a lost connection).  In Ruby, the same
 * GET took 1.19 times the instructions of a GET through ::Redis
 * (bench/callgrind_redis.py).
 *
 * A key's slot is CRC16 (XMODEM: polynomial 0x1021, initial 0) of the key,
 * or of its hash tag (what is between the first "{" and the next "}" after
 * it, when not empty), modulo 16384: Redis's own keyHashSlot
 * (src/cluster.c).  A command's slot is the slot of its keys, found by
 * its name in redis_cluster_keys; keys in different slots are refused
 * here, before anything is sent, with a message that says what to do.
 */

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/error.h>
#include <mruby/hash.h>
#include <mruby/string.h>
#include <mruby/variable.h>
#include "mrb_api.h"
#include "mrb_redis.h"
#include "mrb_redis_cluster.h"
#include "mrb_redis_conn.h"
#include "mrb_redis_slots.h"

#define REDIS_CLUSTER_SLOTS     MRB_REDIS_SLOTS_COUNT
#define REDIS_CLUSTER_NAME_MAX  32     /* longest command name we look up */


static const uint16_t  redis_crc16_table[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7,
    0x8108, 0x9129, 0xa14a, 0xb16b, 0xc18c, 0xd1ad, 0xe1ce, 0xf1ef,
    0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
    0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de,
    0x2462, 0x3443, 0x0420, 0x1401, 0x64e6, 0x74c7, 0x44a4, 0x5485,
    0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
    0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4,
    0xb75b, 0xa77a, 0x9719, 0x8738, 0xf7df, 0xe7fe, 0xd79d, 0xc7bc,
    0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
    0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b,
    0x5af5, 0x4ad4, 0x7ab7, 0x6a96, 0x1a71, 0x0a50, 0x3a33, 0x2a12,
    0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
    0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41,
    0xedae, 0xfd8f, 0xcdec, 0xddcd, 0xad2a, 0xbd0b, 0x8d68, 0x9d49,
    0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
    0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78,
    0x9188, 0x81a9, 0xb1ca, 0xa1eb, 0xd10c, 0xc12d, 0xf14e, 0xe16f,
    0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
    0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e,
    0x02b1, 0x1290, 0x22f3, 0x32d2, 0x4235, 0x5214, 0x6277, 0x7256,
    0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
    0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405,
    0xa7db, 0xb7fa, 0x8799, 0x97b8, 0xe75f, 0xf77e, 0xc71d, 0xd73c,
    0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
    0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab,
    0x5844, 0x4865, 0x7806, 0x6827, 0x18c0, 0x08e1, 0x3882, 0x28a3,
    0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
    0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92,
    0xfd2e, 0xed0f, 0xdd6c, 0xcd4d, 0xbdaa, 0xad8b, 0x9de8, 0x8dc9,
    0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
    0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8,
    0x6e17, 0x7e36, 0x4e55, 0x5e74, 0x2e93, 0x3eb2, 0x0ed1, 0x1ef0
};


static uint16_t
redis_crc16(const char *p, size_t len)
{
    size_t    i;
    uint16_t  crc = 0;

    for (i = 0; i < len; i++) {
        crc = (uint16_t) (crc << 8)
              ^ redis_crc16_table[((crc >> 8) ^ (unsigned char) p[i]) & 0xff];
    }

    return crc;
}


unsigned
mrb_redis_cluster_key_slot(const char *key, size_t len)
{
    const char  *open, *close;

    open = memchr(key, '{', len);

    if (open != NULL) {
        close = memchr(open + 1, '}', len - (size_t) (open + 1 - key));

        if (close != NULL && close != open + 1) {
            key = open + 1;
            len = (size_t) (close - key);
        }
    }

    return redis_crc16(key, len) & (REDIS_CLUSTER_SLOTS - 1);
}


/*
 * Where a command's keys are, by its name (lower case, sorted for
 * bsearch).  first: the index of the first key in the command's Array
 * (the name is 0); last: of the last, counted from the end when negative
 * (-1 the last argument); step between keys; numkeys: the keys' count is
 * the argument before the first (EVAL).  A command not listed has its key
 * at 1, when it has arguments.  first 0: no key (any node answers);
 * REDIS_CLUSTER_REFUSED: not routable to one node yet.
 */
#define REDIS_CLUSTER_REFUSED  (-1)

typedef struct {
    const char  *name;
    int          first;
    int          last;
    int          step;
    int          numkeys;
} redis_cluster_keys_t;

static const redis_cluster_keys_t  redis_cluster_keys[] = {
    { "auth", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "bitop", 2, -1, 1, 0 },
    { "blmove", 1, 2, 1, 0 },
    { "blpop", 1, -2, 1, 0 },
    { "brpop", 1, -2, 1, 0 },
    { "brpoplpush", 1, 2, 1, 0 },
    { "bzpopmax", 1, -2, 1, 0 },
    { "bzpopmin", 1, -2, 1, 0 },
    { "client", 0, 0, 0, 0 },
    { "cluster", 0, 0, 0, 0 },
    { "command", 0, 0, 0, 0 },
    { "config", 0, 0, 0, 0 },
    { "dbsize", 0, 0, 0, 0 },
    { "del", 1, -1, 1, 0 },
    { "discard", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "echo", 0, 0, 0, 0 },
    { "eval", 3, -1, 1, 1 },
    { "eval_ro", 3, -1, 1, 1 },
    { "evalsha", 3, -1, 1, 1 },
    { "evalsha_ro", 3, -1, 1, 1 },
    { "exec", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "exists", 1, -1, 1, 0 },
    { "fcall", 3, -1, 1, 1 },
    { "fcall_ro", 3, -1, 1, 1 },
    { "flushall", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "flushdb", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "hello", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "info", 0, 0, 0, 0 },
    { "keys", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "lmove", 1, 2, 1, 0 },
    { "mget", 1, -1, 1, 0 },
    { "monitor", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "mset", 1, -1, 2, 0 },
    { "msetnx", 1, -1, 2, 0 },
    { "multi", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "pfcount", 1, -1, 1, 0 },
    { "pfmerge", 1, -1, 1, 0 },
    { "ping", 0, 0, 0, 0 },
    { "psubscribe", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "publish", 0, 0, 0, 0 },
    { "randomkey", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "rename", 1, 2, 1, 0 },
    { "renamenx", 1, 2, 1, 0 },
    { "rpoplpush", 1, 2, 1, 0 },
    { "scan", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "sdiff", 1, -1, 1, 0 },
    { "sdiffstore", 1, -1, 1, 0 },
    { "select", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "sinter", 1, -1, 1, 0 },
    { "sinterstore", 1, -1, 1, 0 },
    { "smove", 1, 2, 1, 0 },
    { "subscribe", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "sunion", 1, -1, 1, 0 },
    { "sunionstore", 1, -1, 1, 0 },
    { "time", 0, 0, 0, 0 },
    { "touch", 1, -1, 1, 0 },
    { "unlink", 1, -1, 1, 0 },
    { "unwatch", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
    { "watch", REDIS_CLUSTER_REFUSED, 0, 0, 0 },
};

static const redis_cluster_keys_t  redis_cluster_one_key = { "", 1, 1, 1, 0 };


static int
redis_cluster_keys_cmp(const void *name, const void *entry)
{
    return strcmp(name, ((const redis_cluster_keys_t *) entry)->name);
}


/* The entry of a command name (a String or a Symbol, any case; another
 * object is sent by its to_s, as one key's command). */
static const redis_cluster_keys_t *
redis_cluster_keys_of(mrb_state *mrb, mrb_value name)
{
    char                        lower[REDIS_CLUSTER_NAME_MAX + 1];
    mrb_int                     len, i;
    const char                 *p;
    const redis_cluster_keys_t *k;

    p = mrb_redis_name(mrb, name, &len);

    if (p == NULL || len > REDIS_CLUSTER_NAME_MAX) {
        return &redis_cluster_one_key;
    }

    for (i = 0; i < len; i++) {
        lower[i] = (char) tolower((unsigned char) p[i]);
    }
    lower[len] = '\0';

    k = bsearch(lower, redis_cluster_keys,
                sizeof(redis_cluster_keys) / sizeof(redis_cluster_keys[0]),
                sizeof(redis_cluster_keys_t), redis_cluster_keys_cmp);

    return k != NULL ? k : &redis_cluster_one_key;
}


#define REDIS_CLUSTER_NO_SLOT  (-1)


/*
 * The slot of the keys that k places among args (argc of them, the
 * arguments after the command's name), when every key is a String and
 * all are in one slot; REDIS_CLUSTER_NO_SLOT otherwise (no key, another
 * object, several slots, a refused command), left to
 * Redis::Cluster.__command_slot to say.  Runs no Ruby.
 */
static int
redis_cluster_strings_slot(const redis_cluster_keys_t *k,
    const mrb_value *args, mrb_int argc)
{
    mrb_int   first, last, i;
    unsigned  slot;

    if (k->first <= 0) {
        return REDIS_CLUSTER_NO_SLOT;
    }

    /* indexes in the command, where the name is 0 */
    first = k->first;
    last = k->last < 0 ? argc + 1 + k->last : k->last;

    if (k->numkeys) {
        if (first - 2 >= argc || !mrb_integer_p(args[first - 2])) {
            return REDIS_CLUSTER_NO_SLOT;
        }
        last = first + mrb_integer(args[first - 2]) - 1;
    }

    if (first > argc || last < first || last > argc) {
        return REDIS_CLUSTER_NO_SLOT;
    }

    for (i = first; i <= last; i += k->step) {
        if (!mrb_string_p(args[i - 1])) {
            return REDIS_CLUSTER_NO_SLOT;
        }
    }

    slot = mrb_redis_cluster_key_slot(RSTRING_PTR(args[first - 1]),
                                      (size_t) RSTRING_LEN(args[first - 1]));

    for (i = first + k->step; i <= last; i += k->step) {
        if (mrb_redis_cluster_key_slot(RSTRING_PTR(args[i - 1]),
                                       (size_t) RSTRING_LEN(args[i - 1]))
            != slot)
        {
            return REDIS_CLUSTER_NO_SLOT;
        }
    }

    return (int) slot;
}


/* The slot of argument i of args, made a String as the command sends it
 * (an earlier argument's to_s may have shortened args: then nil's). */
static unsigned
redis_cluster_arg_slot(mrb_state *mrb, mrb_value args, mrb_int i)
{
    mrb_value  key = mrb_ary_ref(mrb, args, i);

    if (mrb_symbol_p(key)) {
        key = mrb_sym_str(mrb, mrb_symbol(key));
    } else if (!mrb_string_p(key)) {
        key = mrb_obj_as_string(mrb, key);
    }

    return mrb_redis_cluster_key_slot(RSTRING_PTR(key),
                                      (size_t) RSTRING_LEN(key));
}


/*
 * Redis::Cluster.__command_slot(["MGET", "a", "b"]): the slot of the
 * command's keys, nil when it has none; raises Redis::ClusterError when
 * they are in different slots or the command cannot go to one node.
 */
static mrb_value
redis_cluster_command_slot(mrb_state *mrb, mrb_value self)
{
    mrb_value                    args;
    mrb_int                      argc, first, last, i, n;
    unsigned                     slot, other;
    const redis_cluster_keys_t  *k;
    struct RClass               *error;

    mrb_get_args(mrb, "A", &args);
    argc = RARRAY_LEN(args);
    error = mrb_class_ptr(mrb_iv_get(mrb, self,
                                     mrb_intern_lit(mrb, "__error__")));

    if (argc == 0) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "no Redis command given");
    }

    k = redis_cluster_keys_of(mrb, RARRAY_PTR(args)[0]);

    if (k->first == REDIS_CLUSTER_REFUSED) {
        mrb_raisef(mrb, error, "Redis::Cluster: %v is not supported on a "
                   "cluster (it needs one connection, or every node)",
                   RARRAY_PTR(args)[0]);
    }

    first = k->first;
    last = k->last < 0 ? argc + k->last : k->last;

    if (k->numkeys) {
        if (argc < first) {
            return mrb_nil_value();
        }
        n = mrb_as_int(mrb, mrb_ary_ref(mrb, args, first - 1));
        if (n <= 0) {
            return mrb_nil_value();
        }
        last = first + n - 1;
    }

    if (first == 0 || first >= argc) {
        return mrb_nil_value();
    }

    if (last >= argc) {
        last = argc - 1;
    }

    /* from here on the keys' to_s may run Ruby: args is read by index,
     * its length checked at each read */

    slot = redis_cluster_arg_slot(mrb, args, first);

    for (i = first + k->step; i <= last; i += k->step) {
        other = redis_cluster_arg_slot(mrb, args, i);

        if (other != slot) {
            mrb_raisef(mrb, error, "Redis::Cluster: %v's keys are in "
                       "different slots (\"%v\" in %d, \"%v\" in %d): give them one "
                       "hash tag, as {tag}a and {tag}b, to keep them in one",
                       mrb_ary_ref(mrb, args, 0),
                       mrb_ary_ref(mrb, args, first), (int) slot,
                       mrb_ary_ref(mrb, args, i), (int) other);
        }
    }

    return mrb_fixnum_value(slot);
}


/*
 * Redis::Cluster::SlotMap's C half: the process's map it holds while it
 * lives (given back by the GC), and whether its reads go to replicas.
 * The map's node numbers are the indexes of the SlotMap's @node_objs.
 */
typedef struct {
    mrb_redis_slots  *slots;
    mrb_bool          replica;
    /* names the steady state reads, interned once here: an intern costs
     * some 400 instructions (callgrind, mruby 3.1, 2026-11-27) */
    mrb_sym           map_iv;          /* the Redis::Cluster's @map */
    mrb_sym           suspects_iv;
    mrb_sym           node_objs_iv;
    mrb_sym           replicas_down_iv;
} redis_cluster_map;


static void
redis_cluster_map_free(mrb_state *mrb, void *p)
{
    redis_cluster_map  *cm = p;

    if (cm != NULL) {
        mrb_redis_slots_give_back(cm->slots);
        mrb_free(mrb, cm);
    }
}


static const mrb_data_type  redis_cluster_map_type = {
    "Redis::Cluster::SlotMap", redis_cluster_map_free
};


static redis_cluster_map *
redis_cluster_map_of(mrb_state *mrb, mrb_value self)
{
    redis_cluster_map  *cm;

    cm = mrb_data_check_get_ptr(mrb, self, &redis_cluster_map_type);
    if (cm == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis::Cluster::SlotMap is not "
                  "initialized");
    }

    return cm;
}


/* Redis::ClusterError, which the SlotMap class keeps (a script may
 * reassign the constant). */
static struct RClass *
redis_cluster_map_error(mrb_state *mrb, mrb_value self)
{
    mrb_value       e;
    struct RClass  *c;

    for (c = mrb_obj_class(mrb, self); c != NULL; c = c->super) {
        e = mrb_iv_get(mrb, mrb_obj_value(c),
                       mrb_intern_lit(mrb, "__error__"));
        if (mrb_type(e) == MRB_TT_CLASS) {
            return mrb_class_ptr(e);
        }
    }

    return E_RUNTIME_ERROR;
}


/* map.__hold(name, replica): the process's map called name, from now on
 * this object's. */
static mrb_value
redis_cluster_map_hold(mrb_state *mrb, mrb_value self)
{
    char               *name;
    mrb_bool            replica;
    redis_cluster_map  *cm;

    mrb_get_args(mrb, "zb", &name, &replica);

    if (!mrb_data_p(self) || DATA_PTR(self) != NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis::Cluster::SlotMap#__hold: "
                  "a map is held already");
    }

    cm = mrb_malloc(mrb, sizeof(redis_cluster_map));
    cm->map_iv = mrb_intern_lit(mrb, "@map");
    cm->suspects_iv = mrb_intern_lit(mrb, "@suspects");
    cm->node_objs_iv = mrb_intern_lit(mrb, "@node_objs");
    cm->replicas_down_iv = mrb_intern_lit(mrb, "@replicas_down");
    cm->slots = mrb_redis_slots_hold(name);
    cm->replica = replica;

    if (cm->slots == NULL) {
        mrb_free(mrb, cm);
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis::Cluster: out of memory");
    }

    mrb_data_init(self, cm, &redis_cluster_map_type);
    return self;
}


static mrb_value
redis_cluster_map_loaded(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(mrb_redis_slots_loaded(
                              redis_cluster_map_of(mrb, self)->slots));
}


static mrb_value
redis_cluster_map_address_value(mrb_state *mrb, redis_cluster_map *cm,
    unsigned node)
{
    const char  *addr = mrb_redis_slots_address(cm->slots, node);

    return addr != NULL ? mrb_str_new_cstr(mrb, addr) : mrb_nil_value();
}


static unsigned
redis_cluster_map_slot_arg(mrb_state *mrb)
{
    mrb_int  slot;

    mrb_get_args(mrb, "i", &slot);

    if (slot < 0 || slot >= REDIS_CLUSTER_SLOTS) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "no cluster slot %i", slot);
    }

    return (unsigned) slot;
}


/* The "host:port" of the node that of names for the slot argument. */
static mrb_value
redis_cluster_map_node_of_slot(mrb_state *mrb, mrb_value self,
    unsigned (*of)(const mrb_redis_slots *m, unsigned slot))
{
    unsigned            slot = redis_cluster_map_slot_arg(mrb);
    redis_cluster_map  *cm = redis_cluster_map_of(mrb, self);

    return redis_cluster_map_address_value(mrb, cm, of(cm->slots, slot));
}


/* map.__master(slot), map.__replica(slot): the "host:port" of the node
 * that serves it (as master; for reads), nil when none does. */
static mrb_value
redis_cluster_map_master(mrb_state *mrb, mrb_value self)
{
    return redis_cluster_map_node_of_slot(mrb, self, mrb_redis_slots_master);
}


static mrb_value
redis_cluster_map_replica(mrb_state *mrb, mrb_value self)
{
    return redis_cluster_map_node_of_slot(mrb, self,
                                          mrb_redis_slots_replica);
}


/* map.__index(addr): the map's number of the node, nil when unknown. */
static mrb_value
redis_cluster_map_index(mrb_state *mrb, mrb_value self)
{
    char               *addr;
    unsigned            node;
    redis_cluster_map  *cm;

    mrb_get_args(mrb, "z", &addr);
    cm = redis_cluster_map_of(mrb, self);
    node = mrb_redis_slots_find(cm->slots, addr);

    return node != MRB_REDIS_SLOTS_NONE ? mrb_fixnum_value(node)
                                        : mrb_nil_value();
}


/* map.__addresses: every node the map knows */
static mrb_value
redis_cluster_map_addresses(mrb_state *mrb, mrb_value self)
{
    unsigned            i, n;
    mrb_value           ary;
    redis_cluster_map  *cm = redis_cluster_map_of(mrb, self);

    n = mrb_redis_slots_nodes(cm->slots);
    ary = mrb_ary_new_capa(mrb, n);

    for (i = 0; i < n; i++) {
        mrb_ary_push(mrb, ary, redis_cluster_map_address_value(mrb, cm, i));
    }

    return ary;
}


#define REDIS_CLUSTER_REPLICAS_MAX  16   /* replicas of a master listed */

/* map.__replicas_of(addr): the replicas of that master, as the last
 * reading said */
static mrb_value
redis_cluster_map_replicas_of(mrb_state *mrb, mrb_value self)
{
    char               *addr;
    size_t              i, n;
    unsigned            nodes[REDIS_CLUSTER_REPLICAS_MAX];
    mrb_value           ary;
    redis_cluster_map  *cm;

    mrb_get_args(mrb, "z", &addr);
    cm = redis_cluster_map_of(mrb, self);

    n = mrb_redis_slots_replicas(cm->slots,
                                 mrb_redis_slots_find(cm->slots, addr),
                                 nodes, REDIS_CLUSTER_REPLICAS_MAX);
    if (n > REDIS_CLUSTER_REPLICAS_MAX) {
        n = REDIS_CLUSTER_REPLICAS_MAX;
    }

    ary = mrb_ary_new_capa(mrb, (mrb_int) n);

    for (i = 0; i < n; i++) {
        mrb_ary_push(mrb, ary, redis_cluster_map_address_value(mrb, cm,
                                                               nodes[i]));
    }

    return ary;
}


/*
 * map.__load([[first, last, "master:port", "replica:port", ...], ...]):
 * a reading of CLUSTER SLOTS is the process's map from now on.  Checked
 * whole first; then copied, with no Ruby run, into one block that the
 * core reads.
 */
static mrb_value
redis_cluster_map_load(mrb_state *mrb, mrb_value self)
{
    int                     rc;
    char                    err[MRB_ERR_REASON_LEN], *block, *text;
    size_t                  bytes, nodes, n, i, j, len;
    mrb_value               ranges, r, s;
    const char            **names;
    redis_cluster_map      *cm;
    mrb_redis_slots_range  *to;

    mrb_get_args(mrb, "A", &ranges);
    cm = redis_cluster_map_of(mrb, self);
    n = (size_t) RARRAY_LEN(ranges);
    nodes = 0;
    bytes = 0;

    for (i = 0; i < n; i++) {
        r = RARRAY_PTR(ranges)[i];

        if (!mrb_array_p(r) || RARRAY_LEN(r) < 3
            || !mrb_integer_p(RARRAY_PTR(r)[0])
            || !mrb_integer_p(RARRAY_PTR(r)[1])
            || mrb_integer(RARRAY_PTR(r)[0]) < 0
            || mrb_integer(RARRAY_PTR(r)[1]) >= REDIS_CLUSTER_SLOTS)
        {
            mrb_raisef(mrb, redis_cluster_map_error(mrb, self),
                       "Redis::Cluster: CLUSTER SLOTS gave %!v, not a "
                       "range of slots and its nodes", r);
        }

        for (j = 2; j < (size_t) RARRAY_LEN(r); j++) {
            s = RARRAY_PTR(r)[j];

            if (!mrb_string_p(s)
                || memchr(RSTRING_PTR(s), '\0', RSTRING_LEN(s)) != NULL)
            {
                mrb_raisef(mrb, redis_cluster_map_error(mrb, self),
                           "Redis::Cluster: CLUSTER SLOTS gave %!v, not a "
                           "node's address", s);
            }

            bytes += (size_t) RSTRING_LEN(s) + 1;
            nodes++;
        }
    }

    /* from here on no Ruby runs until the block is freed */
    block = malloc(n * sizeof(mrb_redis_slots_range)
                   + nodes * sizeof(char *) + bytes + 1);
    if (block == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis::Cluster: out of memory");
    }

    to = (mrb_redis_slots_range *) block;
    names = (const char **) (to + n);
    text = (char *) (names + nodes);

    for (i = 0; i < n; i++) {
        r = RARRAY_PTR(ranges)[i];
        to[i].first = (unsigned) mrb_integer(RARRAY_PTR(r)[0]);
        to[i].last = (unsigned) mrb_integer(RARRAY_PTR(r)[1]);
        to[i].nodes = names;
        to[i].n = (size_t) RARRAY_LEN(r) - 2;

        for (j = 2; j < (size_t) RARRAY_LEN(r); j++) {
            s = RARRAY_PTR(r)[j];
            len = (size_t) RSTRING_LEN(s);
            memcpy(text, RSTRING_PTR(s), len);
            text[len] = '\0';
            *names++ = text;
            text += len + 1;
        }
    }

    rc = mrb_redis_slots_load(cm->slots, to, n, err, sizeof(err));
    free(block);

    if (rc != 0) {
        mrb_raisef(mrb, redis_cluster_map_error(mrb, self),
                   "Redis::Cluster: the slot map: %s", err);
    }

    return mrb_nil_value();
}


/* map.__move(slot, "host:port"): MOVED, for every interpreter */
static mrb_value
redis_cluster_map_move(mrb_state *mrb, mrb_value self)
{
    char                err[MRB_ERR_REASON_LEN], *addr;
    mrb_int             slot;
    redis_cluster_map  *cm;

    mrb_get_args(mrb, "iz", &slot, &addr);
    cm = redis_cluster_map_of(mrb, self);

    if (slot < 0 || slot >= REDIS_CLUSTER_SLOTS
        || mrb_redis_slots_move(cm->slots, (unsigned) slot, addr, err,
                                sizeof(err)) != 0)
    {
        mrb_raisef(mrb, redis_cluster_map_error(mrb, self),
                   "Redis::Cluster: MOVED %i %s: %s", slot, addr,
                   slot < 0 || slot >= REDIS_CLUSTER_SLOTS ? "no such slot"
                                                           : err);
    }

    return mrb_nil_value();
}


/* map.__claim(seconds): whether this run reads the first map (for that
 * long at most), the others waiting for it; map.__unclaim when done */
static mrb_value
redis_cluster_map_claim(mrb_state *mrb, mrb_value self)
{
    uint64_t            now;
    mrb_float           sec;
    redis_cluster_map  *cm;

    mrb_get_args(mrb, "f", &sec);
    cm = redis_cluster_map_of(mrb, self);
    now = mrb_redis_now_ms();

    return mrb_bool_value(mrb_redis_slots_claim(cm->slots, now,
                              now + (uint64_t) (sec > 0 ? sec * 1000 : 0)));
}


static mrb_value
redis_cluster_map_unclaim(mrb_state *mrb, mrb_value self)
{
    mrb_redis_slots_unclaim(redis_cluster_map_of(mrb, self)->slots);
    return mrb_nil_value();
}


static const mrb_api_method  redis_cluster_map_methods[] = {
    { "__hold", redis_cluster_map_hold, MRB_ARGS_REQ(2) },
    { "__loaded?", redis_cluster_map_loaded, MRB_ARGS_NONE() },
    { "__master", redis_cluster_map_master, MRB_ARGS_REQ(1) },
    { "__replica", redis_cluster_map_replica, MRB_ARGS_REQ(1) },
    { "__index", redis_cluster_map_index, MRB_ARGS_REQ(1) },
    { "__addresses", redis_cluster_map_addresses, MRB_ARGS_NONE() },
    { "__replicas_of", redis_cluster_map_replicas_of, MRB_ARGS_REQ(1) },
    { "__load", redis_cluster_map_load, MRB_ARGS_REQ(1) },
    { "__move", redis_cluster_map_move, MRB_ARGS_REQ(2) },
    { "__claim", redis_cluster_map_claim, MRB_ARGS_REQ(1) },
    { "__unclaim", redis_cluster_map_unclaim, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


/*
 * "h:1,h:2 timeout": what names the slot map of seeds and timeout among
 * the interpreter's (Array#join, a tenth of a GET's instructions, would
 * take 3,800 more per Redis::Cluster.new: callgrind of mruby 3.1,
 * 2026-11-27).
 */
static mrb_value
redis_cluster_map_key(mrb_state *mrb, mrb_value seeds, mrb_value timeout)
{
    mrb_value  key, t, s;
    mrb_int    i;

    if (!mrb_array_p(seeds) || RARRAY_LEN(seeds) == 0) {
        goto bad;
    }

    t = mrb_nil_p(timeout) ? timeout : mrb_obj_as_string(mrb, timeout);
    key = mrb_str_new_capa(mrb, 24 * RARRAY_LEN(seeds));

    for (i = 0; i < RARRAY_LEN(seeds); i++) {
        s = RARRAY_PTR(seeds)[i];

        if (!mrb_string_p(s)) {
            goto bad;
        }
        if (i != 0) {
            mrb_str_cat_lit(mrb, key, ",");
        }
        mrb_str_cat_str(mrb, key, s);
    }

    if (!mrb_nil_p(t)) {
        mrb_str_cat_lit(mrb, key, " ");
        mrb_str_cat_str(mrb, key, t);
    }

    return key;

bad:
    mrb_raisef(mrb, E_ARGUMENT_ERROR, "Redis::Cluster.new: the nodes are an "
               "Array of \"host:port\" Strings, not %!v", seeds);
    return mrb_nil_value();
}


/*
 * Redis::Cluster.new(["host:port", ...], timeout: 1.0, username:,
 * password:, ssl:, ssl_params:, replica: false): an object on the
 * interpreter's SlotMap of those nodes with that timeout, found in the
 * class's @maps (kept there, out of reach of the cleanup that undoes a
 * run's top-level changes), made by Redis::Cluster.__map_new the first
 * time; with any of the other options, Redis::Cluster.__map_for finds or
 * makes it.
 */
enum { REDIS_CLUSTER_TIMEOUT, REDIS_CLUSTER_USERNAME, REDIS_CLUSTER_PASSWORD,
       REDIS_CLUSTER_SSL, REDIS_CLUSTER_SSL_PARAMS, REDIS_CLUSTER_REPLICA,
       REDIS_CLUSTER_KW };

static const char *const  redis_cluster_kw_names[REDIS_CLUSTER_KW] = {
    "timeout", "username", "password", "ssl", "ssl_params", "replica"
};

static mrb_value
redis_cluster_initialize(mrb_state *mrb, mrb_value self)
{
    int                 i;
    mrb_int             argc;
    mrb_bool            options;
    mrb_value           kw_values[REDIS_CLUSTER_KW], seeds, key, maps, map;
    struct RClass      *c;
    redis_cluster_map  *cm;

    /* read as they lie: mrb_get_args(":") would intern every keyword's
     * name on each call */
    argc = mrb_get_argc(mrb);
    if (argc != 1) {
        mrb_argnum_error(mrb, argc, 1, 1);
    }

    seeds = mrb_get_argv(mrb)[0];
    mrb_api_kwargs(mrb, redis_cluster_kw_names, kw_values, REDIS_CLUSTER_KW);

    options = FALSE;
    for (i = 0; i < REDIS_CLUSTER_KW; i++) {
        if (mrb_undef_p(kw_values[i])) {
            kw_values[i] = (i == REDIS_CLUSTER_SSL
                            || i == REDIS_CLUSTER_REPLICA)
                           ? mrb_false_value() : mrb_nil_value();
        } else if (i != REDIS_CLUSTER_TIMEOUT && mrb_test(kw_values[i])) {
            options = TRUE;
        }
    }

    key = redis_cluster_map_key(mrb, seeds, kw_values[REDIS_CLUSTER_TIMEOUT]);

    /* the class that has the maps: Redis::Cluster, above a subclass */
    maps = mrb_nil_value();
    for (c = mrb_obj_class(mrb, self); c != NULL; c = c->super) {
        maps = mrb_iv_get(mrb, mrb_obj_value(c), mrb_intern_lit(mrb,
                                                                "@maps"));
        if (mrb_hash_p(maps)) {
            break;
        }
    }

    if (!mrb_hash_p(maps)) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis::Cluster: its maps are gone");
    }

    if (options) {
        map = mrb_funcall_id(mrb, mrb_obj_value(c),
                             mrb_intern_lit(mrb, "__map_for"), 8, key, seeds,
                             kw_values[REDIS_CLUSTER_TIMEOUT],
                             kw_values[REDIS_CLUSTER_USERNAME],
                             kw_values[REDIS_CLUSTER_PASSWORD],
                             kw_values[REDIS_CLUSTER_SSL],
                             kw_values[REDIS_CLUSTER_SSL_PARAMS],
                             mrb_bool_value(mrb_test(
                                 kw_values[REDIS_CLUSTER_REPLICA])));

    } else {
        map = mrb_hash_get(mrb, maps, key);

        if (mrb_nil_p(map)) {
            map = mrb_funcall_id(mrb, mrb_obj_value(c),
                                 mrb_intern_lit(mrb, "__map_new"), 2, seeds,
                                 kw_values[REDIS_CLUSTER_TIMEOUT]);
            mrb_hash_set(mrb, maps, key, map);
        }
    }

    cm = mrb_data_check_get_ptr(mrb, map, &redis_cluster_map_type);
    mrb_iv_set(mrb, self, cm != NULL ? cm->map_iv
                                     : mrb_intern_lit(mrb, "@map"), map);
    return self;
}


/* What a command sent in C takes along into its wait. */
typedef struct {
    mrb_value         node;
    mrb_value         name;
    const mrb_value  *args;
    mrb_int           argc;
} redis_cluster_job;


static mrb_value
redis_cluster_job_run(mrb_state *mrb, void *data)
{
    redis_cluster_job  *job = data;

    return mrb_redis_command(mrb, job->node, job->name, job->args,
                             job->argc);
}


/* [name, *args] */
static mrb_value
redis_cluster_command_ary(mrb_state *mrb, mrb_value name,
    const mrb_value *args, mrb_int argc)
{
    mrb_value  ary = mrb_ary_new_capa(mrb, argc + 1);
    mrb_int    i;

    mrb_ary_push(mrb, ary, name);
    for (i = 0; i < argc; i++) {
        mrb_ary_push(mrb, ary, args[i]);
    }

    return ary;
}


#define REDIS_CLUSTER_ARGS_MAX  8   /* the most arguments sent in C */

/*
 * In the steady state straight to the node of the command's slot (its
 * replica, for a read of a replica: true map that knows one), an error
 * reply or a connection error then handed to the map's __recover; else
 * all of it through Redis::Cluster#__route.
 */
mrb_value
mrb_redis_cluster_send(mrb_state *mrb, mrb_value self, mrb_value name,
    const mrb_value *args, mrb_int argc)
{
    int                  slot;
    unsigned             id, replica;
    mrb_bool             failed;
    mrb_value            map, nodes, node, argv[REDIS_CLUSTER_ARGS_MAX],
                         reply;
    redis_cluster_map   *cm;
    redis_cluster_job    job;

    if (mrb_symbol_p(name)) {
        name = mrb_sym_str(mrb, mrb_symbol(name));
    }

    /* a name of another class is sent by its to_s, which runs Ruby */
    if (!mrb_string_p(name) || argc > REDIS_CLUSTER_ARGS_MAX) {
        goto route;
    }

    map = mrb_iv_get(mrb, self, mrb_intern_lit(mrb, "@map"));
    if (!mrb_data_p(map) || DATA_TYPE(map) != &redis_cluster_map_type) {
        goto route;
    }

    cm = DATA_PTR(map);
    if (cm == NULL || !mrb_nil_p(mrb_iv_get(mrb, map, cm->suspects_iv))) {
        goto route;
    }

    slot = redis_cluster_strings_slot(redis_cluster_keys_of(mrb, name),
                                      args, argc);
    if (slot == REDIS_CLUSTER_NO_SLOT) {
        goto route;
    }

    id = mrb_redis_slots_master(cm->slots, (unsigned) slot);
    replica = MRB_REDIS_SLOTS_NONE;

    if (cm->replica
        && mrb_redis_read_only(RSTRING_PTR(name), (size_t) RSTRING_LEN(name)))
    {
        /* a replica that failed lately is the Ruby half's to retry */
        if (!mrb_nil_p(mrb_iv_get(mrb, map, cm->replicas_down_iv))) {
            goto route;
        }

        replica = mrb_redis_slots_replica(cm->slots, (unsigned) slot);
        if (replica != MRB_REDIS_SLOTS_NONE) {
            id = replica;
        }
    }

    nodes = mrb_iv_get(mrb, map, cm->node_objs_iv);
    if (id == MRB_REDIS_SLOTS_NONE || !mrb_array_p(nodes)
        || id >= (unsigned) RARRAY_LEN(nodes))
    {
        goto route;
    }

    node = RARRAY_PTR(nodes)[id];
    if (mrb_nil_p(node)) {
        goto route;
    }

    /* args may point into the VM's stack, which Ruby run by an argument's
     * to_s could move: the recovery reads this copy.  The map stays alive
     * for it while the command waits (a Redis::Cluster.new with another
     * password may replace it in @maps meanwhile). */
    memcpy(argv, args, (size_t) argc * sizeof(mrb_value));
    mrb_gc_protect(mrb, map);
    job.node = node;
    job.name = name;
    job.args = argv;
    job.argc = argc;

    reply = mrb_protect_error(mrb, redis_cluster_job_run, &job, &failed);

    if (!failed) {
        return reply;
    }

    return mrb_funcall_id(mrb, map, mrb_intern_lit(mrb, "__recover"), 5,
                          mrb_fixnum_value(slot),
                          redis_cluster_command_ary(mrb, name, argv, argc),
                          reply,
                          redis_cluster_map_address_value(mrb, cm, id),
                          mrb_bool_value(id == replica));

route:

    return mrb_funcall_id(mrb, self, mrb_intern_lit(mrb, "__route"), 1,
                          redis_cluster_command_ary(mrb, name, args, argc));
}


/* Redis::Cluster.__read_only?(name): whether the command changes nothing
 * (a replica may answer it) */
static mrb_value
redis_cluster_read_only_m(mrb_state *mrb, mrb_value self)
{
    mrb_int      len;
    mrb_value    name;
    const char  *p;

    mrb_get_args(mrb, "o", &name);
    p = mrb_redis_name(mrb, name, &len);

    return mrb_bool_value(p != NULL && mrb_redis_read_only(p, (size_t) len));
}


/* Redis::Cluster.key_slot("{user1}:name") => 8106 */
static mrb_value
redis_cluster_key_slot_m(mrb_state *mrb, mrb_value self)
{
    char     *p;
    mrb_int   len;

    mrb_get_args(mrb, "s", &p, &len);

    return mrb_fixnum_value(mrb_redis_cluster_key_slot(p, (size_t) len));
}


static const mrb_api_method  redis_cluster_class_methods[] = {
    { "__command_slot", redis_cluster_command_slot, MRB_ARGS_REQ(1) },
    { "__read_only?", redis_cluster_read_only_m, MRB_ARGS_REQ(1) },
    { "key_slot", redis_cluster_key_slot_m, MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


static const mrb_api_method  redis_cluster_methods[] = {
    { "initialize", redis_cluster_initialize,
      MRB_ARGS_REQ(1) | MRB_ARGS_KEY(REDIS_CLUSTER_KW, 0) },
    MRB_API_METHOD_END
};


struct RClass *
mrb_redis_cluster_define(mrb_state *mrb, struct RClass *redis,
    struct RClass *base_error)
{
    struct RClass  *c, *error, *map;

    c = mrb_api_define_class(mrb, redis, "Cluster", NULL,
                             redis_cluster_methods);
    error = mrb_api_define_class(mrb, redis, "ClusterError", base_error,
                                 NULL);
    map = mrb_api_define_class(mrb, c, "SlotMap", NULL,
                               redis_cluster_map_methods);
    MRB_SET_INSTANCE_TT(map, MRB_TT_DATA);
    /* where command_slot and the map find it: a script may reassign the
     * constant */
    mrb_iv_set(mrb, mrb_obj_value(c), mrb_intern_lit(mrb, "__error__"),
               mrb_obj_value(error));
    mrb_iv_set(mrb, mrb_obj_value(map), mrb_intern_lit(mrb, "__error__"),
               mrb_obj_value(error));
    mrb_api_define_class_methods(mrb, c, redis_cluster_class_methods);

    return c;
}
