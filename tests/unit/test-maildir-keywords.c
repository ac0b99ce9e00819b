/* Unit tests for storage/maildir/maildir-keywords.h: Dovecot's file, bad
 * lines, slots, case-insensitive lookup, validity, write and mtime. */
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/maildir/maildir-keywords.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Written by Dovecot 2.3.19 after "doveadm flags add '$Junk $NonJunk'" and
 * "... kwthree". */
static const char dovecot_sample[] = "0 $Junk\n1 $NonJunk\n2 kwthree\n";

struct tmp {
    char dir[64];
    char path[128];
};

static void tmp_init(struct tmp *t)
{
    strcpy(t->dir, "/tmp/petrel-keywords-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof(t->path), "%s/dovecot-keywords", t->dir);
}

static void tmp_done(struct tmp *t)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    assert_int_equal(system(cmd), 0);
}

static char *read_all(const char *path)
{
    static char data[8192];
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(data, 1, sizeof(data) - 1, f);
    data[n] = '\0';
    fclose(f);
    return data;
}

static void test_dovecot_sample(void **state)
{
    (void)state;
    struct maildir_keywords kw;
    assert_true(maildir_keywords_parse(dovecot_sample, strlen(dovecot_sample), &kw));
    assert_string_equal(kw.names[0], "$Junk");
    assert_string_equal(kw.names[1], "$NonJunk");
    assert_string_equal(kw.names[2], "kwthree");
    for (int i = 3; i < 26; i++)
        assert_null(kw.names[i]);
    assert_int_equal(maildir_keywords_find(&kw, "$junk"), 0);
    assert_int_equal(maildir_keywords_find(&kw, "KWTHREE"), 2);
    assert_int_equal(maildir_keywords_find(&kw, "$Spam"), -1);
    maildir_keywords_free(&kw);
}

static void test_bad_lines(void **state)
{
    (void)state;
    const char *text = "nospace\n"
                       "26 toohigh\n"
                       "-1 neg\n"
                       "x1 notnum\n"
                       " 3 leading\n"
                       "4 \n"
                       "99999999999999999999 big\n"
                       "\n"
                       "5 five\r\n"
                       "7 with space\n"
                       "7 seven\n"
                       "25 last"; /* no newline at the end */
    struct maildir_keywords kw;
    assert_false(maildir_keywords_parse(text, strlen(text), &kw));
    assert_null(kw.names[3]);
    assert_null(kw.names[4]);
    assert_string_equal(kw.names[5], "five");
    assert_string_equal(kw.names[7], "seven"); /* a later line wins */
    assert_string_equal(kw.names[25], "last");
    int used = 0;
    for (int i = 0; i < 26; i++)
        used += kw.names[i] != NULL;
    assert_int_equal(used, 3);
    maildir_keywords_free(&kw);
    /* A NUL inside a name drops that line only. */
    static const char nul[] = "0 a\0b\n1 ok\n";
    assert_false(maildir_keywords_parse(nul, sizeof(nul) - 1, &kw));
    assert_null(kw.names[0]);
    assert_string_equal(kw.names[1], "ok");
    maildir_keywords_free(&kw);
    /* Empty input. */
    assert_true(maildir_keywords_parse("", 0, &kw));
    assert_null(kw.names[0]);
}

static void test_valid(void **state)
{
    (void)state;
    assert_true(mail_keyword_valid("$Junk"));
    assert_true(mail_keyword_valid("$Label1"));
    assert_true(mail_keyword_valid("Junk-mail_2.x"));
    const char *bad[] = {"",    "a b",    "(x", "x)",   "{x",    "%x",          "x*",
                         "\"x", "\\Seen", "x]", "\x01", "x\x7f", "caf\xc3\xa9", "tab\tx"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (mail_keyword_valid(bad[i]))
            fail_msg("accepted keyword \"%s\"", bad[i]);
    }
    char name[MAIL_KEYWORD_MAX_LEN + 2];
    memset(name, 'k', sizeof(name));
    name[MAIL_KEYWORD_MAX_LEN] = '\0';
    assert_true(mail_keyword_valid(name));
    name[MAIL_KEYWORD_MAX_LEN] = 'k';
    name[MAIL_KEYWORD_MAX_LEN + 1] = '\0';
    assert_false(mail_keyword_valid(name));
}

