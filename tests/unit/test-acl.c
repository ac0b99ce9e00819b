/* Unit tests for storage/acl: RFC 4314 rights letters (virtual c and d,
 * canonical order), identifiers, list changes, effective rights (negative
 * rights, owner, groups, group-override, inheritance) and Dovecot's
 * dovecot-acl file format. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/acl/acl-file.h"
#include "storage/acl/acl-list.h"
#include "storage/acl/acl-rights.h"

#include <stdlib.h>
#include <string.h>

/* Written by Dovecot 2.3.19 after SETACL Shared $grp lr, SETACL Shared bob
 * elptd (given as lrte, then +p, then -r) and SETACL Shared -bob w. */
static const char dovecot_sample[] = "group=grp lr\nuser=bob elpt\n-user=bob w\n";

static uint32_t rights(const char *text)
{
    uint32_t r = 0;
    char bad = 0;
    assert_true(acl_rights_parse(text, strlen(text), &r, &bad));
    return r;
}

static const char *show(uint32_t r, bool virt)
{
    static char out[14];
    return acl_rights_str(r, virt, out);
}

static struct acl_id id(const char *text)
{
    struct acl_id i;
    const char *why = NULL;
    assert_true(acl_id_parse(text, strlen(text), &i, &why));
    return i;
}

static void test_rights_letters(void **state)
{
    (void)state;
    /* every real letter round-trips, in canonical order l r s w i p k x t e c d a */
    assert_string_equal(show(rights("axetkpiwsrl"), true), "lrswipkxtecda");
    assert_string_equal(show(rights("axetkpiwsrl"), false), "lrswipkxtea");
    assert_int_equal(rights("lrswipkxtea"), ACL_ALL_RIGHTS);
    /* given, c is k and x and d is e and t (RIGHTS=texk, as Dovecot) */
    assert_int_equal(rights("c"), ACL_CREATE | ACL_DELETE);
    assert_int_equal(rights("d"), ACL_EXPUNGE | ACL_WRITE_DELETED);
    /* shown, c stands beside either of k, x and d beside either of e, t */
    assert_string_equal(show(ACL_CREATE, true), "kc");
    assert_string_equal(show(ACL_DELETE | ACL_LOOKUP, true), "lxc");
    assert_string_equal(show(ACL_WRITE_DELETED, true), "td");
    assert_string_equal(show(ACL_EXPUNGE, true), "ed");
    assert_string_equal(show(0, true), "");
    assert_int_equal(rights(""), 0);
    uint32_t r = 7;
    char bad = 0;
    assert_false(acl_rights_parse("lrz", 3, &r, &bad));
    assert_int_equal(bad, 'z');
    assert_false(acl_rights_parse("L", 1, &r, &bad)); /* letters are case-sensitive */
    assert_int_equal(acl_right_letter(ACL_WRITE_SEEN), 's');
    assert_int_equal(acl_right_letter(ACL_LOOKUP | ACL_READ), 0);
    assert_int_equal(acl_right_from_name("write-deleted", 13), ACL_WRITE_DELETED);
    assert_int_equal(acl_right_from_name("write", 5), ACL_WRITE);
    assert_int_equal(acl_right_from_name("writ", 4), 0);
}

static void test_identifiers(void **state)
{
    (void)state;
    static const char *good[] = {"anyone", "authenticated", "owner", "user=bob",
                                 "group=staff", "group-override=admins", "-user=bob",
                                 "-anyone", "user=bob@example.org"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct acl_id a = id(good[i]);
        struct buf b = {0};
        acl_id_format(&a, &b);
        assert_string_equal(buf_cstr(&b), good[i]);
        buf_free(&b);
    }
    assert_true(id("-user=bob").negative);
    assert_int_equal(id("group-override=x").kind, ACL_ID_GROUP_OVERRIDE);
    static const char *bad[] = {"", "-", "user=", "group=", "bob", "user", "anyone2",
                                "user=a b", "user=a\tb", "user=\x01", "Anyone", "--user=x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct acl_id a;
        const char *why = NULL;
        assert_false(acl_id_parse(bad[i], strlen(bad[i]), &a, &why));
        assert_non_null(why);
    }
    char longname[5 + ACL_ID_NAME_MAX + 2];
    memcpy(longname, "user=", 5);
    memset(longname + 5, 'a', ACL_ID_NAME_MAX + 1);
    struct acl_id a;
    const char *why = NULL;
    assert_false(acl_id_parse(longname, sizeof(longname) - 1, &a, &why));
    assert_true(acl_id_parse(longname, sizeof(longname) - 2, &a, &why));
}

