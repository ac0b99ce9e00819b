/* Unit tests for storage/maildir/maildir-filename.h: parsing Dovecot- and
 * Courier-style names, flag letter order, unknown letters kept across a
 * rebuild, size fields, and fresh unique names (host escaping). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/maildir/maildir-filename.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct maildir_filename parse_ok(const char *name)
{
    struct maildir_filename fn;
    if (!maildir_filename_parse(name, &fn))
        fail_msg("maildir_filename_parse(%s) failed", name);
    return fn;
}

static void assert_base(const struct maildir_filename *fn, const char *base)
{
    assert_int_equal(fn->base_len, strlen(base));
    assert_memory_equal(fn->base, base, fn->base_len);
}

/* Names written by Dovecot 2.3.19 (doveadm save + flags add). */
static void test_dovecot_names(void **state)
{
    (void)state;
    struct maildir_filename fn = parse_ok("1795305042.M122797P14436.vm,S=29,W=33:2,FSab");
    assert_base(&fn, "1795305042.M122797P14436.vm,S=29,W=33");
    assert_true(fn.has_size && fn.size == 29);
    assert_true(fn.has_vsize && fn.vsize == 33);
    assert_true(fn.has_info);
    assert_int_equal(fn.flags, MAIL_FLAG_FLAGGED | MAIL_FLAG_SEEN);
    assert_int_equal(fn.keywords, 0x3);
    assert_string_equal(fn.unknown_flags, "");

    fn = parse_ok("1795305042.M208236P14457.vm,S=32,W=36:2,DRTc");
    assert_int_equal(fn.flags, MAIL_FLAG_DRAFT | MAIL_FLAG_ANSWERED | MAIL_FLAG_DELETED);
    assert_int_equal(fn.keywords, 1u << 2);

    /* In new/ without info. */
    fn = parse_ok("1795305042.M271677P14460.vm,S=31,W=35");
    assert_false(fn.has_info);
    assert_int_equal(fn.flags, 0);
    assert_base(&fn, "1795305042.M271677P14460.vm,S=31,W=35");

    /* Courier/qmail names without sizes; an escaped ':' in the host. */
    fn = parse_ok("1600000001.P124Q1.oth\\072er:2,S");
    assert_base(&fn, "1600000001.P124Q1.oth\\072er");
    assert_false(fn.has_size);
    assert_false(fn.has_vsize);
    assert_int_equal(fn.flags, MAIL_FLAG_SEEN);

    /* The example of Dovecot's maildir documentation. */
    fn = parse_ok("1491941793.M41850P8566V0000000000000015I0000000004F3030E_0.mx1.example.com,"
                  "S=10956:2,STln");
    assert_true(fn.has_size && fn.size == 10956);
    assert_int_equal(fn.flags, MAIL_FLAG_SEEN | MAIL_FLAG_DELETED);
    assert_int_equal(fn.keywords, (1u << 11) | (1u << 13));
}

static void test_not_message_files(void **state)
{
    (void)state;
    struct maildir_filename fn;
    assert_false(maildir_filename_parse("", &fn));
    assert_false(maildir_filename_parse(".", &fn));
    assert_false(maildir_filename_parse("..", &fn));
    assert_false(maildir_filename_parse(".hidden:2,S", &fn));
    assert_false(maildir_filename_parse("a/b", &fn));
    assert_false(maildir_filename_parse(":2,S", &fn));
    assert_false(maildir_filename_parse(NULL, &fn));
}

static void test_sizes(void **state)
{
    (void)state;
    struct maildir_filename fn = parse_ok("1.2.h,W=40,S=30");
    assert_true(fn.has_size && fn.size == 30);
    assert_true(fn.has_vsize && fn.vsize == 40);
    /* Digits must end at ',' or the end of the base. */
    fn = parse_ok("1.2.h,S=30x,W=5:2,");
    assert_false(fn.has_size);
    assert_true(fn.has_vsize && fn.vsize == 5);
    fn = parse_ok("1.2.h,S=,W=5");
    assert_false(fn.has_size);
    /* Only the first ",S=" counts (Dovecot). */
    fn = parse_ok("1.2.h,S=1x,S=2");
    assert_false(fn.has_size);
    /* Not in the info part. */
    fn = parse_ok("1.2.h:2,S,S=5");
    assert_false(fn.has_size);
    /* Overflow. */
    fn = parse_ok("1.2.h,S=99999999999999999999999");
    assert_false(fn.has_size);
    fn = parse_ok("1.2.h,S=18446744073709551615");
    assert_true(fn.has_size && fn.size == UINT64_MAX);
}

