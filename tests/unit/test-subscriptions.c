/* Unit tests for storage/subscriptions.h: Dovecot's version 2 file (levels,
 * modified UTF-7, tab-escaping), version 0, malformed lines, locked changes
 * and two processes adding at once. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/subscriptions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Written by Dovecot 2.3.19 (doveadm mailbox subscribe / create -s with a
 * "/" namespace separator and Maildir++). */
static const char dovecot_sample[] = "V\t2\n\n"
                                     "Foo\tBar\n"
                                     "INBOX\n"
                                     "Tab&AAk-Name\n"
                                     "back\\slash\n"
                                     "&ANw-n&AO8-c&APg-d&AOk-\n"
                                     "sp ace\n";

struct tmp {
    char dir[64];
    char path[160];
};

static void tmp_init(struct tmp *t)
{
    strcpy(t->dir, "/tmp/petrel-subs-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof(t->path), "%s/sub/dir/subscriptions", t->dir);
}

static void tmp_done(struct tmp *t)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    assert_int_equal(system(cmd), 0);
}

static void parse(const char *text, size_t len, struct subscriptions *subs, bool all_good)
{
    bool ok = subscriptions_parse(text, len, subs);
    assert_int_equal(ok, all_good);
    for (size_t i = 1; i < subs->count; i++)
        assert_true(strcmp(subs->names[i - 1], subs->names[i]) < 0);
}

static void assert_names(const struct subscriptions *subs, const char *const *names, size_t n)
{
    if (subs->count != n) {
        for (size_t i = 0; i < subs->count; i++)
            print_message("have [%s]\n", subs->names[i]);
        fail_msg("%zu names, expected %zu", subs->count, n);
    }
    for (size_t i = 0; i < n; i++) {
        if (!subscriptions_contains(subs, names[i]))
            fail_msg("missing \"%s\"", names[i]);
    }
}

static void test_dovecot_sample(void **state)
{
    (void)state;
    struct subscriptions subs;
    parse(dovecot_sample, strlen(dovecot_sample), &subs, true);
    const char *want[] = {"Foo/Bar",     "INBOX",  "Tab\tName",
                          "back\\slash", "sp ace", "\303\234n\303\257c\303\270d\303\251"};
    assert_names(&subs, want, 6);
    assert_true(subscriptions_contains(&subs, "inbox"));
    assert_false(subscriptions_contains(&subs, "Foo"));
    /* Written back, every line is what Dovecot wrote (sorted). */
    size_t len;
    char *text = subscriptions_format(&subs, &len);
    assert_int_equal(len, strlen(text));
    assert_string_equal(text, "V\t2\n\n"
                              "Foo\tBar\n"
                              "INBOX\n"
                              "Tab&AAk-Name\n"
                              "back\\slash\n"
                              "sp ace\n"
                              "&ANw-n&AO8-c&APg-d&AOk-\n");
    free(text);
    subscriptions_free(&subs);
}

static void test_escaping(void **state)
{
    (void)state;
    /* Dovecot's tab-escapes (files written with UTF-8 storage names). */
    static const char text[] = "V\t2\n\n"
                               "a\001tb\tc\n"
                               "one\0011x\n"
                               "cr\001rlf\001n\n"
                               "q\001qx\001\n"
                               "caf\xc3\xa9\tn\xc3\xa4me\n";
    struct subscriptions subs;
    parse(text, sizeof(text) - 1, &subs, true);
    const char *want[] = {"a\tb/c", "one\001x", "cr\rlf\n", "qqx", "caf\xc3\xa9/n\xc3\xa4me"};
    assert_names(&subs, want, 5);
    subscriptions_free(&subs);
}

