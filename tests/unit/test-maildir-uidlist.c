/* Unit tests for storage/maildir/maildir-uidlist.h: files written by Dovecot
 * 2.3, version 1, strict rejection with line numbers, duplicates, torn
 * appends, byte-exact round trips, append versus rewrite. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/maildir/maildir-uidlist.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Written by Dovecot 2.3.19 (doveadm save, then files dropped into new/). */
static const char dovecot_sample[] = "3 V1795305040 N3 G7a875207522e026b6438000083ecc375\n"
                                     "1 :1795305042.M122797P14436.vm,S=29,W=33\n"
                                     "2 :1795305042.M208236P14457.vm,S=32,W=36\n"
                                     "3 :1795305042.M271677P14460.vm,S=31,W=35\n"
                                     "4 :1600000000.P123Q1.otherhost\n"
                                     "5 :1600000001.P124Q1.oth\\072er\n";

/* From Dovecot's maildir documentation: extension fields, an old-style
 * line with the flags still in the file name. */
static const char doc_sample[] = "3 V1275660208 N25022 G3085f01b7f11094c501100008c4a11c1\n"
                                 "25006 :1276528487.M364837P9451.kurkku,S=1355,W=1394:2,\n"
                                 "25017 W2481 :1276533073.M242911P3632.kurkku:2,F\n";

struct tmp {
    char dir[64];
    char path[128];
};

static void tmp_init(struct tmp *t)
{
    strcpy(t->dir, "/tmp/petrel-uidlist-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof(t->path), "%s/dovecot-uidlist", t->dir);
}

static void tmp_done(struct tmp *t)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    assert_int_equal(system(cmd), 0);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char data[65536];
    size_t n = fread(data, 1, sizeof(data) - 1, f);
    data[n] = '\0';
    fclose(f);
    return data;
}

static void parse_ok(const char *text, struct uidlist *ul)
{
    struct petrel_error err = {0};
    if (!uidlist_parse("t", text, strlen(text), ul, &err))
        fail_msg("parse failed: %s", err.message);
}

static void assert_rejected(const char *text, const char *message)
{
    struct uidlist ul;
    struct petrel_error err = {0};
    if (uidlist_parse("dovecot-uidlist", text, strlen(text), &ul, &err))
        fail_msg("accepted: %s", text);
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    if (strstr(err.message, message) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err.message, message);
    assert_null(ul.entries);
    assert_int_equal(ul.count, 0);
}

static void test_dovecot_sample(void **state)
{
    (void)state;
    struct uidlist ul;
    parse_ok(dovecot_sample, &ul);
    assert_int_equal(ul.uid_validity, 1795305040u);
    /* Dovecot appended lines 4 and 5 without touching N: next is 6. */
    assert_int_equal(ul.next_uid, 6);
    assert_true(ul.has_guid);
    static const uint8_t guid[16] = {0x7a, 0x87, 0x52, 0x07, 0x52, 0x2e, 0x02, 0x6b,
                                     0x64, 0x38, 0x00, 0x00, 0x83, 0xec, 0xc3, 0x75};
    assert_memory_equal(ul.guid, guid, 16);
    assert_string_equal(ul.extra_header, "");
    assert_int_equal(ul.count, 5);
    assert_int_equal(ul.entries[0].uid, 1);
    assert_string_equal(ul.entries[0].base, "1795305042.M122797P14436.vm,S=29,W=33");
    assert_string_equal(ul.entries[0].extensions, "");
    assert_string_equal(ul.entries[4].base, "1600000001.P124Q1.oth\\072er");
    assert_int_equal(ul.file_size, strlen(dovecot_sample));
    assert_non_null(uidlist_find_uid(&ul, 3));
    assert_null(uidlist_find_uid(&ul, 6));
    assert_null(uidlist_find_uid(&ul, 0));
    const struct uidlist_entry *e = uidlist_find_base(&ul, "1600000000.P123Q1.otherhost");
    assert_non_null(e);
    assert_int_equal(e->uid, 4);
    assert_null(uidlist_find_base(&ul, "nope"));
    uidlist_free(&ul);
}