static void test_info_variants(void **state)
{
    (void)state;
    /* Experimental info ("1,") and unknown info: no flags. */
    struct maildir_filename fn = parse_ok("1.2.h:1,xyz");
    assert_false(fn.has_info);
    assert_base(&fn, "1.2.h");
    fn = parse_ok("1.2.h:2,");
    assert_true(fn.has_info);
    assert_int_equal(fn.flags, 0);
    /* Flags come from after the last ':'; the base ends at the first. */
    fn = parse_ok("1.2.h:x:2,RS");
    assert_base(&fn, "1.2.h");
    assert_int_equal(fn.flags, MAIL_FLAG_ANSWERED | MAIL_FLAG_SEEN);
    /* Passed, duplicates, unknown letters in order. */
    fn = parse_ok("1.2.h:2,PZ9SS1a");
    assert_int_equal(fn.flags, MAIL_FLAG_PASSED | MAIL_FLAG_SEEN);
    assert_int_equal(fn.keywords, 1);
    assert_string_equal(fn.unknown_flags, "Z91");
    /* Dovecot's extra fields after ',' are kept verbatim. */
    fn = parse_ok("1.2.h:2,S,foo=bar");
    assert_int_equal(fn.flags, MAIL_FLAG_SEEN);
    assert_string_equal(fn.unknown_flags, ",foo=bar");
}

static void assert_build(const char *base, uint32_t flags, uint32_t keywords, const char *unknown,
                         const char *expected)
{
    struct buf out = {0};
    maildir_filename_build(base, strlen(base), flags, keywords, unknown, &out);
    assert_string_equal(buf_cstr(&out), expected);
    buf_free(&out);
}

static void test_build_order(void **state)
{
    (void)state;
    assert_build("b", 0, 0, "", "b:2,");
    assert_build("b", 0, 0, NULL, "b:2,");
    assert_build("b", MAIL_FLAG_ALL, 0, "", "b:2,DFPRST");
    assert_build("b", MAIL_FLAG_SEEN | MAIL_FLAG_DRAFT, (1u << 25) | 1u, "", "b:2,DSaz");
    /* Unknown letters merge in ASCII order, keywords after upper case. */
    assert_build("b", MAIL_FLAG_SEEN | MAIL_FLAG_FLAGGED, 1u << 1, "EZ", "b:2,EFSZb");
    assert_build("b", MAIL_FLAG_SEEN, 1u, "1~", "b:2,1Sa~");
    /* Extra fields stay at the end. */
    assert_build("b", MAIL_FLAG_SEEN, 1u, ",x", "b:2,Sa,x");
    assert_build("b", MAIL_FLAG_SEEN, 0, "Q,x", "b:2,QS,x");
    /* Known letters passed as unknown are not doubled; bits beyond range
     * are ignored. */
    assert_build("b", MAIL_FLAG_SEEN, 0, "Sa", "b:2,S");
    assert_build("b", 0xffff0000u, 0xfc000000u, "", "b:2,");
    /* base_len cuts the base. */
    struct buf out = {0};
    maildir_filename_build("base:2,old", 4, MAIL_FLAG_SEEN, 0, "", &out);
    assert_string_equal(buf_cstr(&out), "base:2,S");
    buf_free(&out);
}

/* Parse then build gives Dovecot's canonical order back. */
static void test_round_trip(void **state)
{
    (void)state;
    const char *names[] = {
        "1795305042.M122797P14436.vm,S=29,W=33:2,FSab",
        "1795305042.M208236P14457.vm,S=32,W=36:2,DRTc",
        "1.2.h:2,",
        "1.2.h:2,DFPRSTabcdefghijklmnopqrstuvwxyz",
        "1.2.h:2,1EFSZb~",
        "1.2.h:2,Sa,foo",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct maildir_filename fn = parse_ok(names[i]);
        struct buf out = {0};
        maildir_filename_build(fn.base, fn.base_len, fn.flags, fn.keywords, fn.unknown_flags, &out);
        assert_string_equal(buf_cstr(&out), names[i]);
        buf_free(&out);
    }
    /* Unsorted input comes back sorted. */
    struct maildir_filename fn = parse_ok("x:2,cSaD");
    struct buf out = {0};
    maildir_filename_build(fn.base, fn.base_len, fn.flags, fn.keywords, fn.unknown_flags, &out);
    assert_string_equal(buf_cstr(&out), "x:2,DSac");
    buf_free(&out);
}

