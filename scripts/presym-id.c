/*
 * Writes mruby/presym/id.h for the libmruby it is linked with.
 *
 * From mruby 4.0 on, mruby.h includes mruby/presym/id.h: the enum of the
 * symbols compiled into the library (its "preset symbols"), which mruby's
 * build generates with the library (lib/mruby/presym.rb) and Debian's
 * libmruby-dev 4.0.0 does not install.  Its values are the library's:
 * E_RUNTIME_ERROR, for one, is MRB_SYM__RuntimeError, which must be the
 * number the library gave "RuntimeError".  So the header is made from the
 * library itself, which keeps the names in its symbol table: symbol k, for
 * k from 1 to the number of preset symbols, is the k-th name in order of
 * length, then bytes; a name interned at run time gets the next number
 * after them, plus the names interned before it (mrb->symidx).
 *
 * Each name gets presym.rb's macro name: an operator its name in OPERATORS
 * (MRB_OPSYM__aref for "[]"); a word with at most one of the prefixes
 * "@@", "@" and "$" or one of the suffixes "!", "?" and "=" the macro of
 * that affix (MRB_CVSYM__, MRB_IVSYM__, MRB_GVSYM__, MRB_SYM_B__,
 * MRB_SYM_Q__, MRB_SYM_E__, plain MRB_SYM__); any other name none.
 *
 * Built with MRB_PRESYM_SCANNING, the mode mruby compiles its own sources
 * in before id.h exists: mruby.h then wants no id.h (and turns the intern
 * macros into markers for the scanner, which this file does not use).
 *
 *   presym-id > id.h
 */

#include <stdio.h>
#include <string.h>

#include <mruby.h>

/* presym.rb's OPERATORS: the operator names mruby's sources use */
static const struct {
    const char  *op;
    const char  *name;
} presym_operators[] = {
    { "!", "not" },      { "%", "mod" },      { "&", "and" },
    { "*", "mul" },      { "+", "add" },      { "-", "sub" },
    { "/", "div" },      { "<", "lt" },       { ">", "gt" },
    { "^", "xor" },      { "`", "tick" },     { "|", "or" },
    { "~", "neg" },      { "!=", "neq" },     { "!~", "nmatch" },
    { "&&", "andand" },  { "**", "pow" },     { "+@", "plus" },
    { "-@", "minus" },   { "<<", "lshift" },  { "<=", "le" },
    { "==", "eq" },      { "=~", "match" },   { ">=", "ge" },
    { ">>", "rshift" },  { "[]", "aref" },    { "||", "oror" },
    { "<=>", "cmp" },    { "===", "eqq" },    { "[]=", "aset" },
};


static int
word_char(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
           || (!first && c >= '0' && c <= '9');
}


/* Prints the enum's line for name, if presym.rb gives it a macro. */
static void
print_macro(const char *name, size_t len, mrb_sym sym)
{
    const char  *macro = "SYM";
    size_t       i, start = 0, end = len;

    for (i = 0; i < sizeof(presym_operators) / sizeof(presym_operators[0]); i++) {
        if (strlen(presym_operators[i].op) == len
            && memcmp(presym_operators[i].op, name, len) == 0)
        {
            printf("  MRB_OPSYM__%s = %u,\n", presym_operators[i].name,
                   (unsigned) sym);
            return;
        }
    }

    if (len > 2 && name[0] == '@' && name[1] == '@') {
        macro = "CVSYM";
        start = 2;

    } else if (len > 1 && name[0] == '@') {
        macro = "IVSYM";
        start = 1;

    } else if (len > 1 && name[0] == '$') {
        macro = "GVSYM";
        start = 1;

    } else if (len > 1 && strchr("!?=", name[len - 1]) != NULL) {
        macro = name[len - 1] == '!' ? "SYM_B"
                : name[len - 1] == '?' ? "SYM_Q" : "SYM_E";
        end = len - 1;
    }

    if (start == end) {
        return;
    }
    for (i = start; i < end; i++) {
        if (!word_char(name[i], i == start)) {
            return;
        }
    }
    printf("  MRB_%s__%.*s = %u,\n", macro, (int) (end - start), name + start,
           (unsigned) sym);
}


int
main(void)
{
    mrb_state   *mrb;
    mrb_sym      probe, presyms, k;
    const char  *name, *prev = NULL;
    mrb_int      len, prev_len = 0;

    mrb = mrb_open();
    if (mrb == NULL) {
        fprintf(stderr, "presym-id: mrb_open() failed\n");
        return 1;
    }

    /* a name no library holds: the first after the preset symbols and
     * the mrb->symidx - 1 names interned before it */
    probe = mrb_intern(mrb, "\001presym-id probe", 16);
    if (probe <= mrb->symidx) {
        fprintf(stderr, "presym-id: symbol %u of a new name is not past the"
                " %u names interned at run time\n", (unsigned) probe,
                (unsigned) mrb->symidx);
        return 1;
    }
    presyms = probe - mrb->symidx;

    printf("/* made by scripts/presym-id.c from the library it was linked"
           " with: %s */\n\n", MRUBY_DESCRIPTION);
    printf("#ifndef MRUBY_PRESYM_ID_H\n#define MRUBY_PRESYM_ID_H\n\n");
    printf("enum mruby_presym {\n");

    for (k = 1; k <= presyms; k++) {
        name = mrb_sym_name_len(mrb, k, &len);

        /* what the numbering above rests on: the preset names are in
         * order, and each is its own symbol */
        if (name == NULL || len == 0
            || (prev != NULL
                && (len < prev_len
                    || (len == prev_len && memcmp(prev, name, len) >= 0)))
            || mrb_intern(mrb, name, len) != k)
        {
            fprintf(stderr, "presym-id: symbol %u of %u (\"%.*s\") is not"
                    " a preset symbol in order: not the table this program"
                    " knows\n", (unsigned) k, (unsigned) presyms,
                    name != NULL ? (int) len : 0, name != NULL ? name : "");
            return 1;
        }
        print_macro(name, len, k);
        prev = name;
        prev_len = len;
    }

    printf("};\n\n#define MRB_PRESYM_MAX %u\n\n#endif\n", (unsigned) presyms);
    mrb_close(mrb);
    return 0;
}