static void test_doc_sample(void **state)
{
    (void)state;
    struct uidlist ul;
    parse_ok(doc_sample, &ul);
    assert_int_equal(ul.next_uid, 25022);
    assert_int_equal(ul.count, 2);
    /* The base stops at the first ':'. */
    assert_string_equal(ul.entries[0].base, "1276528487.M364837P9451.kurkku,S=1355,W=1394");
    assert_string_equal(ul.entries[1].base, "1276533073.M242911P3632.kurkku");
    assert_string_equal(ul.entries[1].extensions, "W2481");
    uidlist_free(&ul);
}

static void test_header_fields(void **state)
{
    (void)state;
    struct uidlist ul;
    /* Any order, unknown fields preserved, upper-case hex, extra spaces. */
    parse_ok("3 X1 G3085F01B7F11094C501100008C4A11C1  N9 V7 Pfoo%u\n", &ul);
    assert_int_equal(ul.uid_validity, 7);
    assert_int_equal(ul.next_uid, 9);
    assert_true(ul.has_guid);
    assert_int_equal(ul.guid[0], 0x30);
    assert_string_equal(ul.extra_header, "X1 Pfoo%u");
    uidlist_free(&ul);
    /* No G: valid, has_guid false. */
    parse_ok("3 V1 N1\n", &ul);
    assert_false(ul.has_guid);
    assert_int_equal(ul.count, 0);
    uidlist_free(&ul);
    /* CRLF line ends. */
    parse_ok("3 V1 N1\r\n1 :a\r\n", &ul);
    assert_string_equal(ul.entries[0].base, "a");
    uidlist_free(&ul);
}

static void test_extensions(void **state)
{
    (void)state;
    struct uidlist ul;
    parse_ok("3 V1 N10\n"
             "1 W100  S90 P:uidl:with:colons :a,S=90\n"
             "2 G0123 O5 :b c\n"
             "3    :c\n",
             &ul);
    assert_int_equal(ul.count, 3);
    assert_string_equal(ul.entries[0].extensions, "W100 S90 P:uidl:with:colons");
    assert_string_equal(ul.entries[0].base, "a,S=90");
    assert_string_equal(ul.entries[1].extensions, "G0123 O5");
    assert_string_equal(ul.entries[1].base, "b c"); /* spaces belong to the name */
    assert_string_equal(ul.entries[2].extensions, "");
    uidlist_free(&ul);
}

static void test_version1(void **state)
{
    (void)state;
    struct uidlist ul;
    parse_ok("1 1100000000 6\n"
             "1 1099999999.123_1.host:2,S\n"
             "5 1099999999.124_1.host\n",
             &ul);
    assert_int_equal(ul.uid_validity, 1100000000u);
    assert_int_equal(ul.next_uid, 6);
    assert_false(ul.has_guid);
    assert_int_equal(ul.count, 2);
    assert_string_equal(ul.entries[0].base, "1099999999.123_1.host");
    assert_string_equal(ul.entries[0].extensions, "");
    assert_string_equal(ul.entries[1].base, "1099999999.124_1.host");
    uidlist_free(&ul);
    assert_rejected("1 5 6\n6 a\n", "dovecot-uidlist:2: UID 6 not below next UID 6");
    assert_rejected("1 5\n", "dovecot-uidlist:1: corrupted header (version 1)");
    assert_rejected("1 5 6 7\n", "corrupted header");
}

