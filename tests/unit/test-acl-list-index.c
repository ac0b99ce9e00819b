/* Unit tests for the ACL list index (storage/acl/acl-list-index.h) and the
 * sharing registry (storage/acl/acl-registry.h): the index's text form
 * (escaping, order, what is refused), rows set, removed and renamed with
 * their subtree, effective visibility from the rows alone (negative rights,
 * groups, the owner rule not applied, the root never listed), the index
 * written under its lock on disk and read back, and the registry keys of
 * an index synced into a real file dict (grants added, revocations removed,
 * another owner's keys left alone), looked up for a user with groups. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "core/yaml-doc.h"
#include "dict/dict.h"
#include "storage/acl/acl-list-index.h"
#include "storage/acl/acl-registry.h"
#include "storage/acl/acl-rights.h"
#include "storage/fileindex/fileindex.h" /* FILEINDEX_FSYNC_NEVER */
#include "storage/mail-storage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_TEXT "PETREL-ACL-INDEX 1\n"

static struct acl_list list_of(const char *text)
{
    /* "user=bob lr,-user=bob r,anyone l" */
    struct acl_list list = {0};
    char *copy = xstrdup(text);
    for (char *save = NULL, *e = strtok_r(copy, ",", &save); e != NULL;
         e = strtok_r(NULL, ",", &save)) {
        char *sp = strchr(e, ' ');
        assert_non_null(sp);
        struct acl_id id;
        const char *why = NULL;
        assert_true(acl_id_parse(e, (size_t)(sp - e), &id, &why));
        uint32_t r = 0;
        char bad = 0;
        assert_true(acl_rights_parse(sp + 1, strlen(sp + 1), &r, &bad));
        acl_list_modify(&list, &id, r, ACL_MODIFY_REPLACE);
    }
    free(copy);
    return list;
}

static void set(struct acl_index *idx, const char *folder, const char *entries)
{
    struct acl_list l = list_of(entries);
    acl_list_index_set_folder(idx, folder, &l);
    acl_list_free(&l);
}

static char *format(const struct acl_index *idx)
{
    struct buf out = {0};
    acl_list_index_format(idx, &out);
    buf_append_char(&out, '\0');
    return out.data;
}

static void test_format_and_parse(void **state)
{
    (void)state;
    struct acl_index idx = {0};
    set(&idx, "Shared", "user=bob lr,-user=bob r,anyone l");
    set(&idx, "", "owner lrswipkxtea");
    set(&idx, "Tab\there\\x\n", "group=staff lrs");
    char *text = format(&idx);
    assert_string_equal(text, "PETREL-ACL-INDEX 1\n"
                              "\towner\tlrswipkxtea\n"
                              "Shared\tanyone\tl\n"
                              "Shared\tuser=bob\tlr\n"
                              "Shared\t-user=bob\tr\n"
                              "Tab\\there\\\\x\\n\tgroup=staff\tlrs\n");
    struct acl_index back = {0};
    char why[128];
    assert_true(acl_list_index_parse(text, strlen(text), &back, why, sizeof(why)));
    assert_true(acl_list_index_equal(&idx, &back));
    assert_string_equal(back.rows[4].folder, "Tab\there\\x\n");
    /* \xHH for the other control bytes, lower-case, and back */
    set(&idx, "a\001b\177", "anyone l");
    free(text);
    text = format(&idx);
    assert_non_null(strstr(text, "a\\x01b\\x7f\tanyone\tl\n"));
    assert_true(acl_list_index_parse(text, strlen(text), &back, why, sizeof(why)));
    assert_true(acl_list_index_equal(&idx, &back));
    free(text);
    acl_list_index_free(&idx);
    acl_list_index_free(&back);
}

static void expect_bad(const char *text, const char *reason)
{
    struct acl_index idx = {0};
    char why[160];
    assert_false(acl_list_index_parse(text, strlen(text), &idx, why, sizeof(why)));
    assert_int_equal(idx.count, 0);
    if (strstr(why, reason) == NULL)
        fail_msg("'%s' answered '%s', not '%s'", text, why, reason);
    acl_list_index_free(&idx);
}

