/* Unit tests for protocols/lmtp/lmtp-folder-cache.h over real Maildir++
 * folders: a kept handle comes back, and what is kept is bounded by count,
 * by bytes (mailbox_memory_bytes) and by idle time, with the descriptors of
 * every closed folder released. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/xalloc.h"
#include "protocols/lmtp/lmtp-folder-cache.h"
#include "storage/fileindex/fileindex.h"
#include "storage/mail-storage.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct fixture {
    char dir[64];
    struct mail_config cfg;
    struct mail_storage *storage;
    struct mail_user *user;
    const struct namespace_config *ns;
};

static const char *const folders[] = {"A", "B", "C", "D"};

static size_t open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    size_t n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static int setup(void **state)
{
    struct fixture *f = xcalloc(1, sizeof(*f));
    strcpy(f->dir, "/tmp/petrel-lmtpcache-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    struct petrel_error err;
    assert_true(mail_config_read(NULL, NULL, &f->cfg, &err));
    free(f->cfg.home);
    f->cfg.home = xasprintf("%s/%%u", f->dir);
    f->cfg.fsync = FILEINDEX_FSYNC_NEVER;
    f->storage = mail_storage_new(&f->cfg, NULL);
    f->user = mail_user_get(f->storage, "alice", &err);
    assert_non_null(f->user);
    f->ns = mail_user_namespace(f->user, "personal", &err);
    assert_non_null(f->ns);
    for (size_t i = 0; i < 4; i++) {
        assert_true(mail_folder_create(f->user, f->ns, folders[i], &err));
        /* Same size in every folder: 40 messages. */
        struct mailbox *box = mailbox_open(f->user, f->ns, folders[i], &err);
        assert_non_null(box);
        for (int m = 0; m < 40; m++) {
            char msg[128];
            int len =
                snprintf(msg, sizeof(msg), "From: a@example.org\r\nSubject: %d\r\n\r\nx\r\n", m);
            uint32_t uid;
            assert_true(mailbox_append(box, msg, (size_t)len, 0, NULL, 0, &uid, &err));
        }
        mailbox_close(box);
    }
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

static struct mailbox *get(struct fixture *f, struct lmtp_folder_cache *c, const char *name)
{
    struct petrel_error err;
    struct mailbox *box = lmtp_folder_cache_get(c, f->user, f->ns, name, &err);
    if (box == NULL)
        fail_msg("get %s: %s", name, err.message);
    return box;
}

/* One delivery's use: get, append, put back. */
static size_t use(struct fixture *f, struct lmtp_folder_cache *c, const char *name)
{
    struct mailbox *box = get(f, c, name);
    struct petrel_error err;
    uint32_t uid;
    assert_true(mailbox_append(box, "Subject: x\r\n\r\ny\r\n", 17, 0, NULL, 0, &uid, &err));
    size_t bytes = mailbox_memory_bytes(box);
    lmtp_folder_cache_put(c, box, true);
    return bytes;
}

static void test_kept_handle_comes_back(void **state)
{
    struct fixture *f = *state;
    struct lmtp_folder_cache *c = lmtp_folder_cache_new(16, 64 << 20);
    struct mailbox *box = get(f, c, "A");
    lmtp_folder_cache_put(c, box, true);
    assert_int_equal(lmtp_folder_cache_count(c), 1);
    assert_true(lmtp_folder_cache_bytes(c) > 0);
    assert_ptr_equal(get(f, c, "A"), box);
    assert_int_equal(lmtp_folder_cache_count(c), 0); /* out while in use */
    assert_int_equal(lmtp_folder_cache_bytes(c), 0);
    /* An unhealthy handle is closed, not kept. */
    size_t fds = open_fds();
    lmtp_folder_cache_put(c, box, false);
    assert_int_equal(lmtp_folder_cache_count(c), 0);
    assert_true(open_fds() < fds);
    lmtp_folder_cache_free(c);
}

static void test_count_bound_closes_least_recent(void **state)
{
    struct fixture *f = *state;
    size_t fds0 = open_fds();
    struct lmtp_folder_cache *c = lmtp_folder_cache_new(2, 64 << 20);
    use(f, c, "A");
    use(f, c, "B");
    size_t fds2 = open_fds();
    use(f, c, "C"); /* A goes */
    assert_int_equal(lmtp_folder_cache_count(c), 2);
    /* No more descriptors than with two folders kept (at most: the
     * storage may hold a short-lived one of its own while a folder is in
     * use, so a count taken then can be one higher under load). */
    assert_true(open_fds() <= fds2);
    struct mailbox *b = get(f, c, "B"); /* still kept: not re-opened */
    assert_int_equal(lmtp_folder_cache_count(c), 1);
    lmtp_folder_cache_put(c, b, true);
    lmtp_folder_cache_free(c);
    assert_int_equal(open_fds(), fds0);
}

static void test_byte_bound(void **state)
{
    struct fixture *f = *state;
    size_t fds0 = open_fds();
    /* Measure one folder, then allow two and a half. */
    struct lmtp_folder_cache *probe = lmtp_folder_cache_new(16, 64 << 20);
    size_t one = use(f, probe, "D");
    lmtp_folder_cache_free(probe);
    assert_true(one > 1000);
    size_t budget = one * 5 / 2;
    struct lmtp_folder_cache *c = lmtp_folder_cache_new(16, budget);
    for (size_t i = 0; i < 4; i++) {
        use(f, c, folders[i]);
        assert_true(lmtp_folder_cache_bytes(c) <= budget);
    }
    assert_int_equal(lmtp_folder_cache_count(c), 2);
    lmtp_folder_cache_free(c);
    assert_int_equal(open_fds(), fds0);

    /* A folder larger than the whole budget is not kept at all. */
    c = lmtp_folder_cache_new(16, one / 2);
    use(f, c, "A");
    assert_int_equal(lmtp_folder_cache_count(c), 0);
    assert_int_equal(lmtp_folder_cache_bytes(c), 0);
    assert_int_equal(open_fds(), fds0);
    lmtp_folder_cache_free(c);

    /* No budget: nothing kept, whatever the count. */
    c = lmtp_folder_cache_new(16, 0);
    use(f, c, "A");
    assert_int_equal(lmtp_folder_cache_count(c), 0);
    lmtp_folder_cache_free(c);
}

static void test_idle_folders_expire(void **state)
{
    struct fixture *f = *state;
    size_t fds0 = open_fds();
    struct lmtp_folder_cache *c = lmtp_folder_cache_new(16, 64 << 20);
    use(f, c, "A");
    use(f, c, "B");
    assert_int_equal(lmtp_folder_cache_expire(c, 60000), 0);
    assert_int_equal(lmtp_folder_cache_count(c), 2);
    /* Time passing is what is tested: A and B become 150 ms old, C is fresh. */
    struct timespec ts = {0, 150 * 1000 * 1000};
    nanosleep(&ts, NULL);
    use(f, c, "C");
    assert_int_equal(lmtp_folder_cache_expire(c, 100), 2);
    assert_int_equal(lmtp_folder_cache_count(c), 1);
    assert_true(lmtp_folder_cache_bytes(c) > 0);
    assert_int_equal(lmtp_folder_cache_expire(c, 0), 1); /* 0: everything */
    assert_int_equal(lmtp_folder_cache_count(c), 0);
    assert_int_equal(lmtp_folder_cache_bytes(c), 0);
    assert_int_equal(open_fds(), fds0);
    lmtp_folder_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kept_handle_comes_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_count_bound_closes_least_recent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_byte_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_folders_expire, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