/* Any set of UTF-8 names survives format + parse unchanged. */
static void test_round_trips(void **state)
{
    (void)state;
    const char *names[] = {
        "INBOX",
        "Tab\tin/level",
        "back\\slash/x",
        "amp&ersand/&-/&",
        "\xf0\x9f\x98\x80 emoji/\xf0\x90\x80\x80",
        "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e/\xe5\x8f\xb0\xe5\x8c\x97",
        "ctrl\001\r\n\x7f/x",
        "~peter/mail/\xe5\x8f\xb0\xe5\x8c\x97/\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
        "a//b",
        "/leading",
        "sp ace/ trailing ",
        "dot.ted",
    };
    size_t n = sizeof(names) / sizeof(names[0]);
    struct subscriptions subs;
    memset(&subs, 0, sizeof(subs));
    struct tmp t;
    tmp_init(&t);
    size_t added = 0;
    struct petrel_error err = {0};
    assert_true(subscriptions_add_many(t.path, (char *const *)names, n, &added, &err));
    assert_int_equal(added, n);
    assert_true(subscriptions_read(t.path, &subs, &err));
    assert_names(&subs, names, n);
    size_t len;
    char *text = subscriptions_format(&subs, &len);
    /* Only printable ASCII, TAB and LF in the file. */
    for (size_t i = 0; i < len; i++)
        assert_true(text[i] == '\t' || text[i] == '\n' || (text[i] >= 0x20 && text[i] < 0x7f));
    assert_non_null(strstr(text, "\n~peter\tmail\t&U,BTFw-\t&ZeVnLIqe-\n"));
    assert_non_null(strstr(text, "\namp&-ersand\t&--\t&-\n"));
    assert_non_null(strstr(text, "\n&2D3eAA- emoji\t&2ADcAA-\n"));
    struct subscriptions back;
    parse(text, len, &back, true);
    assert_names(&back, names, n);
    free(text);
    subscriptions_free(&back);
    subscriptions_free(&subs);
    tmp_done(&t);
}

static void test_version0(void **state)
{
    (void)state;
    const char *text = "INBOX\nFoo.Bar\nfs/style\n&ANw-ber\n\ninbox\nx\r\n";
    struct subscriptions subs;
    parse(text, strlen(text), &subs, true);
    const char *want[] = {"INBOX", "Foo/Bar", "fs/style", "\303\234ber", "x"};
    assert_names(&subs, want, 5);
    subscriptions_free(&subs);
    /* A file that only starts like the header is version 0. */
    parse("V\t2\nx\n", 6, &subs, true);
    const char *want2[] = {"V\t2", "x"};
    assert_names(&subs, want2, 2);
    subscriptions_free(&subs);
}

static void test_malformed(void **state)
{
    (void)state;
    /* Invalid UTF-8 that is not modified UTF-7 either, NUL bytes: skipped.
     * A trailing separator is dropped; a last line without LF counts. */
    static const char text[] = "V\t2\n\n"
                               "bad\xff\n"
                               "nul\0x\n"
                               "ok\n"
                               "trail\t\n"
                               "\t\n"
                               "\n"
                               "last";
    struct subscriptions subs;
    parse(text, sizeof(text) - 1, &subs, false);
    const char *want[] = {"ok", "trail", "last"};
    assert_names(&subs, want, 3);
    subscriptions_free(&subs);
    parse("", 0, &subs, true);
    assert_int_equal(subs.count, 0);
    subscriptions_free(&subs);
    size_t len;
    char *empty = subscriptions_format(&subs, &len);
    assert_string_equal(empty, "V\t2\n\n");
    free(empty);
}

