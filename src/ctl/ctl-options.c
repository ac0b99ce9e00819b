/* Options of a subcommand (ctl.h, ctl_parse_options): getopt_long over a
 * table built from the subcommand's options. */
#include "ctl/ctl.h"

#include "core/slice.h"
#include "core/xalloc.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

/* getopt_long's value for options[i]: above every single-byte option. */
#define OPTION_VAL_BASE 256

int ctl_parse_options(int argc, char **argv, const struct ctl_option *options, size_t count)
{
    struct option *longopts = xcalloc(count + 1, sizeof(*longopts));
    for (size_t i = 0; i < count; i++) {
        longopts[i].name = options[i].name;
        longopts[i].has_arg =
            options[i].flag != NULL || options[i].bits != NULL ? no_argument : required_argument;
        longopts[i].val = OPTION_VAL_BASE + (int)i;
    }
    /* 0, not 1: glibc then starts afresh and forgets the '+' (stop at the
     * first positional) of petrelctl's own option parsing, so options may
     * follow the positional arguments. */
    optind = 0;
    int rc = -1;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (c < OPTION_VAL_BASE || (size_t)(c - OPTION_VAL_BASE) >= count)
            goto out;
        const struct ctl_option *o = &options[c - OPTION_VAL_BASE];
        if (o->flag != NULL) {
            *o->flag = true;
        } else if (o->bits != NULL) {
            *o->bits |= o->bit;
        } else if (o->text != NULL) {
            *o->text = optarg;
        } else if (!str_parse_i64(optarg, o->min, o->max, o->number)) {
            fprintf(stderr, "petrelctl: %s\n", o->bad);
            goto out;
        }
    }
    rc = optind;
out:
    free(longopts);
    return rc;
}
