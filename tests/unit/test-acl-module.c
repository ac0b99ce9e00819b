/* Unit tests for the ACL storage module (storage/acl/acl-module.h) over the
 * real maildir driver: which right each hook asks, a folder without l
 * refused as a missing one, the admin plane's users passing every check,
 * the userdb groups of a session user, inheritance written at creation from
 * the nearest existing parent or the namespace root, a handle's cached
 * rights following a changed file once the cache time has passed, and an
 * unreadable file granting nothing. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "storage/acl/acl-module.h"
#include "storage/acl/acl-rights.h"
#include "storage/acl/acl-store.h"
#include "storage/fileindex/fileindex.h" /* FILEINDEX_FSYNC_NEVER */
#include "storage/mail-storage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fixture {
    char dir[64];
    struct mail_config cfg;
    struct mail_storage *storage;
    struct mail_user *alice; /* a session's */
    struct mail_user *admin; /* the admin plane's alice */
    const struct namespace_config *ns;
};

static const char msg[] = "From: a@example.org\r\nSubject: acl\r\n\r\nbody\r\n";

static int setup(void **state)
{
    struct fixture *f = xcalloc(1, sizeof(*f));
    strcpy(f->dir, "/tmp/petrel-aclmod-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    struct petrel_error err;
    assert_true(mail_config_read(NULL, NULL, &f->cfg, &err));
    free(f->cfg.home);
    f->cfg.home = xasprintf("%s/%%u", f->dir);
    f->cfg.fsync = FILEINDEX_FSYNC_NEVER;
    f->cfg.acl.enabled = true;
    f->cfg.acl.cache_ms = 0;
    f->storage = mail_storage_new(&f->cfg, NULL);
    assert_true(mail_storage_module_register(f->storage, &acl_storage_module, &f->cfg.acl, &err));
    static const char *const groups[] = {"staff", NULL};
    f->alice = mail_user_get_session(f->storage, "alice", groups, &err);
    f->admin = mail_user_get(f->storage, "alice", &err);
    assert_non_null(f->alice);
    assert_ptr_not_equal(f->alice, f->admin);
    f->ns = mail_user_namespace(f->alice, "personal", &err);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    mail_storage_free(f->storage);
    mail_config_free(&f->cfg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

/* Writes `text` as the ACL file of `folder` ("" the root). */
static void write_acl(struct fixture *f, const char *folder, const char *text)
{
    struct buf path = {0};
    struct petrel_error err;
    assert_true(acl_store_dir(f->alice, f->ns, folder, &path, &err));
    buf_append_str(&path, "/dovecot-acl");
    FILE *fp = fopen(buf_cstr(&path), "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
    buf_free(&path);
}

static char *read_acl(struct fixture *f, const char *folder)
{
    struct buf path = {0};
    struct petrel_error err;
    assert_true(acl_store_dir(f->alice, f->ns, folder, &path, &err));
    buf_append_str(&path, "/dovecot-acl");
    FILE *fp = fopen(buf_cstr(&path), "r");
    buf_free(&path);
    if (fp == NULL)
        return NULL;
    char *text = xcalloc(1, 4096);
    size_t n = fread(text, 1, 4095, fp);
    text[n] = '\0';
    fclose(fp);
    return text;
}

static uint32_t rights(const char *letters)
{
    uint32_t r = 0;
    char bad;
    assert_true(acl_rights_parse(letters, strlen(letters), &r, &bad));
    return r;
}

static void test_each_hook_asks_its_right(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(mail_folder_create(f->alice, f->ns, "Work", &err));
    struct mailbox *box = mailbox_open(f->alice, f->ns, "Work", &err);
    uint32_t uid = 0;
    assert_true(mailbox_append(box, msg, sizeof(msg) - 1, 0, NULL, 0, &uid, &err));
    assert_int_equal(mailbox_my_rights(box), ACL_ALL_RIGHTS);

    write_acl(f, "Work", "owner lr\n");
    assert_int_equal(mailbox_my_rights(box), rights("lr"));
    const struct mailbox_flags_update seen = {.mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_SEEN};
    const struct mailbox_flags_update del = {.mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_DELETED};
    const struct mailbox_flags_update flag = {.mode = MAILBOX_FLAGS_ADD,
                                              .flags = MAIL_FLAG_FLAGGED};
    const struct mailbox_flags_update *updates[] = {&seen, &del, &flag};
    const char *needs[] = {"lrs", "lrt", "lrw"};
    for (size_t i = 0; i < 3; i++) {
        assert_false(mailbox_update_flags(box, &uid, 1, updates[i], NULL, NULL, NULL, NULL, &err));
        assert_int_equal(err.code, PETREL_ERR_PERMISSION);
        assert_string_equal(err.message, "Permission denied");
        char line[32];
        snprintf(line, sizeof(line), "owner %s\n", needs[i]);
        write_acl(f, "Work", line);
        assert_true(mailbox_update_flags(box, &uid, 1, updates[i], NULL, NULL, NULL, NULL, &err));
        write_acl(f, "Work", "owner lr\n");
    }
    uint32_t *gone = NULL;
    size_t gone_count = 0;
    assert_false(mailbox_expunge(box, NULL, 0, &gone, &gone_count, &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    assert_false(mailbox_append(box, msg, sizeof(msg) - 1, 0, NULL, 0, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    /* open for saving asks i, for delivery p (or the owner's i) */
    assert_null(mailbox_open_for(f->alice, f->ns, "Work", MAILBOX_OPEN_SAVE, &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    assert_null(mailbox_open_for(f->alice, f->ns, "Work", MAILBOX_OPEN_POST, &err));
    write_acl(f, "Work", "owner lri\n");
    struct mailbox *post = mailbox_open_for(f->alice, f->ns, "Work", MAILBOX_OPEN_POST, &err);
    assert_non_null(post);
    assert_true(mailbox_append(post, msg, sizeof(msg) - 1, 0, NULL, 0, NULL, &err));
    mailbox_close(post);
    /* MOVE out asks t and e of the source */
    assert_true(mail_folder_create(f->alice, f->ns, "Dest", &err));
    struct mailbox *dst = mailbox_open(f->alice, f->ns, "Dest", &err);
    uint32_t *new_uids = NULL;
    assert_false(mailbox_move(box, &uid, 1, dst, &new_uids, &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    free(new_uids);
    assert_true(mailbox_copy(box, &uid, 1, dst, true, &new_uids, &err));
    free(new_uids);
    mailbox_close(dst);
    /* folders: k on the parent, x on the folder */
    assert_false(mail_folder_create(f->alice, f->ns, "Work/Sub", &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    assert_false(mail_folder_delete(f->alice, f->ns, "Work", &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    assert_false(mail_folder_rename(f->alice, f->ns, "Work", "Play", &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    write_acl(f, "Work", "owner lrx\n");
    write_acl(f, "", "owner lrswipxtea\n"); /* the root (INBOX's file): no k */
    assert_false(mail_folder_rename(f->alice, f->ns, "Work", "Play", &err));
    assert_false(mail_folder_create(f->alice, f->ns, "Top", &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    /* the admin plane passes every check */
    assert_true(mail_folder_create(f->admin, f->ns, "Top", &err));
    assert_true(mail_folder_rename(f->admin, f->ns, "Work", "Play", &err));
    mailbox_close(box);
}

static void test_no_lookup_is_missing(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(mail_folder_create(f->alice, f->ns, "Secret", &err));
    write_acl(f, "Secret", "owner a\n");
    assert_int_equal(mail_folder_my_rights(f->alice, f->ns, "Secret"), ACL_ADMIN);
    assert_null(mailbox_open(f->alice, f->ns, "Secret", &err));
    struct petrel_error missing;
    assert_null(mailbox_open(f->alice, f->ns, "Nothing", &missing));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    assert_int_equal(missing.code, PETREL_ERR_NOT_FOUND);
    assert_false(mail_folder_delete(f->alice, f->ns, "Secret", &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    assert_string_equal(err.message, "folder not found: Secret");
    /* groups of the session user count: a negative staff entry */
    write_acl(f, "Secret", "owner lr\n-group=staff r\n");
    assert_int_equal(mail_folder_my_rights(f->alice, f->ns, "Secret"), ACL_LOOKUP);
    assert_int_equal(mail_folder_my_rights(f->admin, f->ns, "Secret"), ACL_ALL_RIGHTS);
    /* a file that cannot be read grants nothing */
    write_acl(f, "Secret", "owner lr\nbogus line\n");
    assert_int_equal(mail_folder_my_rights(f->alice, f->ns, "Secret"), 0);
}

static void test_inheritance_at_creation(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(mail_folder_create(f->alice, f->ns, "P", &err));
    write_acl(f, "P", "user=bob lr\n");
    assert_true(mail_folder_create(f->alice, f->ns, "P/C", &err));
    char *text = read_acl(f, "P/C");
    assert_string_equal(text, "user=bob lr\n");
    free(text);
    /* the nearest existing ancestor when a level is no folder */
    assert_true(mail_folder_create(f->alice, f->ns, "P/X/Y", &err));
    text = read_acl(f, "P/X/Y");
    assert_string_equal(text, "user=bob lr\n");
    free(text);
    /* top level: the root's; none there: no file */
    assert_true(mail_folder_create(f->admin, f->ns, "Bare", &err));
    assert_null(read_acl(f, "Bare"));
    write_acl(f, "", "group=staff l\n");
    assert_true(mail_folder_create(f->admin, f->ns, "Top", &err));
    text = read_acl(f, "Top");
    assert_string_equal(text, "group=staff l\n");
    free(text);
}

static bool add_bob(struct acl_list *list, void *ctx, struct petrel_error *err)
{
    (void)ctx, (void)err;
    struct acl_id id;
    const char *why;
    assert_true(acl_id_parse("user=bob", 8, &id, &why));
    acl_list_modify(list, &id, ACL_LOOKUP, ACL_MODIFY_ADD);
    return true;
}

static void test_cached_rights_follow_the_file(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(mail_folder_create(f->alice, f->ns, "C", &err));
    f->cfg.acl.cache_ms = 3600 * 1000; /* the module reads it live */
    struct mailbox *box = mailbox_open(f->alice, f->ns, "C", &err);
    assert_int_equal(mailbox_my_rights(box), ACL_ALL_RIGHTS);
    write_acl(f, "C", "owner lr\n");
    /* within the cache time the handle keeps what it knew */
    assert_int_equal(mailbox_my_rights(box), ACL_ALL_RIGHTS);
    assert_int_equal(mail_folder_my_rights(f->alice, f->ns, "C"), ACL_ALL_RIGHTS);
    /* a change made through this user voids both caches at once */
    mail_user_rights_changed(f->alice);
    assert_int_equal(mailbox_my_rights(box), rights("lr"));
    assert_int_equal(mail_folder_my_rights(f->alice, f->ns, "C"), rights("lr"));
    write_acl(f, "C", "owner lrw\n");
    assert_int_equal(mailbox_my_rights(box), rights("lr"));
    f->cfg.acl.cache_ms = 0;
    write_acl(f, "C", "owner lr\n");
    assert_int_equal(mailbox_my_rights(box), rights("lr"));
    /* acl_store_update changes the file under its lock */
    struct buf dir = {0};
    assert_true(acl_store_dir(f->alice, f->ns, "C", &dir, &err));
    buf_append_char(&dir, '\0');
    assert_true(acl_store_update(dir.data, add_bob, NULL, &err));
    buf_free(&dir);
    char *text = read_acl(f, "C");
    assert_string_equal(text, "owner lr\nuser=bob l\n");
    free(text);
    mailbox_close(box);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_each_hook_asks_its_right, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_lookup_is_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inheritance_at_creation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cached_rights_follow_the_file, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