static void test_parse_refuses(void **state)
{
    (void)state;
    expect_bad("", "line 1: not a Petrel ACL list index");
    expect_bad("PETREL-ACL-INDEX 2\n", "line 1:");
    expect_bad("PETREL-ACL-INDEX 1\nA\tanyone\tl", "line 2: the last line has no line feed");
    expect_bad("PETREL-ACL-INDEX 1\nA\tanyone l\n", "line 2: a row needs three");
    expect_bad("PETREL-ACL-INDEX 1\nA\tnobody\tl\n", "line 2: unknown identifier");
    expect_bad("PETREL-ACL-INDEX 1\nA\tanyone\t\n", "line 2: rights must be");
    expect_bad("PETREL-ACL-INDEX 1\nA\tanyone\trl\n", "line 2: rights must be");
    expect_bad("PETREL-ACL-INDEX 1\nA\tanyone\tlc\n", "line 2: rights must be");
    expect_bad("PETREL-ACL-INDEX 1\nA\tanyone\tl\tx\n", "line 2: rights must be");
    expect_bad("PETREL-ACL-INDEX 1\nB\tanyone\tl\nA\tanyone\tl\n", "line 3: rows out of order");
    expect_bad("PETREL-ACL-INDEX 1\nA\tanyone\tl\nA\tanyone\tr\n", "line 3: rows out of order");
    expect_bad("PETREL-ACL-INDEX 1\nA\\q\tanyone\tl\n", "line 2: an unknown escape");
    expect_bad("PETREL-ACL-INDEX 1\nA\\\tanyone\tl\n", "line 2: ");
    expect_bad("PETREL-ACL-INDEX 1\nA\\x00\tanyone\tl\n", "line 2: a bad \\x escape");
    expect_bad("PETREL-ACL-INDEX 1\nA\\x41\tanyone\tl\n", "line 2: a bad \\x escape");
    expect_bad("PETREL-ACL-INDEX 1\nA\\x0A\tanyone\tl\n", "line 2: a bad \\x escape");
    expect_bad("PETREL-ACL-INDEX 1\nA\rB\tanyone\tl\n", "line 2: a control byte");
    /* an index with no rows is valid */
    struct acl_index idx = {0};
    char why[64];
    assert_true(acl_list_index_parse("PETREL-ACL-INDEX 1\n", 19, &idx, why, sizeof(why)));
    assert_int_equal(idx.count, 0);
}

static void test_rows_change(void **state)
{
    (void)state;
    struct acl_index idx = {0};
    set(&idx, "a", "anyone l");
    set(&idx, "a/b", "user=bob lr");
    set(&idx, "a/b/c", "user=carl l");
    set(&idx, "ab", "user=dan l");
    /* setting the same entries changes nothing */
    struct acl_list same = list_of("user=bob lr");
    assert_false(acl_list_index_set_folder(&idx, "a/b", &same));
    acl_list_free(&same);
    /* rename takes the subtree, not the sibling "ab" */
    assert_true(acl_list_index_rename_folder(&idx, "a/b", "x", '/'));
    char *text = format(&idx);
    assert_string_equal(text, "PETREL-ACL-INDEX 1\n"
                              "a\tanyone\tl\n"
                              "ab\tuser=dan\tl\n"
                              "x\tuser=bob\tlr\n"
                              "x/c\tuser=carl\tl\n");
    free(text);
    /* stale rows at the destination go; a rename of an unindexed folder
     * still clears them */
    set(&idx, "y", "user=old l");
    assert_true(acl_list_index_rename_folder(&idx, "none", "y", '/'));
    struct acl_list l = {0};
    assert_false(acl_list_index_folder(&idx, "y", &l));
    /* delete takes the subtree */
    assert_true(acl_list_index_remove_folder(&idx, "x", '/'));
    assert_false(acl_list_index_remove_folder(&idx, "x", '/'));
    text = format(&idx);
    assert_string_equal(text, "PETREL-ACL-INDEX 1\na\tanyone\tl\nab\tuser=dan\tl\n");
    free(text);
    /* an empty list removes the folder's rows */
    assert_true(acl_list_index_set_folder(&idx, "a", &l));
    assert_true(acl_list_index_folder(&idx, "ab", &l));
    assert_int_equal(l.count, 1);
    acl_list_free(&l);
    acl_list_index_free(&idx);
}

