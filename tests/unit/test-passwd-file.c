/* Unit tests for services/auth/passwd-file.h: Dovecot's passwd-file layout
 * (every documented field, extra fields, the old mail-location layout and
 * libpam-pwdfile passwords), comments, CRLF, missing trailing fields,
 * duplicates, malformed lines reported with their line numbers, limits, and
 * a 100k-user file. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "services/auth/passwd-file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* In the layout of Dovecot's passwd-file documentation:
 *   user:password:uid:gid:(gecos):home:(shell):extra_fields */
static const char dovecot_sample[] =
    "# passdb and userdb in one file\n"
    "user:{plain}password:1000:1000::/home/user::userdb_mail=maildir:~/Maildir "
    "allow_nets=192.168.0.0/24\n"
    "user2:{plain}password2:1001:1001::/home/user2\n"
    "user3:{plain}password3:1002:1002:User Three:/home/user3:/bin/false:"
    "userdb_mail=maildir:~/Maildir userdb_quota_rule=*:storage=100M nopassword\n"
    "user4:{SHA512-CRYPT}$6$salt$hash\n"
    "\n"
    "alice@example.com:$2b$10$abcdefghijklmnopqrstuv:5000:5000::/srv/mail/alice\n";

struct problems {
    size_t count;
    size_t lines[32];
    char messages[32][256];
};

static void collect(size_t line, const char *message, void *ctx)
{
    struct problems *p = ctx;
    if (p->count < 32) {
        p->lines[p->count] = line;
        snprintf(p->messages[p->count], sizeof(p->messages[0]), "%s", message);
    }
    p->count++;
}

static struct passwd_file *parse(const char *text, struct problems *p)
{
    memset(p, 0, sizeof(*p));
    return passwd_file_parse(text, strlen(text), collect, p);
}

static void assert_problem(const struct problems *p, size_t i, size_t line, const char *needle)
{
    assert_true(i < p->count);
    if (p->lines[i] != line || strstr(p->messages[i], needle) == NULL)
        fail_msg("problem %zu: line %zu \"%s\", expected line %zu with \"%s\"", i, p->lines[i],
                 p->messages[i], line, needle);
}

static const char *extra_value(const struct userdb_entry *e, const char *key)
{
    for (size_t i = 0; i < e->extra_count; i++) {
        if (strcmp(e->extra[i].key, key) == 0)
            return e->extra[i].value;
    }
    return NULL;
}

static void test_dovecot_sample(void **state)
{
    struct problems p;
    struct passwd_file *pf = parse(dovecot_sample, &p);
    assert_int_equal(p.count, 0);
    assert_int_equal(passwd_file_count(pf), 5);

    const struct userdb_entry *e = passwd_file_find(pf, "user");
    assert_non_null(e);
    assert_string_equal(e->username, "user");
    assert_string_equal(e->password, "{plain}password");
    assert_int_equal(e->uid, 1000);
    assert_int_equal(e->gid, 1000);
    assert_string_equal(e->home, "/home/user");
    assert_string_equal(e->mail_location, "maildir:~/Maildir"); /* ':' inside extra fields */
    assert_string_equal(e->allow_nets[0], "192.168.0.0/24");
    assert_null(e->allow_nets[1]);

    e = passwd_file_find(pf, "user2");
    assert_non_null(e);
    assert_string_equal(e->password, "{plain}password2");
    assert_int_equal(e->uid, 1001);
    assert_string_equal(e->home, "/home/user2");
    assert_string_equal(e->mail_location, "");
    assert_null(e->allow_nets[0]);

    e = passwd_file_find(pf, "user3");
    assert_non_null(e);
    assert_string_equal(e->home, "/home/user3"); /* gecos and shell ignored */
    assert_string_equal(e->quota_rule[0], "*:storage=100M");
    assert_string_equal(extra_value(e, "nopassword"), "yes"); /* a bare key */

    e = passwd_file_find(pf, "user4"); /* user:password only */
    assert_non_null(e);
    assert_string_equal(e->password, "{SHA512-CRYPT}$6$salt$hash");
    assert_int_equal(e->uid, -1);
    assert_int_equal(e->gid, -1);
    assert_string_equal(e->home, "");

    e = passwd_file_find(pf, "alice@example.com");
    assert_non_null(e);
    assert_string_equal(e->password, "$2b$10$abcdefghijklmnopqrstuv");

    assert_null(passwd_file_find(pf, "nobody"));
    assert_null(passwd_file_find(pf, "User"));
    assert_null(passwd_file_find(pf, "us"));
    passwd_file_free(pf);
}

