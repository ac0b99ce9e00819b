/* The index side of LIST in a shared namespace (issue 23's case): `owners`
 * owners (default 1,000), each sharing `folders` folders (default 20) with a
 * group through their ACL list index; `visible` of the owners (default 10)
 * also share all their folders with the reader, who may so see 200. The
 * indexes are written through acl_list_index_write_folder() (lock,
 * temp+rename, one write per folder); then acl_list_index_visible() runs
 * over every owner, as LIST would for the owners the registry named.
 * Prints the write rate and the best of five visibility passes.
 *
 * usage: acl-index-bench [owners] [folders] [visible] [dir]
 * (a `dir` that holds the indexes of an earlier run is only read) */
#include "core/buf.h"
#include "core/xalloc.h"
#include "storage/acl/acl-list-index.h"
#include "storage/fileindex/fileindex.h"
#include "storage/mail-storage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void count(void *arg, const char *folder, uint32_t rights)
{
    (void)folder, (void)rights;
    (*(size_t *)arg)++;
}

int main(int argc, char **argv)
{
    int owners = argc > 1 ? atoi(argv[1]) : 1000;
    int folders = argc > 2 ? atoi(argv[2]) : 20;
    int visible_owners = argc > 3 ? atoi(argv[3]) : 10;
    char tmpl[] = "/tmp/petrel-aclidx-bench-XXXXXX";
    const char *dir = argc > 4 ? argv[4] : mkdtemp(tmpl);
    struct petrel_error err;
    struct mail_config cfg;
    if (!mail_config_read(NULL, NULL, &cfg, &err)) {
        fprintf(stderr, "config: %s\n", err.message);
        return 1;
    }
    free(cfg.home);
    cfg.home = xasprintf("%s/%%u", dir);
    cfg.fsync = FILEINDEX_FSYNC_NEVER;
    struct mail_storage *storage = mail_storage_new(&cfg, NULL);
    const struct namespace_config *ns = NULL;
    double t0 = now_ms();
    size_t writes = 0;
    /* A directory given that holds the indexes already: only read. */
    char probe[512];
    snprintf(probe, sizeof(probe), "%s/owner0000/Maildir/" ACL_LIST_INDEX_FILE, dir);
    bool reuse = argc > 4 && access(probe, F_OK) == 0;
    for (int o = 0; o < owners; o++) {
        char name[32];
        snprintf(name, sizeof(name), "owner%04d", o);
        struct mail_user *u = mail_user_get(storage, name, &err);
        ns = mail_user_namespace(u, "personal", &err);
        if (reuse)
            continue;
        struct mailbox *inbox = mailbox_open(u, ns, "INBOX", &err);
        if (inbox == NULL) {
            fprintf(stderr, "%s: %s\n", name, err.message);
            return 1;
        }
        mailbox_close(inbox);
        /* every owner shares with a team; every (owners/visible)-th also
         * with the reader, one folder in each of those owners' 20 */
        bool reader = visible_owners > 0 && o % (owners / visible_owners) == 0;
        for (int f = 0; f < folders; f++) {
            struct acl_list list = {0};
            struct acl_id id;
            const char *why;
            acl_id_parse("group=team", 10, &id, &why);
            acl_list_modify(&list, &id, ACL_LOOKUP | ACL_READ, ACL_MODIFY_REPLACE);
            if (reader) {
                acl_id_parse("user=reader", 11, &id, &why);
                acl_list_modify(&list, &id, ACL_LOOKUP | ACL_READ, ACL_MODIFY_REPLACE);
            }
            char folder[32];
            snprintf(folder, sizeof(folder), "Shared%02d", f);
            if (!acl_list_index_write_folder(u, ns, folder, &list, &err)) {
                fprintf(stderr, "write: %s\n", err.message);
                return 1;
            }
            acl_list_free(&list);
            writes++;
        }
    }
    double t1 = now_ms();
    struct acl_identity who = {.user = "reader"};
    size_t seen = 0;
    double best = 1e9;
    for (int round = 0; round < 5; round++) {
        seen = 0;
        double a = now_ms();
        for (int o = 0; o < owners; o++) {
            char name[32];
            snprintf(name, sizeof(name), "owner%04d", o);
            struct mail_user *u = mail_user_get(storage, name, &err);
            if (acl_list_index_visible(u, ns, &who, count, &seen, &err) < 0) {
                fprintf(stderr, "visible: %s\n", err.message);
                return 1;
            }
        }
        double b = now_ms() - a;
        if (b < best)
            best = b;
    }
    if (writes > 0)
        printf("index writes: %zu in %.0f ms (%.0f per second)\n", writes, t1 - t0,
               writes / ((t1 - t0) / 1e3));
    printf("visible over %d owners x %d folders: %zu folders seen, best of 5: %.2f ms\n", owners,
           folders, seen, best);
    /* The split: reading and parsing the files, then the rights alone. */
    struct acl_index *all = xcalloc((size_t)owners, sizeof(*all));
    double r0 = now_ms();
    for (int o = 0; o < owners; o++) {
        char name[32];
        snprintf(name, sizeof(name), "owner%04d", o);
        struct mail_user *u = mail_user_get(storage, name, &err);
        if (acl_list_index_read(u, ns, &all[o], &err) < 0)
            return 1;
    }
    double r1 = now_ms();
    size_t seen2 = 0;
    for (int o = 0; o < owners; o++)
        acl_list_index_visible_in(&all[o], &who, count, &seen2);
    double r2 = now_ms();
    printf("of which: reading and parsing %.2f ms, rights from the rows %.2f ms (%zu seen)\n",
           r1 - r0, r2 - r1, seen2);
    for (int o = 0; o < owners; o++)
        acl_list_index_free(&all[o]);
    free(all);
    /* Snapshots kept between LISTs: after the first, a stat per owner. */
    struct acl_index_snapshot *snaps = xcalloc((size_t)owners, sizeof(*snaps));
    double kept = 1e9;
    for (int round = 0; round < 6; round++) {
        size_t n = 0;
        double a = now_ms();
        for (int o = 0; o < owners; o++) {
            char name[32];
            snprintf(name, sizeof(name), "owner%04d", o);
            struct mail_user *u = mail_user_get(storage, name, &err);
            if (acl_list_index_refresh(u, ns, &snaps[o], &err) < 0)
                return 1;
            acl_list_index_visible_in(&snaps[o].idx, &who, count, &n);
        }
        double b = now_ms() - a;
        if (round > 0 && b < kept)
            kept = b; /* round 0 reads every file */
    }
    printf("with snapshots kept between passes (a stat per owner): best of 5: %.2f ms\n", kept);
    for (int o = 0; o < owners; o++)
        acl_list_index_snapshot_free(&snaps[o]);
    free(snaps);
    mail_storage_free(storage);
    mail_config_free(&cfg);
    if (argc <= 4) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            return 1;
    }
    return 0;
}