struct seen {
    char names[16][32];
    uint32_t rights[16];
    size_t count;
};

static void visit(void *arg, const char *folder, uint32_t rights)
{
    struct seen *s = arg;
    assert_true(s->count < 16);
    snprintf(s->names[s->count], sizeof(s->names[0]), "%s", folder);
    s->rights[s->count++] = rights;
}

static void test_visibility(void **state)
{
    (void)state;
    struct acl_index idx = {0};
    set(&idx, "", "anyone lr");                        /* the root: never listed */
    set(&idx, "Public", "authenticated lr");           /* every logged-in user */
    set(&idx, "Team", "group=staff lrs");              /* staff */
    set(&idx, "NotBob", "group=staff lr,-user=bob l"); /* staff but bob */
    set(&idx, "Bob", "user=bob lrw");
    set(&idx, "ReadOnly", "user=bob r");     /* no l: not listed */
    set(&idx, "Owner", "owner lrswipkxtea"); /* owner rule off */
    set(&idx, "Override", "group-override=ops l,user=bob lrw");
    const char *groups[] = {"staff"};
    struct acl_identity bob = {.user = "bob", .groups = groups, .group_count = 1, .owner = true};
    struct seen s = {0};
    assert_int_equal(acl_list_index_visible_in(&idx, &bob, visit, &s), 4);
    assert_string_equal(s.names[0], "Bob");
    assert_string_equal(acl_rights_str(s.rights[0], false, (char[14]){0}), "lrw");
    assert_string_equal(s.names[1], "Override");
    assert_string_equal(s.names[2], "Public");
    assert_string_equal(s.names[3], "Team");
    assert_string_equal(acl_rights_str(s.rights[3], false, (char[14]){0}), "lrs");
    /* ops' override replaces bob's own entry */
    const char *ops[] = {"ops"};
    struct acl_identity opsbob = {.user = "bob", .groups = ops, .group_count = 1};
    memset(&s, 0, sizeof(s));
    acl_list_index_visible_in(&idx, &opsbob, visit, &s);
    assert_int_equal(s.count, 3); /* Bob, Override (l only), Public */
    assert_string_equal(s.names[1], "Override");
    assert_int_equal(s.rights[1], ACL_LOOKUP);
    /* nobody logged in sees what anyone is given: nothing but the root */
    struct acl_identity nobody = {0};
    memset(&s, 0, sizeof(s));
    assert_int_equal(acl_list_index_visible_in(&idx, &nobody, visit, &s), 0);
    acl_list_index_free(&idx);
}

/* ---------- on disk, and the registry in a file dict ---------- */

struct fixture {
    char dir[64];
    struct mail_config cfg;
    struct mail_storage *storage;
    struct mail_user *alice;
    const struct namespace_config *ns;
    struct dict_registry *dicts;
    struct dict *dict;
};