static void test_users_are_sorted_bytewise(void **state)
{
    struct problems p;
    struct passwd_file *pf = parse("zed:x\nAnna:x\nb\303\266b:x\nbob:x\n_x:x\n", &p);
    assert_int_equal(p.count, 0);
    assert_int_equal(passwd_file_count(pf), 5);
    const char *want[] = {"Anna", "_x", "bob", "b\303\266b", "zed"};
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(passwd_file_user_at(pf, i), want[i]);
        assert_non_null(passwd_file_find(pf, want[i]));
    }
    assert_null(passwd_file_user_at(pf, 5));
    passwd_file_free(pf);
}

static void test_crlf_comments_and_blank_lines(void **state)
{
    struct problems p;
    struct passwd_file *pf = parse("# comment\r\n"
                                   "\r\n"
                                   "a:pa:10:20::/home/a\r\n"
                                   "   \r\n"   /* whitespace is a (bad) username */
                                   "#b:pb\r\n" /* commented out */
                                   "c:pc\r\n"
                                   "d:pd:11:21", /* no line end at the end */
                                   &p);
    assert_int_equal(p.count, 1);
    assert_problem(&p, 0, 4, "too few fields");
    assert_int_equal(passwd_file_count(pf), 3);
    const struct userdb_entry *e = passwd_file_find(pf, "a");
    assert_string_equal(e->password, "pa"); /* no trailing CR */
    assert_string_equal(e->home, "/home/a");
    assert_string_equal(passwd_file_find(pf, "c")->password, "pc");
    assert_int_equal(passwd_file_find(pf, "d")->gid, 21);
    assert_null(passwd_file_find(pf, "#b"));
    assert_null(passwd_file_find(pf, "b"));
    passwd_file_free(pf);
}

static void test_missing_trailing_fields_and_empty_fields(void **state)
{
    struct problems p;
    struct passwd_file *pf = parse("a:pa\n"
                                   "b:pb:\n"
                                   "c:pc:7\n"
                                   "d:pd:7:8:\n"
                                   "e:pe:7:8:gecos:/h\n"
                                   "f:pf:7:8:gecos:/h:/bin/sh\n"
                                   "g:pg:7:8:gecos:/h:/bin/sh:\n"
                                   "h::7:8\n"   /* empty password: none at all */
                                   "i:pi::::\n" /* every later field empty */
                                   "j:\n",
                                   &p);
    assert_int_equal(p.count, 0);
    assert_int_equal(passwd_file_count(pf), 10);
    assert_int_equal(passwd_file_find(pf, "a")->uid, -1);
    assert_int_equal(passwd_file_find(pf, "b")->uid, -1);
    assert_int_equal(passwd_file_find(pf, "c")->uid, 7);
    assert_int_equal(passwd_file_find(pf, "c")->gid, -1);
    assert_int_equal(passwd_file_find(pf, "d")->gid, 8);
    assert_string_equal(passwd_file_find(pf, "e")->home, "/h");
    assert_string_equal(passwd_file_find(pf, "g")->home, "/h");
    assert_int_equal(passwd_file_find(pf, "g")->extra_count, 0);
    assert_null(passwd_file_find(pf, "h")->password);
    assert_int_equal(passwd_file_find(pf, "h")->uid, 7);
    assert_string_equal(passwd_file_find(pf, "i")->password, "pi");
    assert_null(passwd_file_find(pf, "j")->password);
    passwd_file_free(pf);
}

static void test_old_layout_mail_location_and_pam_passwords(void **state)
{
    struct problems p;
    struct passwd_file *pf = parse("old:p:1:1::/home/old:::maildir:~/Mail:LAYOUT=fs\n"
                                   "des:abcdefghijklm[13]\n"
                                   "md5:5f4dcc3b5aa765d61d8327deb882cf99[34]\n"
                                   "other:secret[99]\n"
                                   "braced:{PLAIN}x[13]\n",
                                   &p);
    assert_int_equal(p.count, 0);
    assert_string_equal(passwd_file_find(pf, "old")->mail_location, "maildir:~/Mail:LAYOUT=fs");
    assert_string_equal(passwd_file_find(pf, "des")->password, "{CRYPT}abcdefghijklm");
    assert_string_equal(passwd_file_find(pf, "md5")->password,
                        "{PLAIN-MD5}5f4dcc3b5aa765d61d8327deb882cf99");
    assert_string_equal(passwd_file_find(pf, "other")->password, "secret[99]");
    assert_string_equal(passwd_file_find(pf, "braced")->password, "{PLAIN}x[13]");
    passwd_file_free(pf);
}