static void test_modify_and_order(void **state)
{
    (void)state;
    struct acl_list l = {0};
    struct acl_id bob = id("user=bob"), nbob = id("-user=bob"), any = id("anyone"),
                  grp = id("group=grp"), own = id("owner");
    assert_true(acl_list_modify(&l, &bob, rights("lr"), ACL_MODIFY_REPLACE));
    assert_false(acl_list_modify(&l, &bob, rights("lr"), ACL_MODIFY_REPLACE));
    assert_true(acl_list_modify(&l, &bob, rights("p"), ACL_MODIFY_ADD));
    assert_true(acl_list_modify(&l, &bob, rights("r"), ACL_MODIFY_REMOVE));
    assert_int_equal(acl_list_find(&l, &bob)->rights, rights("lp"));
    assert_true(acl_list_modify(&l, &nbob, rights("w"), ACL_MODIFY_REPLACE));
    assert_true(acl_list_modify(&l, &any, rights("l"), ACL_MODIFY_REPLACE));
    assert_true(acl_list_modify(&l, &grp, rights("lr"), ACL_MODIFY_ADD));
    assert_true(acl_list_modify(&l, &own, rights("lrswipkxtea"), ACL_MODIFY_REPLACE));
    /* Dovecot's order: anyone, authenticated, group, owner, user; + before - */
    struct buf b = {0};
    acl_file_format(&l, &b);
    assert_string_equal(buf_cstr(&b), "anyone l\ngroup=grp lr\nowner lrswipkxtea\n"
                                      "user=bob lp\n-user=bob w\n");
    buf_free(&b);
    /* removing every right removes the entry; removing nothing changes nothing */
    assert_true(acl_list_modify(&l, &bob, rights("lp"), ACL_MODIFY_REMOVE));
    assert_null(acl_list_find(&l, &bob));
    assert_false(acl_list_modify(&l, &bob, rights("l"), ACL_MODIFY_REMOVE));
    assert_false(acl_list_modify(&l, &bob, 0, ACL_MODIFY_REPLACE));
    assert_true(acl_list_remove(&l, &nbob));
    assert_false(acl_list_remove(&l, &nbob));
    assert_int_equal(l.count, 3);
    /* inheritance: a new folder starts with a copy of its parent's list */
    struct acl_list child = {0};
    acl_list_copy(&child, &l);
    assert_true(acl_list_equal(&child, &l));
    assert_true(acl_list_modify(&child, &any, 0, ACL_MODIFY_REPLACE));
    assert_false(acl_list_equal(&child, &l));
    assert_int_equal(l.count, 3);
    acl_list_free(&child);
    acl_list_free(&l);
}

static void test_effective_rights(void **state)
{
    (void)state;
    struct acl_list l = {0};
    char why[128];
    const char text[] = "anyone l\nauthenticated r\ngroup=staff w\n-group=interns w\n"
                        "user=bob ie\n-user=bob l\n";
    assert_true(acl_file_parse(text, sizeof(text) - 1, &l, why, sizeof(why)));
    const char *staff[] = {"staff"}, *both[] = {"staff", "interns"};
    struct acl_identity nobody = {0};
    struct acl_identity alice = {.user = "alice"};
    struct acl_identity carol = {.user = "carol", .groups = staff, .group_count = 1};
    struct acl_identity dave = {.user = "dave", .groups = both, .group_count = 2};
    struct acl_identity bob = {.user = "bob"};
    struct acl_identity owner = {.user = "olga", .owner = true};
    assert_int_equal(acl_list_rights(&l, &nobody), ACL_LOOKUP);
    assert_int_equal(acl_list_rights(&l, &alice), rights("lr"));
    assert_int_equal(acl_list_rights(&l, &carol), rights("lrw"));
    /* a negative entry takes away what any positive one gives */
    assert_int_equal(acl_list_rights(&l, &dave), rights("lr"));
    assert_int_equal(acl_list_rights(&l, &bob), rights("rie"));
    /* the owner has every right without an owner entry, minus negatives that match */
    assert_int_equal(acl_list_rights(&l, &owner), ACL_ALL_RIGHTS);
    struct acl_id own = id("owner"), nany = id("-anyone");
    assert_true(acl_list_modify(&l, &own, rights("lr"), ACL_MODIFY_REPLACE));
    assert_int_equal(acl_list_rights(&l, &owner), rights("lr"));
    assert_true(acl_list_modify(&l, &own, 0, ACL_MODIFY_REPLACE));
    /* an entry naming the owner by name replaces their implicit rights too */
    struct acl_id olga = id("user=olga");
    assert_true(acl_list_modify(&l, &olga, rights("lra"), ACL_MODIFY_REPLACE));
    assert_int_equal(acl_list_rights(&l, &owner), rights("lra"));
    assert_true(acl_list_remove(&l, &olga));
    assert_true(acl_list_modify(&l, &nany, rights("x"), ACL_MODIFY_REPLACE));
    assert_int_equal(acl_list_rights(&l, &owner), ACL_ALL_RIGHTS & ~ACL_DELETE);
    /* group-override decides alone when it matches */
    struct acl_id ovr = id("group-override=staff");
    assert_true(acl_list_modify(&l, &ovr, rights("a"), ACL_MODIFY_REPLACE));
    assert_int_equal(acl_list_rights(&l, &carol), ACL_ADMIN);
    assert_int_equal(acl_list_rights(&l, &alice), rights("lr"));
    /* groups of someone not logged in count for nothing */
    struct acl_identity ghost = {.groups = staff, .group_count = 1};
    assert_int_equal(acl_list_rights(&l, &ghost), ACL_LOOKUP);
    acl_list_free(&l);
}