static int setup(void **state)
{
    struct fixture *f = xcalloc(1, sizeof(*f));
    strcpy(f->dir, "/tmp/petrel-aclidx-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    struct petrel_error err;
    assert_true(mail_config_read(NULL, NULL, &f->cfg, &err));
    free(f->cfg.home);
    f->cfg.home = xasprintf("%s/%%u", f->dir);
    f->cfg.fsync = FILEINDEX_FSYNC_NEVER;
    f->storage = mail_storage_new(&f->cfg, NULL);
    f->alice = mail_user_get(f->storage, "alice", &err);
    assert_non_null(f->alice);
    f->ns = mail_user_namespace(f->alice, "personal", &err);
    struct mailbox *inbox = mailbox_open(f->alice, f->ns, "INBOX", &err);
    assert_non_null(inbox);
    mailbox_close(inbox);
    char *yaml = xasprintf("dicts:\n  reg:\n    driver: file\n    path: \"%s/registry\"\n", f->dir);
    struct ydoc *doc = ydoc_parse("t.yaml", yaml, strlen(yaml), &err);
    free(yaml);
    assert_non_null(doc);
    f->dicts = dict_registry_read("t.yaml", ynode_get(doc->root, "dicts"), &err);
    ydoc_free(doc);
    assert_non_null(f->dicts);
    assert_true(dict_registry_open(f->dicts, NULL, NULL, &err));
    f->dict = dict_registry_get(f->dicts, "reg");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    mail_storage_free(f->storage);
    mail_config_free(&f->cfg);
    dict_registry_close(f->dicts);
    dict_registry_free(f->dicts);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

static void test_on_disk(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    struct acl_index idx = {0};
    /* no index: none, and nothing visible */
    assert_int_equal(acl_list_index_read(f->alice, f->ns, &idx, &err), 0);
    struct acl_identity bob = {.user = "bob"};
    struct seen s = {0};
    assert_int_equal(acl_list_index_visible(f->alice, f->ns, &bob, visit, &s, &err), 0);
    struct acl_list l = list_of("user=bob lr");
    assert_true(acl_list_index_write_folder(f->alice, f->ns, "Shared", &l, &err));
    acl_list_free(&l);
    assert_int_equal(acl_list_index_visible(f->alice, f->ns, &bob, visit, &s, &err), 1);
    assert_string_equal(s.names[0], "Shared");
    /* the file is where the header says, with the header's text, 0600-ish
     * and no temporary left beside it */
    struct buf path = {0};
    assert_true(mail_user_namespace_root(f->alice, f->ns, &path, &err));
    buf_append_str(&path, "/" ACL_LIST_INDEX_FILE);
    buf_append_char(&path, '\0');
    FILE *fp = fopen(path.data, "r");
    assert_non_null(fp);
    char text[128] = {0};
    assert_true(fread(text, 1, sizeof(text) - 1, fp) > 0);
    fclose(fp);
    assert_string_equal(text, "PETREL-ACL-INDEX 1\nShared\tuser=bob\tlr\n");
    /* a damaged index: read fails, visible fails, the next write rewrites */
    fp = fopen(path.data, "w");
    fputs("garbage\n", fp);
    fclose(fp);
    assert_int_equal(acl_list_index_read(f->alice, f->ns, &idx, &err), -1);
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    assert_int_equal(acl_list_index_visible(f->alice, f->ns, &bob, visit, &s, &err), -1);
    l = list_of("anyone l");
    assert_true(acl_list_index_write_folder(f->alice, f->ns, "Other", &l, &err));
    acl_list_free(&l);
    assert_int_equal(acl_list_index_read(f->alice, f->ns, &idx, &err), 1);
    assert_int_equal(idx.count, 1);
    acl_list_index_free(&idx);
    buf_free(&path);
}

static bool has_key(struct fixture *f, const char *key);

/* A snapshot re-reads only a changed index: rows follow each write, an
 * untouched file keeps the rows read (a file edited in place keeping its
 * inode, size and times is not looked at again), a removed one none. */
static void test_snapshot(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    struct acl_index_snapshot snap = {0};
    assert_int_equal(acl_list_index_refresh(f->alice, f->ns, &snap, &err), 0);
    assert_int_equal(snap.idx.count, 0);
    struct acl_list l = list_of("user=bob lr");
    assert_true(acl_list_index_write_folder(f->alice, f->ns, "A", &l, &err));
    acl_list_free(&l);
    assert_int_equal(acl_list_index_refresh(f->alice, f->ns, &snap, &err), 1);
    assert_int_equal(snap.idx.count, 1);
    struct buf path = {0};
    assert_true(acl_list_index_path(f->alice, f->ns, &path, &err));
    struct stat st;
    assert_int_equal(stat(path.data, &st), 0);
    /* same size, same inode, times put back: the snapshot is kept */
    FILE *fp = fopen(path.data, "r+");
    assert_non_null(fp);
    fseek(fp, (long)strlen(HEADER_TEXT), SEEK_SET);
    fputc('B', fp); /* "A\tuser..." becomes "B\tuser..." */
    fclose(fp);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, path.data, times, 0), 0);
    assert_int_equal(acl_list_index_refresh(f->alice, f->ns, &snap, &err), 1);
    assert_string_equal(snap.idx.rows[0].folder, "A");
    /* a write (a new file by rename) is seen */
    l = list_of("user=carl l");
    assert_true(acl_list_index_write_folder(f->alice, f->ns, "C", &l, &err));
    acl_list_free(&l);
    assert_int_equal(acl_list_index_refresh(f->alice, f->ns, &snap, &err), 1);
    assert_int_equal(snap.idx.count, 2);
    assert_string_equal(snap.idx.rows[0].folder, "B");
    unlink(path.data);
    assert_int_equal(acl_list_index_refresh(f->alice, f->ns, &snap, &err), 0);
    assert_int_equal(snap.idx.count, 0);
    buf_free(&path);
    acl_list_index_snapshot_free(&snap);
}