static void test_add(void **state)
{
    (void)state;
    struct maildir_keywords kw;
    const char *text = "1 one\n3 three\n";
    assert_true(maildir_keywords_parse(text, strlen(text), &kw));
    struct petrel_error err = {0};
    assert_int_equal(maildir_keywords_add(&kw, "ONE", &err), 1);
    assert_int_equal(maildir_keywords_add(&kw, "zero", &err), 0);
    assert_int_equal(maildir_keywords_add(&kw, "two", &err), 2);
    assert_int_equal(maildir_keywords_add(&kw, "four", &err), 4);
    assert_int_equal(maildir_keywords_add(&kw, "bad name", &err), -1);
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    char name[16];
    for (int i = 5; i < 26; i++) {
        snprintf(name, sizeof(name), "k%d", i);
        assert_int_equal(maildir_keywords_add(&kw, name, &err), i);
    }
    petrel_error_clear(&err);
    assert_int_equal(maildir_keywords_add(&kw, "full", &err), -1);
    assert_int_equal(err.code, PETREL_ERR_LIMIT);
    assert_int_equal(maildir_keywords_add(&kw, "k25", &err), 25); /* existing still found */
    maildir_keywords_free(&kw);
    for (int i = 0; i < 26; i++)
        assert_null(kw.names[i]);
}

static void test_read_write(void **state)
{
    (void)state;
    struct tmp t;
    tmp_init(&t);
    struct maildir_keywords kw;
    struct petrel_error err = {0};
    /* Missing file: empty, not an error. */
    assert_true(maildir_keywords_read(AT_FDCWD, t.path, &kw, &err));
    assert_null(kw.names[0]);
    /* Same bytes as Dovecot writes, slots in index order. */
    assert_int_equal(maildir_keywords_add(&kw, "$Junk", &err), 0);
    assert_int_equal(maildir_keywords_add(&kw, "$NonJunk", &err), 1);
    assert_int_equal(maildir_keywords_add(&kw, "kwthree", &err), 2);
    assert_true(maildir_keywords_write(AT_FDCWD, t.path, &kw, true, &err));
    assert_string_equal(read_all(t.path), dovecot_sample);
    maildir_keywords_free(&kw);
    /* Holes are kept; names stored with odd characters survive. */
    const char *odd = "0 a\n9 with space\n25 z\n";
    assert_true(maildir_keywords_parse(odd, strlen(odd), &kw));
    struct stat before;
    assert_int_equal(stat(t.path, &before), 0);
    assert_true(maildir_keywords_write(AT_FDCWD, t.path, &kw, false, &err));
    assert_string_equal(read_all(t.path), odd);
    /* mtime moves forward even within the same second. */
    struct stat after;
    assert_int_equal(stat(t.path, &after), 0);
    assert_true(after.st_mtime > before.st_mtime);
    maildir_keywords_free(&kw);
    struct maildir_keywords back;
    assert_true(maildir_keywords_read(AT_FDCWD, t.path, &back, &err));
    assert_string_equal(back.names[9], "with space");
    maildir_keywords_free(&back);
    /* Nothing left but the file. */
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "test $(ls -A '%s' | wc -l) -eq 1", t.dir);
    assert_int_equal(system(cmd), 0);
    /* A name that would break the file is refused. */
    memset(&kw, 0, sizeof(kw));
    kw.names[0] = strdup("a\nb");
    assert_false(maildir_keywords_write(AT_FDCWD, t.path, &kw, false, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    maildir_keywords_free(&kw);
    tmp_done(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dovecot_sample), cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_valid),          cmocka_unit_test(test_add),
        cmocka_unit_test(test_read_write),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