static void test_rejected(void **state)
{
    (void)state;
    assert_rejected("", "dovecot-uidlist:1: empty file");
    assert_rejected("3 V1 N2", "dovecot-uidlist:1: header line not terminated");
    assert_rejected("x V1 N2\n", ":1: corrupted header (invalid version number)");
    assert_rejected("3V1 N2\n", ":1: corrupted header");
    assert_rejected("2 V1 N2\n", ":1: unsupported version 2");
    assert_rejected("3 N2\n", ":1: broken header");
    assert_rejected("3 V1\n", ":1: broken header");
    assert_rejected("3 V0 N5\n", ":1: broken header");
    assert_rejected("3 Vx N5\n", ":1: invalid UIDVALIDITY");
    assert_rejected("3 V1 N99999999999\n", ":1: invalid next UID");
    assert_rejected("3 V1 N2 G1234\n", ":1: invalid folder GUID");
    assert_rejected("3 V1 N2 G7a875207522e026b6438000083ecc37g\n", "invalid folder GUID");
    assert_rejected("3 V1 N2 X\r\r\n", ":1: control character in the header");
    assert_rejected("3 V1 X\r N2\n", ":1: control character in the header");
    assert_rejected("3 V1\tN2\n", ":1: control character in the header");
    const char *hdr = "3 V1 N2\n";
    char text[512];
    struct {
        const char *lines;
        const char *message;
    } cases[] = {
        {"1 :a\n2 :b\nx :c\n", "dovecot-uidlist:4: invalid data \"x :c\""},
        {"0 :a\n", ":2: invalid data"},
        {"1:a\n", ":2: invalid data"},
        {"1\n", ":2: invalid data"},
        {"4294967296 :a\n", ":2: UID too large"},
        {"4294967295 :a\n", ":2: UID too high"},
        {"1 :a\n3 :b\n2 :c\n", ":4: UIDs not ordered (2 after 3)"},
        {"1 :a\n1 :b\n", ":3: UIDs not ordered"},
        {"1 W5 a\n", ":2: missing ':' before the file name"},
        {"1 a\n", ":2: missing ':'"},
        {"1 w5 :a\n", ":2: invalid extension field \"w5\""},
        {"1 5 :a\n", ":2: invalid extension field"},
        {"1 :\n", ":2: empty file name"},
        {"1 ::2,S\n", ":2: empty base file name"},
        {"1 :a/b\n", ":2: broken file name"},
        {"1 :a\r\r\n", ":2: stray carriage return"},
        {"1 :a\r:2,S\n", ":2: carriage return at the end of the base"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(text, sizeof(text), "%s%s", hdr, cases[i].lines);
        assert_rejected(text, cases[i].message);
    }
    /* The NUL case needs the real length. */
    static const char nul[] = "3 V1 N2\n1 :a\n2 :b\0c\n";
    struct uidlist ul;
    struct petrel_error err = {0};
    assert_false(uidlist_parse("p", nul, sizeof(nul) - 1, &ul, &err));
    assert_string_equal(err.message, "p:3: NUL byte in the line");
    static const char nulhdr[] = "3 V1\0 N2\n";
    assert_false(uidlist_parse("p", nulhdr, sizeof(nulhdr) - 1, &ul, &err));
    assert_string_equal(err.message, "p:1: control character in the header");
    /* Only printable ASCII in messages. */
    assert_rejected("3 V1 N2\n\xff\x01"
                    "bad\n",
                    ":2: invalid data \"??bad\"");
    assert_rejected("3 V1 N2\n1 \xc3\xa9 :a\n", ":2: invalid extension field \"??\"");
    char longline[300];
    snprintf(longline, sizeof(longline), "3 V1 N2\n%0200d\n", 0);
    assert_rejected(longline, "invalid data \"000");
}

/* A line listed again under a higher UID replaces the older one. */
static void test_duplicate_base(void **state)
{
    (void)state;
    struct uidlist ul;
    parse_ok("3 V1 N2\n1 :a\n2 :b\n3 :a:2,S\n4 :c\n", &ul);
    assert_int_equal(ul.count, 3);
    assert_int_equal(ul.entries[0].uid, 2);
    assert_int_equal(ul.entries[1].uid, 3);
    assert_string_equal(ul.entries[1].base, "a");
    assert_int_equal(ul.entries[2].uid, 4);
    assert_int_equal(ul.next_uid, 5);
    uidlist_free(&ul);
    /* Many, to exercise the index growth. */
    char *big = malloc(200000);
    size_t n = (size_t)sprintf(big, "3 V1 N1\n");
    for (int i = 1; i <= 3000; i++)
        n += (size_t)sprintf(big + n, "%d :m%d\n", i, i <= 1500 ? i : i - 1500);
    parse_ok(big, &ul);
    assert_int_equal(ul.count, 1500);
    assert_int_equal(ul.entries[0].uid, 1501);
    assert_string_equal(ul.entries[0].base, "m1");
    assert_int_equal(uidlist_find_base(&ul, "m1500")->uid, 3000);
    uidlist_free(&ul);
    free(big);
}

/* An append cut short by a crash: the unterminated line is ignored and
 * file_size stops before it, so the next append rewrites. Also a tail of
 * zero bytes, as a file system can leave after a crash. */
static void test_torn_tail(void **state)
{
    (void)state;
    struct uidlist ul;
    const char *text = "3 V1 N2\n1 :a\n2 :b";
    parse_ok(text, &ul);
    assert_int_equal(ul.count, 1);
    assert_int_equal(ul.file_size, strlen("3 V1 N2\n1 :a\n"));
    assert_int_equal(ul.next_uid, 2);
    uidlist_free(&ul);
    static const char zeros[] = "3 V1 N2\n1 :a\n\0\0\0\0";
    struct petrel_error err = {0};
    assert_true(uidlist_parse("z", zeros, sizeof(zeros) - 1, &ul, &err));
    assert_int_equal(ul.count, 1);
    assert_int_equal(ul.file_size, sizeof(zeros) - 1 - 4);
    uidlist_free(&ul);
}

static void test_read_missing(void **state)
{
    (void)state;
    struct uidlist ul;
    struct petrel_error err = {0};
    assert_false(uidlist_read(AT_FDCWD, "/nonexistent/petrel/dovecot-uidlist", &ul, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    struct tmp t;
    tmp_init(&t);
    write_file(t.path, "3 V1 N2\n1 :a\nbad\n");
    assert_false(uidlist_read(AT_FDCWD, t.path, &ul, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    char want[200];
    snprintf(want, sizeof(want), "%s:3: invalid data", t.path);
    assert_non_null(strstr(err.message, want));
    tmp_done(&t);
}

/* Files Dovecot wrote (with its line format) come back byte for byte. */
static void test_write_round_trip(void **state)
{
    (void)state;
    struct tmp t;
    tmp_init(&t);
    const char *samples[] = {
        "3 V1795305040 N6 G7a875207522e026b6438000083ecc375\n"
        "1 :1795305042.M122797P14436.vm,S=29,W=33\n"
        "4 :1600000000.P123Q1.otherhost\n",
        "3 V1275660208 N25022 G3085f01b7f11094c501100008c4a11c1 X1 Pfoo\n"
        "25006 :1276528487.M364837P9451.kurkku,S=1355,W=1394\n"
        "25017 W2481 S2400 P:x :1276533073.M242911P3632.kurkku\n",
        "3 V7 N1 G00000000000000000000000000000000\n",
    };
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
        struct uidlist ul;
        parse_ok(samples[i], &ul);
        struct petrel_error err = {0};
        assert_true(uidlist_write(AT_FDCWD, t.path, &ul, true, &err));
        assert_string_equal(read_all(t.path), samples[i]);
        struct uidlist back;
        assert_true(uidlist_read(AT_FDCWD, t.path, &back, &err));
        assert_int_equal(back.count, ul.count);
        assert_int_equal(back.file_size, strlen(samples[i]));
        uidlist_free(&back);
        uidlist_free(&ul);
    }
    /* Normalised forms: v1 becomes v3, N covers the last UID, extension
     * spacing collapses, flags leave the file name. */
    struct uidlist ul;
    parse_ok("1 5 9\n1 a:2,S\n8 b\n", &ul);
    ul.has_guid = true;
    memset(ul.guid, 0xab, 16);
    struct petrel_error err = {0};
    assert_true(uidlist_write(AT_FDCWD, t.path, &ul, false, &err));
    assert_string_equal(read_all(t.path),
                        "3 V5 N9 Gabababababababababababababababab\n1 :a\n8 :b\n");
    uidlist_free(&ul);
    parse_ok("3 V5 N2 G00000000000000000000000000000001\n7 W1   S2 :x:2,S\n", &ul);
    assert_true(uidlist_write(AT_FDCWD, t.path, &ul, false, &err));
    assert_string_equal(read_all(t.path), "3 V5 N8 G00000000000000000000000000000001\n"
                                          "7 W1 S2 :x\n");
    uidlist_free(&ul);
    tmp_done(&t);
}

static void test_write_builds(void **state)
{
    (void)state;
    struct tmp t;
    tmp_init(&t);
    struct uidlist ul;
    memset(&ul, 0, sizeof(ul));
    ul.uid_validity = 1700000000;
    ul.next_uid = 1;
    struct petrel_error err = {0};
    /* Without a GUID one is generated. */
    assert_true(uidlist_write(AT_FDCWD, t.path, &ul, true, &err));
    struct uidlist back;
    assert_true(uidlist_read(AT_FDCWD, t.path, &back, &err));
    assert_true(back.has_guid);
    assert_int_equal(back.count, 0);
    uidlist_free(&back);
    uidlist_add(&ul, 3, "m3,S=5:2,S", "W7");
    uidlist_add(&ul, 9, "m9", NULL);
    assert_string_equal(ul.entries[0].base, "m3,S=5");
    ul.next_uid = 10;
    assert_true(uidlist_write(AT_FDCWD, t.path, &ul, true, &err));
    assert_true(uidlist_read(AT_FDCWD, t.path, &back, &err));
    assert_int_equal(back.next_uid, 10);
    assert_int_equal(back.count, 2);
    assert_string_equal(back.entries[0].extensions, "W7");
    assert_string_equal(back.entries[1].base, "m9");
    uidlist_free(&back);
    /* No temporary files left behind. */
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "test $(ls -A '%s' | wc -l) -eq 1", t.dir);
    assert_int_equal(system(cmd), 0);

    /* Invalid contents are refused, the file stays. */
    free(ul.entries[1].extensions);
    ul.entries[1].extensions = strdup("lower");
    assert_false(uidlist_write(AT_FDCWD, t.path, &ul, true, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    free(ul.entries[1].extensions);
    ul.entries[1].extensions = strdup("W1 ");
    assert_false(uidlist_write(AT_FDCWD, t.path, &ul, true, &err));
    free(ul.entries[1].extensions);
    ul.entries[1].extensions = strdup("");
    free(ul.entries[1].base);
    ul.entries[1].base = strdup("a/b");
    assert_false(uidlist_write(AT_FDCWD, t.path, &ul, true, &err));
    free(ul.entries[1].base);
    ul.entries[1].base = strdup("m9");
    ul.extra_header = strdup("V5");
    assert_false(uidlist_write(AT_FDCWD, t.path, &ul, true, &err));
    free(ul.extra_header);
    ul.extra_header = NULL;
    ul.uid_validity = 0;
    assert_false(uidlist_write(AT_FDCWD, t.path, &ul, true, &err));
    ul.uid_validity = 5;
    assert_true(uidlist_write(AT_FDCWD, t.path, &ul, true, &err));
    uidlist_free(&ul);
    tmp_done(&t);
}

static void test_format(void **state)
{
    (void)state;
    struct uidlist ul;
    parse_ok("3 V1 N2\n1 W5 :a\n", &ul);
    struct buf out = {0};
    buf_append_str(&out, "x");
    struct petrel_error err = {0};
    assert_false(uidlist_format(&ul, &out, &err)); /* no GUID */
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    assert_string_equal(buf_cstr(&out), "x");
    ul.has_guid = true;
    memset(ul.guid, 0x0f, 16);
    assert_true(uidlist_format(&ul, &out, &err));
    assert_string_equal(buf_cstr(&out), "x3 V1 N2 G0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f\n1 W5 :a\n");
    /* Odd bytes a Dovecot file may hold are written back as they were. */
    uidlist_free(&ul);
    static const char odd[] = "3 V1 N3 G0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f X\x7f\xff\n"
                              "1 Pa\tb\rc :base \x7f\xff\n";
    parse_ok(odd, &ul);
    buf_reset(&out);
    assert_true(uidlist_format(&ul, &out, &err));
    assert_string_equal(buf_cstr(&out), odd);
    buf_free(&out);
    uidlist_free(&ul);
}

static ino_t inode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_ino;
}

static void test_append(void **state)
{
    (void)state;
    struct tmp t;
    tmp_init(&t);
    write_file(t.path, dovecot_sample);
    struct uidlist ul;
    struct petrel_error err = {0};
    assert_true(uidlist_read(AT_FDCWD, t.path, &ul, &err));
    ino_t ino = inode_of(t.path);

    /* Plain append: same inode, header untouched (Dovecot's way). */
    size_t from = ul.count;
    uidlist_add(&ul, 6, "new6", "W10");
    uidlist_add(&ul, 7, "new7", "");
    ul.next_uid = 8;
    assert_true(uidlist_append(AT_FDCWD, t.path, &ul, from, true, &err));
    assert_int_equal(inode_of(t.path), ino);
    char expect[2048];
    snprintf(expect, sizeof(expect), "%s6 W10 :new6\n7 :new7\n", dovecot_sample);
    assert_string_equal(read_all(t.path), expect);
    assert_int_equal(ul.file_size, strlen(expect));
    struct uidlist back;
    assert_true(uidlist_read(AT_FDCWD, t.path, &back, &err));
    assert_int_equal(back.next_uid, 8);
    assert_int_equal(back.count, 7);
    uidlist_free(&back);

    /* Nothing new: no change. */
    assert_true(uidlist_append(AT_FDCWD, t.path, &ul, ul.count, true, &err));
    assert_string_equal(read_all(t.path), expect);

    /* A next UID beyond what the lines imply needs the header: rewrite. */
    from = ul.count;
    uidlist_add(&ul, 8, "new8", "");
    ul.next_uid = 20;
    assert_true(uidlist_append(AT_FDCWD, t.path, &ul, from, false, &err));
    assert_true(inode_of(t.path) != ino);
    assert_true(uidlist_read(AT_FDCWD, t.path, &back, &err));
    assert_int_equal(back.next_uid, 20);
    assert_int_equal(back.count, 8);
    assert_int_equal(back.file_size, ul.file_size);
    uidlist_free(&back);
    ino = inode_of(t.path);

    /* Someone else changed the file (size differs): rewrite from memory. */
    FILE *f = fopen(t.path, "a");
    fputs("30 :other\n", f);
    fclose(f);
    from = ul.count;
    uidlist_add(&ul, 21, "new21", "");
    ul.next_uid = 22;
    assert_true(uidlist_append(AT_FDCWD, t.path, &ul, from, false, &err));
    assert_true(inode_of(t.path) != ino);
    assert_true(uidlist_read(AT_FDCWD, t.path, &back, &err));
    assert_null(uidlist_find_base(&back, "other"));
    assert_int_equal(back.entries[back.count - 1].uid, 21);
    uidlist_free(&back);
    uidlist_free(&ul);

    /* A torn tail is never appended to. */
    write_file(t.path, "3 V1 N2 G00000000000000000000000000000001\n1 :a\n2 :b");
    assert_true(uidlist_read(AT_FDCWD, t.path, &ul, &err));
    from = ul.count;
    uidlist_add(&ul, 2, "c", "");
    assert_true(uidlist_append(AT_FDCWD, t.path, &ul, from, false, &err));
    assert_string_equal(read_all(t.path),
                        "3 V1 N3 G00000000000000000000000000000001\n1 :a\n2 :c\n");
    uidlist_free(&ul);

    /* A missing file or one never read: written whole. */
    unlink(t.path);
    memset(&ul, 0, sizeof(ul));
    ul.uid_validity = 9;
    ul.next_uid = 1;
    uidlist_add(&ul, 1, "x", "");
    assert_true(uidlist_append(AT_FDCWD, t.path, &ul, 0, true, &err));
    assert_true(ul.has_guid);
    assert_true(uidlist_read(AT_FDCWD, t.path, &back, &err));
    assert_int_equal(back.count, 1);
    assert_memory_equal(back.guid, ul.guid, 16);
    assert_int_equal(ul.file_size, back.file_size);
    uidlist_free(&back);

    /* A version 1 file is upgraded on the first append. */
    uidlist_free(&ul);
    write_file(t.path, "1 5 3\n1 a\n2 b\n");
    assert_true(uidlist_read(AT_FDCWD, t.path, &ul, &err));
    from = ul.count;
    uidlist_add(&ul, 3, "c", "");
    assert_true(uidlist_append(AT_FDCWD, t.path, &ul, from, false, &err));
    assert_int_equal(strncmp(read_all(t.path), "3 V5 N4 G", 9), 0);
    uidlist_free(&ul);

    /* A file whose next UID moved past ours (another writer) never goes back. */
    write_file(t.path, "3 V1 N2 G00000000000000000000000000000001\n1 :a\n");
    assert_true(uidlist_read(AT_FDCWD, t.path, &ul, &err));
    write_file(t.path, "3 V1 N50 G00000000000000000000000000000001\n");
    from = ul.count;
    uidlist_add(&ul, 2, "b", "");
    assert_true(uidlist_append(AT_FDCWD, t.path, &ul, from, false, &err));
    assert_int_equal(ul.next_uid, 50);
    assert_true(uidlist_read(AT_FDCWD, t.path, &back, &err));
    assert_int_equal(back.next_uid, 50);
    uidlist_free(&back);

    /* Bad ranges are refused. */
    assert_false(uidlist_append(AT_FDCWD, t.path, &ul, ul.count + 1, false, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    uidlist_free(&ul);
    tmp_done(&t);
}

/* Lines another handle appended are read on their own; anything else
 * (a replaced file, a name listed again, a torn or bad line) leaves the
 * list unchanged and asks for a whole read. */
static void test_read_appended(void **state)
{
    (void)state;
    struct tmp t;
    tmp_init(&t);
    write_file(t.path, dovecot_sample);
    struct uidlist mine, other;
    struct petrel_error err = {0};
    assert_true(uidlist_read(AT_FDCWD, t.path, &mine, &err));
    assert_true(uidlist_read(AT_FDCWD, t.path, &other, &err));
    assert_true(mine.file_ino != 0);

    /* Nothing appended: in step already. */
    assert_true(uidlist_read_appended(AT_FDCWD, t.path, &mine));
    assert_int_equal(mine.count, 5);

    /* The other handle appends two lines. */
    size_t from = other.count;
    uidlist_add(&other, 6, "new6", "W10");
    uidlist_add(&other, 7, "new7", "");
    other.next_uid = 8;
    assert_true(uidlist_append(AT_FDCWD, t.path, &other, from, false, &err));
    assert_true(uidlist_read_appended(AT_FDCWD, t.path, &mine));
    assert_int_equal(mine.count, 7);
    assert_int_equal(mine.next_uid, 8);
    assert_int_equal(mine.file_size, other.file_size);
    assert_string_equal(uidlist_find_uid(&mine, 6)->base, "new6");
    assert_string_equal(uidlist_find_uid(&mine, 6)->extensions, "W10");
    assert_string_equal(uidlist_find_uid(&mine, 7)->base, "new7");

    /* A name listed again under a higher UID: whole read needed. */
    FILE *f = fopen(t.path, "a");
    fputs("9 :new6\n", f);
    fclose(f);
    uint64_t size = mine.file_size;
    assert_false(uidlist_read_appended(AT_FDCWD, t.path, &mine));
    assert_int_equal(mine.count, 7);
    assert_int_equal(mine.file_size, size);
    uidlist_free(&mine);
    assert_true(uidlist_read(AT_FDCWD, t.path, &mine, &err));
    assert_int_equal(mine.count, 7); /* new6 now under UID 9 */
    assert_string_equal(uidlist_find_uid(&mine, 9)->base, "new6");

    /* A torn line (no newline yet) and a UID out of order: not read. */
    f = fopen(t.path, "a");
    fputs("10 :torn", f);
    fclose(f);
    assert_false(uidlist_read_appended(AT_FDCWD, t.path, &mine));
    assert_int_equal(mine.count, 7);
    f = fopen(t.path, "a");
    fputs("\n3 :old\n", f);
    fclose(f);
    assert_false(uidlist_read_appended(AT_FDCWD, t.path, &mine));
    assert_int_equal(mine.count, 7);

    /* A replaced file (same size or not) is never read from the middle. */
    uidlist_free(&mine);
    write_file(t.path, dovecot_sample);
    assert_true(uidlist_read(AT_FDCWD, t.path, &mine, &err));
    char *tmp_path = NULL;
    assert_true(asprintf(&tmp_path, "%s.new", t.path) > 0);
    char longer[2048];
    snprintf(longer, sizeof(longer), "%s6 :x6\n", dovecot_sample);
    write_file(tmp_path, longer);
    assert_int_equal(rename(tmp_path, t.path), 0);
    free(tmp_path);
    assert_false(uidlist_read_appended(AT_FDCWD, t.path, &mine));
    assert_int_equal(mine.count, 5);

    uidlist_free(&mine);
    uidlist_free(&other);
    tmp_done(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dovecot_sample), cmocka_unit_test(test_doc_sample),
        cmocka_unit_test(test_header_fields),  cmocka_unit_test(test_extensions),
        cmocka_unit_test(test_version1),       cmocka_unit_test(test_rejected),
        cmocka_unit_test(test_duplicate_base), cmocka_unit_test(test_torn_tail),
        cmocka_unit_test(test_read_missing),   cmocka_unit_test(test_write_round_trip),
        cmocka_unit_test(test_write_builds),   cmocka_unit_test(test_append),
        cmocka_unit_test(test_format),         cmocka_unit_test(test_read_appended),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
