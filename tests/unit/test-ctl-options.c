/* Unit tests for ctl_parse_options() (ctl/ctl.h): the option tables of
 * petrelctl's auth, dict and director commands. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ctl/ctl.h"

#include <limits.h>
#include <string.h>

struct opts {
    const char *user;
    bool json;
    unsigned flags;
    int64_t expire;
};

/* Parses a NULL-terminated argv against a dict-like table. */
static int run(struct opts *o, char **argv)
{
    memset(o, 0, sizeof(*o));
    o->expire = -1;
    const struct ctl_option options[] = {
        {"user", .text = &o->user},
        {"json", .flag = &o->json},
        {"recurse", .bits = &o->flags, .bit = 1},
        {"exact", .bits = &o->flags, .bit = 16},
        {"expire", .number = &o->expire, .min = 1, .max = INT64_MAX,
         .bad = "--expire needs a positive number of seconds"},
    };
    int argc = 0;
    while (argv[argc] != NULL)
        argc++;
    return ctl_parse_options(argc, argv, options, sizeof(options) / sizeof(options[0]));
}

static void test_every_kind_is_set(void **state)
{
    (void)state;
    struct opts o;
    char *argv[] = {"iterate", "--recurse", "key/",     "--exact", "--user",
                    "bob",     "--json",    "--expire", "0060",    NULL};
    int first = run(&o, argv);
    assert_int_equal(first, 8); /* the positional moved behind the options */
    assert_string_equal(argv[first], "key/");
    assert_string_equal(o.user, "bob");
    assert_true(o.json);
    assert_int_equal(o.flags, 1 | 16); /* bits accumulate */
    assert_int_equal(o.expire, 60);
}

static void test_bad_numbers_are_refused_and_kept(void **state)
{
    (void)state;
    struct opts o;
    const char *bad[] = {
        "0", "-5", "", "12x", " 12", "+", "99999999999999999999", "9223372036854775808"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[] = {"set", "--expire", (char *)bad[i], "k", "v", NULL};
        assert_int_equal(run(&o, argv), -1);
        assert_int_equal(o.expire, -1); /* untouched */
    }
    char *min[] = {"set", "--expire", "1", NULL};
    assert_int_equal(run(&o, min), 3);
    assert_int_equal(o.expire, 1); /* the bounds themselves are in */
    char *max[] = {"set", "--expire=9223372036854775807", NULL};
    assert_int_equal(run(&o, max), 2);
    assert_true(o.expire == INT64_MAX);
}

static void test_unknown_or_missing_is_an_error(void **state)
{
    (void)state;
    struct opts o;
    char *unknown[] = {"get", "--nope", "k", NULL};
    assert_int_equal(run(&o, unknown), -1);
    char *missing[] = {"get", "k", "--user", NULL};
    assert_int_equal(run(&o, missing), -1);
    char *flag_arg[] = {"get", "--json=yes", "k", NULL};
    assert_int_equal(run(&o, flag_arg), -1);
    char *short_opt[] = {"get", "-u", "k", NULL};
    assert_int_equal(run(&o, short_opt), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kind_is_set),
        cmocka_unit_test(test_bad_numbers_are_refused_and_kept),
        cmocka_unit_test(test_unknown_or_missing_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