static void test_duplicates_keep_the_first(void **state)
{
    struct problems p;
    struct passwd_file *pf = parse("a:first:1:1\n"
                                   "b:pb\n"
                                   "a:second:2:2\n"
                                   "bad:p:x\n"
                                   "bad:p:3\n" /* the first "bad" was skipped: this one counts */
                                   "a:third\n",
                                   &p);
    assert_int_equal(p.count, 3);
    assert_problem(&p, 0, 3, "duplicate user a (first on line 1)");
    assert_problem(&p, 1, 4, "uid");
    assert_problem(&p, 2, 6, "duplicate user a (first on line 1)");
    assert_int_equal(passwd_file_count(pf), 3);
    assert_string_equal(passwd_file_find(pf, "a")->password, "first");
    assert_int_equal(passwd_file_find(pf, "a")->uid, 1);
    assert_int_equal(passwd_file_find(pf, "bad")->uid, 3);
    passwd_file_free(pf);
}

static void test_malformed_lines_are_reported_with_line_numbers(void **state)
{
    char *long_line = malloc(PASSWD_FILE_MAX_LINE + 32);
    memset(long_line, 'x', PASSWD_FILE_MAX_LINE + 10);
    memcpy(long_line, "long:", 5);
    long_line[PASSWD_FILE_MAX_LINE + 10] = '\0';
    struct buf b = {0};
    buf_append_str(&b, "good1:s3cr3t\n");                                    /* 1 */
    buf_append_str(&b, "nocolon\n");                                         /* 2 */
    buf_append_str(&b, ":nouser\n");                                         /* 3 */
    buf_append_str(&b, "bad/name:s3cr3t\n");                                 /* 4 */
    buf_append_str(&b, "ctl\001name:s3cr3t\n");                              /* 5 */
    buf_append_str(&b, "bad\xff\xfeutf8:s3cr3t\n");                          /* 6 */
    buf_append_str(&b, "uid:s3cr3t:12ab:1\n");                               /* 7 */
    buf_append_str(&b, "gid:s3cr3t:1:-5\n");                                 /* 8 */
    buf_append_str(&b, "root:s3cr3t:0:1\n");                                 /* 9 */
    buf_append_str(&b, "rootgrp:s3cr3t:1:0\n");                              /* 10 */
    buf_append_str(&b, "nets:s3cr3t:1:1::/h::allow_nets=10.0.0.0/33\n");     /* 11 */
    buf_append_str(&b, "nets2:s3cr3t:1:1::/h::allow_nets=10.0.0.1/8,::1\n"); /* 12 */
    buf_append_str(&b, "noname:s3cr3t:1:1::/h::=value\n");                   /* 13 */
    buf_append_str(&b, long_line);                                           /* 14 */
    buf_append_str(&b, "\n");
    buf_append(&b, "nul\0byte:s3cr3t\n", 16);                                    /* 15 */
    buf_append_str(&b, "good2:s3cr3t:1:1::/h::allow_nets=10.0.0.0/8,::1/128\n"); /* 16 */
    char name300[301];
    memset(name300, 'n', 300);
    name300[300] = '\0';
    buf_printf(&b, "%s:s3cr3t\n", name300); /* 17: over AUTH_USERNAME_MAX */
    free(long_line);

    struct problems p = {0};
    struct passwd_file *pf = passwd_file_parse(b.data, b.len, collect, &p);
    buf_free(&b);
    assert_int_equal(p.count, 15);
    assert_problem(&p, 0, 2, "too few fields");
    assert_problem(&p, 1, 3, "invalid username");
    assert_problem(&p, 2, 4, "invalid username");
    assert_problem(&p, 3, 5, "invalid username");
    assert_problem(&p, 4, 6, "invalid username");
    assert_problem(&p, 5, 7, "uid");
    assert_problem(&p, 6, 8, "gid");
    assert_problem(&p, 7, 9, "uid 0 (root) is not allowed");
    assert_problem(&p, 8, 10, "gid 0 (root) is not allowed");
    assert_problem(&p, 9, 11, "allow_nets");
    assert_problem(&p, 10, 12, "allow_nets");
    assert_problem(&p, 11, 13, "extra field without a name");
    assert_problem(&p, 12, 14, "longer than");
    assert_problem(&p, 13, 15, "NUL byte");
    assert_problem(&p, 14, 17, "invalid username");
    for (size_t i = 0; i < 15; i++)
        if (strstr(p.messages[i], "s3cr3t") != NULL) /* never the password */
            fail_msg("problem %zu quotes the line: %s", i, p.messages[i]);
    assert_int_equal(passwd_file_count(pf), 2);
    assert_non_null(passwd_file_find(pf, "good1"));
    const struct userdb_entry *g2 = passwd_file_find(pf, "good2");
    assert_non_null(g2);
    assert_string_equal(g2->allow_nets[1], "::1/128");
    assert_null(passwd_file_find(pf, "nets"));
    passwd_file_free(pf);
}