static void test_dovecot_file(void **state)
{
    (void)state;
    struct acl_list l = {0};
    char why[128];
    assert_true(acl_file_parse(dovecot_sample, strlen(dovecot_sample), &l, why, sizeof(why)));
    assert_int_equal(l.count, 3);
    struct acl_id bob = id("user=bob"), nbob = id("-user=bob");
    assert_int_equal(acl_list_find(&l, &bob)->rights, rights("lpte"));
    assert_int_equal(acl_list_find(&l, &nbob)->rights, ACL_WRITE);
    /* what we write, Dovecot wrote: same entries, real letters only */
    struct buf b = {0};
    acl_file_format(&l, &b);
    assert_string_equal(buf_cstr(&b), "group=grp lr\nuser=bob lpte\n-user=bob w\n");
    struct acl_list back = {0};
    assert_true(acl_file_parse(b.data, b.len, &back, why, sizeof(why)));
    assert_true(acl_list_equal(&l, &back));
    buf_free(&b);
    /* comments, blank lines, CRLF, ":name" words, c/d, repeated identifiers */
    const char text[] = "# shared with the team\r\n\r\n  \nuser=bob :lookup :read\r\n"
                        "user=bob s c\nanyone\tl\n";
    assert_true(acl_file_parse(text, sizeof(text) - 1, &back, why, sizeof(why)));
    assert_int_equal(acl_list_find(&back, &bob)->rights, rights("lrskx"));
    assert_int_equal(back.count, 2);
    /* an empty file is an empty list */
    assert_true(acl_file_parse("", 0, &back, why, sizeof(why)));
    assert_int_equal(back.count, 0);
    acl_list_free(&back);
    acl_list_free(&l);
}

static void test_bad_files_grant_nothing(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *why;
    } bad[] = {
        {"user=bob lrz\n", "line 1: unknown right letter"},
        {"anyone l\nuser=bob :fly\n", "line 2: unknown right name"},
        {"anyone l\n\nuser=bob\n", "line 3: no rights after the identifier"},
        {"bob lr\n", "line 1: unknown identifier"},
        {"user= lr\n", "line 1: the identifier has no name"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct acl_list l = {0};
        char why[160] = "";
        assert_false(acl_file_parse(bad[i].text, strlen(bad[i].text), &l, why, sizeof(why)));
        assert_int_equal(l.count, 0);
        assert_true(strncmp(why, bad[i].why, strlen(bad[i].why)) == 0);
        acl_list_free(&l);
    }
    struct acl_list l = {0};
    char why[160];
    const char nul[] = "anyone l\nuser=b\0b lr\n";
    assert_false(acl_file_parse(nul, sizeof(nul) - 1, &l, why, sizeof(why)));
    assert_string_equal(why, "line 2: a NUL byte");
    acl_list_free(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rights_letters),    cmocka_unit_test(test_identifiers),
        cmocka_unit_test(test_modify_and_order),  cmocka_unit_test(test_effective_rights),
        cmocka_unit_test(test_dovecot_file),      cmocka_unit_test(test_bad_files_grant_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