static void test_add_remove(void **state)
{
    (void)state;
    struct tmp t;
    tmp_init(&t);
    struct subscriptions subs;
    struct petrel_error err = {0};
    assert_true(subscriptions_read(t.path, &subs, &err)); /* missing: empty */
    assert_int_equal(subs.count, 0);
    bool changed = false;
    assert_true(subscriptions_add(t.path, "Foo/Bar", &changed, &err));
    assert_true(changed);
    assert_true(subscriptions_add(t.path, "Foo/Bar", &changed, &err));
    assert_false(changed);
    assert_true(subscriptions_add(t.path, "inbox", &changed, &err));
    assert_true(changed);
    assert_true(subscriptions_add(t.path, "INBOX", &changed, &err));
    assert_false(changed);
    FILE *f = fopen(t.path, "r");
    char buf[256] = {0};
    assert_int_equal(fread(buf, 1, sizeof(buf) - 1, f), strlen("V\t2\n\nFoo\tBar\nINBOX\n"));
    fclose(f);
    assert_string_equal(buf, "V\t2\n\nFoo\tBar\nINBOX\n");
    assert_true(subscriptions_remove(t.path, "Foo/Bar", &changed, &err));
    assert_true(changed);
    assert_true(subscriptions_remove(t.path, "Foo/Bar", &changed, &err));
    assert_false(changed);
    assert_true(subscriptions_read(t.path, &subs, &err));
    const char *want[] = {"INBOX"};
    assert_names(&subs, want, 1);
    subscriptions_free(&subs);
    /* Invalid names are refused. */
    const char *bad[] = {"", "a/", "\xff"};
    for (size_t i = 0; i < 3; i++) {
        petrel_error_clear(&err);
        assert_false(subscriptions_add(t.path, bad[i], &changed, &err));
        assert_int_equal(err.code, PETREL_ERR_INVALID);
    }
    /* A lock file somebody else left (Dovecot's dotlock) is not removed. */
    char lock[200];
    snprintf(lock, sizeof(lock), "%s.lock", t.path);
    f = fopen(lock, "w");
    fclose(f);
    assert_true(subscriptions_add(t.path, "Other", &changed, &err));
    assert_int_equal(access(lock, F_OK), 0);
    unlink(lock);
    /* A version 0 file is upgraded by the first change, keeping its rows. */
    f = fopen(t.path, "w");
    fputs("Old.Folder\nINBOX\n", f);
    fclose(f);
    assert_true(subscriptions_add(t.path, "New", &changed, &err));
    f = fopen(t.path, "r");
    memset(buf, 0, sizeof(buf));
    assert_true(fread(buf, 1, sizeof(buf) - 1, f) > 0);
    fclose(f);
    assert_string_equal(buf, "V\t2\n\nINBOX\nNew\nOld\tFolder\n");
    assert_int_equal(access(lock, F_OK), -1);
    tmp_done(&t);
}

/* Two processes subscribing at once lose nothing (flock on <path>.lock). */
static void test_concurrent_add(void **state)
{
    (void)state;
    struct tmp t;
    tmp_init(&t);
    enum { PER_CHILD = 150 };
    pid_t pids[2];
    for (int c = 0; c < 2; c++) {
        pids[c] = fork();
        assert_true(pids[c] >= 0);
        if (pids[c] == 0) {
            for (int i = 0; i < PER_CHILD; i++) {
                char name[64];
                snprintf(name, sizeof(name), "child%d/folder%03d", c, i);
                bool changed = false;
                struct petrel_error err;
                if (!subscriptions_add(t.path, name, &changed, &err) || !changed)
                    _exit(1);
            }
            _exit(0);
        }
    }
    for (int c = 0; c < 2; c++) {
        int status;
        assert_int_equal(waitpid(pids[c], &status, 0), pids[c]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    struct subscriptions subs;
    struct petrel_error err = {0};
    assert_true(subscriptions_read(t.path, &subs, &err));
    assert_int_equal(subs.count, 2 * PER_CHILD);
    /* The lock file is gone (Dovecot would wait for it). */
    char lock[200];
    snprintf(lock, sizeof(lock), "%s.lock", t.path);
    assert_int_equal(access(lock, F_OK), -1);
    for (int c = 0; c < 2; c++) {
        for (int i = 0; i < PER_CHILD; i++) {
            char name[64];
            snprintf(name, sizeof(name), "child%d/folder%03d", c, i);
            assert_true(subscriptions_contains(&subs, name));
        }
    }
    subscriptions_free(&subs);
    tmp_done(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dovecot_sample), cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_round_trips),    cmocka_unit_test(test_version0),
        cmocka_unit_test(test_malformed),      cmocka_unit_test(test_add_remove),
        cmocka_unit_test(test_concurrent_add),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