static void test_unknown_truncated(void **state)
{
    (void)state;
    char name[128] = "1.2.h:2,";
    for (int i = 0; i < 40; i++)
        strcat(name, "Z");
    struct maildir_filename fn = parse_ok(name);
    assert_int_equal(strlen(fn.unknown_flags), sizeof(fn.unknown_flags) - 1);
}

/* Checks the "<secs>.M<usecs>P<pid>Q<n>.<host>,S=<size>,W=<vsize>" shape
 * and returns the host part. */
static char *check_new_base(const char *s, uint64_t counter)
{
    long long secs;
    long usecs, pid;
    unsigned long long q;
    int n = 0;
    assert_int_equal(sscanf(s, "%lld.M%ldP%ldQ%llu.%n", &secs, &usecs, &pid, &q, &n), 4);
    assert_true(n > 0);
    assert_true(usecs >= 0 && usecs < 1000000);
    assert_int_equal(pid, (long)getpid());
    assert_int_equal(q, counter);
    const char *host = s + n;
    const char *sizes = strstr(host, ",S=");
    assert_non_null(sizes);
    struct maildir_filename fn = parse_ok(s);
    assert_int_equal(fn.base_len, strlen(s));
    return strndup(host, (size_t)(sizes - host));
}

static void test_new_base(void **state)
{
    (void)state;
    struct buf a = {0}, b = {0};
    struct maildir_name_source src;
    maildir_name_source_init(&src);
    for (int i = 0; i < 6; i++)
        (void)maildir_name_source_next(&src);
    maildir_filename_new_base(&src, 1234, 1300, &a);
    maildir_filename_new_base(&src, 0, 0, &b);
    assert_string_not_equal(buf_cstr(&a), buf_cstr(&b));
    struct maildir_filename fn = parse_ok(buf_cstr(&a));
    assert_true(fn.has_size && fn.size == 1234);
    assert_true(fn.has_vsize && fn.vsize == 1300);
    assert_false(fn.has_info);
    free(check_new_base(buf_cstr(&a), 7));
    free(check_new_base(buf_cstr(&b), 8));
    buf_free(&a);
    buf_free(&b);
}

/* '/' and ':' in the host name are escaped. Needs a private UTS
 * namespace: root gets one directly, anyone else through a user namespace
 * first. Where neither can be had the test fails rather than skips, so it
 * never counts as passed without having run. */
static void test_new_base_host_escaping(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        if (unshare(CLONE_NEWUTS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWUTS) != 0)
            _exit(2);
        if (sethostname("mx/1:a", 6) != 0)
            _exit(2);
        struct buf b = {0};
        struct maildir_name_source src;
        maildir_name_source_init(&src); /* reads the host name set above */
        maildir_filename_new_base(&src, 1, 2, &b);
        ssize_t w = write(pfd[1], b.data, b.len);
        _exit(w == (ssize_t)b.len ? 0 : 1);
    }
    close(pfd[1]);
    char out[512] = {0};
    ssize_t got = read(pfd[0], out, sizeof(out) - 1);
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2)
        fail_msg("no private UTS namespace (unshare/sethostname refused): cannot test");
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_true(got > 0);
    const char *host = strchr(strchr(out, 'Q'), '.') + 1;
    assert_memory_equal(host, "mx\\0571\\072a,S=1,W=2", strlen("mx\\0571\\072a,S=1,W=2"));
    struct maildir_filename fn = parse_ok(out);
    assert_false(fn.has_info);
    assert_int_equal(fn.base_len, strlen(out));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dovecot_names),
        cmocka_unit_test(test_not_message_files),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_info_variants),
        cmocka_unit_test(test_build_order),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_unknown_truncated),
        cmocka_unit_test(test_new_base),
        cmocka_unit_test(test_new_base_host_escaping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