static void committed(enum dict_commit_result result, const char *error, void *ctx)
{
    (void)error, (void)ctx;
    assert_int_equal(result, DICT_COMMIT_OK);
}

/* A write of the index syncs the owner's registry keys at once (the file
 * driver answers inside the call). */
static void test_write_syncs_registry(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    acl_registry_storage_set_dict(f->storage, f->dict);
    assert_true(acl_registry_configured(f->storage));
    struct acl_list l = list_of("user=bob lr");
    assert_true(acl_list_index_write_folder(f->alice, f->ns, "Shared", &l, &err));
    acl_list_free(&l);
    assert_true(has_key(f, "shared/shared-boxes/user/bob/alice"));
    /* a key lost from the registry comes back with the next write that
     * changes the index (the new index's keys are set again) */
    struct dict_transaction *tx = dict_transaction_begin(f->dict, &(struct dict_op_settings){0});
    dict_unset(tx, "shared/shared-boxes/user/bob/alice");
    dict_transaction_commit(tx, committed, NULL);
    assert_false(has_key(f, "shared/shared-boxes/user/bob/alice"));
    l = list_of("user=carl l");
    assert_true(acl_list_index_write_folder(f->alice, f->ns, "Other", &l, &err));
    acl_list_free(&l);
    assert_true(has_key(f, "shared/shared-boxes/user/bob/alice"));
    assert_true(has_key(f, "shared/shared-boxes/user/carl/alice"));
    /* revocation: only the keys no folder gives any more go */
    struct acl_list none = {0};
    assert_true(acl_list_index_write_folder(f->alice, f->ns, "Shared", &none, &err));
    assert_false(has_key(f, "shared/shared-boxes/user/bob/alice"));
    assert_true(has_key(f, "shared/shared-boxes/user/carl/alice"));
}

struct answer {
    bool called, ok;
    size_t rows;
    char owners[8][32];
    size_t count;
};

static void done(bool ok, const char *error, size_t rows, void *ctx)
{
    (void)error;
    struct answer *a = ctx;
    a->called = true;
    a->ok = ok;
    a->rows = rows;
}

static void owners(bool ok, const char *error, const char *const *list, size_t count, void *ctx)
{
    (void)error;
    struct answer *a = ctx;
    a->called = true;
    a->ok = ok;
    a->count = count;
    for (size_t i = 0; i < count && i < 8; i++)
        snprintf(a->owners[i], sizeof(a->owners[i]), "%s", list[i]);
}