static void test_line_at_the_length_limit_is_accepted(void **state)
{
    /* exactly PASSWD_FILE_MAX_LINE bytes before the CRLF */
    struct buf b = {0};
    buf_append_str(&b, "u:");
    size_t pad = PASSWD_FILE_MAX_LINE - 2;
    buf_reserve(&b, pad + 2);
    memset(b.data + b.len, 'p', pad);
    b.len += pad;
    buf_append_str(&b, "\r\nv:q\n");
    struct problems p = {0};
    struct passwd_file *pf = passwd_file_parse(b.data, b.len, collect, &p);
    assert_int_equal(p.count, 0);
    assert_int_equal(passwd_file_count(pf), 2);
    assert_int_equal(strlen(passwd_file_find(pf, "u")->password), pad);
    passwd_file_free(pf);
    buf_free(&b);
}

static void test_empty_and_garbage_input_gives_an_empty_table(void **state)
{
    struct passwd_file *pf = passwd_file_parse("", 0, NULL, NULL);
    assert_int_equal(passwd_file_count(pf), 0);
    assert_null(passwd_file_find(pf, "a"));
    assert_null(passwd_file_user_at(pf, 0));
    passwd_file_free(pf);
    /* a NULL callback is allowed; input need not be NUL-terminated */
    const char text[] = {'a', ':', 'b', '\n', 'c', ':', 'd'};
    pf = passwd_file_parse(text, sizeof(text) - 2, NULL, NULL);
    assert_int_equal(passwd_file_count(pf), 1);
    assert_string_equal(passwd_file_find(pf, "a")->password, "b");
    passwd_file_free(pf);
    passwd_file_free(NULL);
}

static void test_hundred_thousand_users(void **state)
{
    enum { USERS = 100000 };
    struct buf b = {0};
    /* written in reverse order so the sort has work to do */
    for (int i = USERS - 1; i >= 0; i--)
        buf_printf(&b, "user%06d@example.com:{PLAIN}pw%d:%d:%d::/home/u%d\n", i, i, 1000 + i,
                   1000 + i, i);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct problems p = {0};
    struct passwd_file *pf = passwd_file_parse(b.data, b.len, collect, &p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    buf_free(&b);
    assert_int_equal(p.count, 0);
    assert_int_equal(passwd_file_count(pf), USERS);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    print_message("parsed %d users in %.3f s\n", USERS, secs);
    assert_true(secs < 10.0); /* generous: sanitizers, shared machine */
    char name[64];
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < USERS; i += 7) {
        snprintf(name, sizeof(name), "user%06d@example.com", i);
        const struct userdb_entry *e = passwd_file_find(pf, name);
        assert_non_null(e);
        assert_int_equal(e->uid, 1000 + i);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    print_message("%d lookups in %.3f s\n", USERS / 7 + 1, secs);
    assert_null(passwd_file_find(pf, "user100000@example.com"));
    assert_string_equal(passwd_file_user_at(pf, 0), "user000000@example.com");
    assert_string_equal(passwd_file_user_at(pf, USERS - 1), "user099999@example.com");
    passwd_file_free(pf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dovecot_sample),
        cmocka_unit_test(test_users_are_sorted_bytewise),
        cmocka_unit_test(test_crlf_comments_and_blank_lines),
        cmocka_unit_test(test_missing_trailing_fields_and_empty_fields),
        cmocka_unit_test(test_old_layout_mail_location_and_pam_passwords),
        cmocka_unit_test(test_duplicates_keep_the_first),
        cmocka_unit_test(test_malformed_lines_are_reported_with_line_numbers),
        cmocka_unit_test(test_line_at_the_length_limit_is_accepted),
        cmocka_unit_test(test_empty_and_garbage_input_gives_an_empty_table),
        cmocka_unit_test(test_hundred_thousand_users),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