static void sync_owner(struct fixture *f, const char *owner, struct acl_index *idx, size_t rows)
{
    struct answer a = {0};
    acl_registry_sync(f->dict, owner, idx, done, &a);
    assert_true(a.called); /* the file driver answers at once */
    assert_true(a.ok);
    assert_int_equal(a.rows, rows);
}

static struct answer lookup(struct fixture *f, const struct acl_identity *who)
{
    struct answer a = {0};
    acl_registry_owners(f->dict, who, owners, &a);
    assert_true(a.called);
    assert_true(a.ok);
    return a;
}

static bool has_key(struct fixture *f, const char *key)
{
    struct dict_iterate *it =
        dict_iterate_init(f->dict, &(struct dict_op_settings){0}, key, DICT_ITER_EXACT_KEY, NULL);
    struct dict_row row;
    bool found = dict_iterate_next(it, &row) == DICT_ITER_ROW;
    dict_iterate_deinit(it);
    return found;
}

static void test_registry(void **state)
{
    struct fixture *f = *state;
    struct acl_index idx = {0};
    set(&idx, "", "user=zed lr");               /* the root: not projected */
    set(&idx, "A", "user=bob lr,-user=carl l"); /* negative: not projected */
    set(&idx, "B", "group=staff l,authenticated l,user=alice lr,owner l");
    set(&idx, "C", "user=dan r,user=a/b l"); /* no l; a '/' name */
    char **ids = NULL;
    size_t n = 0;
    acl_registry_ids_of(&idx, "alice", &ids, &n);
    assert_int_equal(n, 3);
    assert_string_equal(ids[0], "anyone");
    assert_string_equal(ids[1], "group/staff");
    assert_string_equal(ids[2], "user/bob");
    acl_registry_ids_free(ids, n);

    sync_owner(f, "alice", &idx, 3);
    assert_true(has_key(f, "shared/shared-boxes/user/bob/alice"));
    assert_true(has_key(f, "shared/shared-boxes/group/staff/alice"));
    assert_true(has_key(f, "shared/shared-boxes/anyone/alice"));
    /* another owner shares with bob only */
    struct acl_index other = {0};
    set(&other, "X", "user=bob l");
    sync_owner(f, "olga", &other, 1);

    const char *staff[] = {"staff"};
    struct acl_identity bob = {.user = "bob"};
    struct answer a = lookup(f, &bob);
    assert_int_equal(a.count, 2);
    assert_string_equal(a.owners[0], "alice");
    assert_string_equal(a.owners[1], "olga");
    struct acl_identity eve = {.user = "eve", .groups = staff, .group_count = 1};
    a = lookup(f, &eve);
    assert_int_equal(a.count, 1); /* anyone and staff: alice, once */
    struct acl_identity nobody = {0};
    a = lookup(f, &nobody);
    assert_int_equal(a.count, 1);

    /* revocations: alice keeps only staff; olga's key stays */
    acl_list_index_clear(&idx);
    set(&idx, "B", "group=staff l");
    sync_owner(f, "alice", &idx, 1);
    assert_false(has_key(f, "shared/shared-boxes/user/bob/alice"));
    assert_false(has_key(f, "shared/shared-boxes/anyone/alice"));
    assert_true(has_key(f, "shared/shared-boxes/user/bob/olga"));
    a = lookup(f, &bob);
    assert_int_equal(a.count, 1);
    assert_string_equal(a.owners[0], "olga");
    /* a sync with nothing to change is still an answer */
    sync_owner(f, "alice", &idx, 1);
    acl_list_index_clear(&idx);
    sync_owner(f, "alice", &idx, 0);
    a = lookup(f, &eve);
    assert_int_equal(a.count, 0);
    acl_list_index_free(&idx);
    acl_list_index_free(&other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_and_parse),
        cmocka_unit_test(test_parse_refuses),
        cmocka_unit_test(test_rows_change),
        cmocka_unit_test(test_visibility),
        cmocka_unit_test_setup_teardown(test_on_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_registry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_syncs_registry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
