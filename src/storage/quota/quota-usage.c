/* A user's quota usage summed over folders (quota-usage.h). */
#include "storage/quota/quota-usage.h"

#include "core/buf.h"
#include "core/xalloc.h"
#include "storage/fileindex/fileindex.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct quota_folder_list {
    char *root_path; /* the namespace root, fixed for the user's life */
    char **names;
    size_t count;
    bool kept; /* names may be reused while the root is `root` */
    struct stat root;
    uint64_t listings;
};

struct quota_folder_list *quota_folder_list_new(void)
{
    return xcalloc(1, sizeof(struct quota_folder_list));
}

void quota_folder_list_free(struct quota_folder_list *list)
{
    if (list == NULL)
        return;
    mail_folder_list_free(list->names, list->count);
    free(list->root_path);
    free(list);
}

uint64_t quota_folder_list_listings(const struct quota_folder_list *list)
{
    return list->listings;
}

static bool same_dir(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* The folder names into `l`: kept ones while the root is unchanged, else
 * a new listing (the root stat'ed before it is read, so a change during
 * the listing shows at the next call). */
static bool list_folders(struct mail_user *user, const struct namespace_config *ns,
                         struct quota_folder_list *l, struct petrel_error *err)
{
    if (l->root_path == NULL) {
        struct buf root = {0};
        if (mail_user_namespace_root(user, ns, &root, NULL))
            l->root_path = buf_steal(&root);
        buf_free(&root);
    }
    struct stat st;
    bool stated = l->root_path != NULL && stat(l->root_path, &st) == 0;
    if (stated && l->kept && same_dir(&st, &l->root))
        return true;
    mail_folder_list_free(l->names, l->count);
    l->names = NULL;
    l->count = 0;
    l->kept = false;
    if (!mail_folder_list(user, ns, &l->names, &l->count, err))
        return false;
    l->listings++;
    if (stated) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        /* An entry change sets the modification time to the present: one
         * after the listing cannot then leave it as it was. */
        l->kept = now.tv_sec - st.st_mtim.tv_sec >= QUOTA_FOLDER_LIST_SETTLE;
        l->root = st;
    }
    return true;
}

static bool sum(struct mail_user *user, const struct quota_rules *rules, bool recalc,
                struct quota_folder_list *list, struct fileindex_usage_cache *cache,
                struct quota_usage *out, struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    const struct namespace_config *ns = mail_user_namespace(user, "personal", err);
    if (ns == NULL)
        return false;
    struct quota_folder_list once = {0};
    struct quota_folder_list *l = list != NULL ? list : &once;
    if (!list_folders(user, ns, l, err)) {
        mail_folder_list_free(once.names, once.count);
        return false;
    }
    char **names = l->names;
    size_t count = l->count;
    bool ok = true;
    bool gone = false;
    for (size_t i = 0; i < count && ok; i++) {
        if (quota_rules_mailbox_ignored(rules, names[i]))
            continue;
        struct mail_folder_usage u = {0, 0};
        struct petrel_error ferr;
        petrel_error_clear(&ferr);
        if (recalc) {
            struct mailbox *box = mailbox_open(user, ns, names[i], &ferr);
            ok = box != NULL && mailbox_usage_recalc(box, &u, &ferr);
            if (box != NULL)
                mailbox_close(box);
        } else {
            ok = mail_folder_usage(user, ns, names[i], cache, &u, &ferr);
        }
        if (!ok && ferr.code == PETREL_ERR_NOT_FOUND) {
            ok = true; /* deleted while we counted */
            gone = true;
            continue;
        }
        if (!ok) {
            if (err != NULL)
                *err = ferr;
            petrel_error_prefix(err, "folder %s", names[i]);
            break;
        }
        out->messages += u.messages;
        out->storage += u.bytes;
    }
    if (gone || !ok)
        l->kept = false; /* listed again next time */
    mail_folder_list_free(once.names, once.count);
    free(once.root_path);
    return ok;
}

bool quota_usage_get(struct mail_user *user, const struct quota_rules *rules,
                     struct fileindex_usage_cache *cache, struct quota_usage *out,
                     struct petrel_error *err)
{
    return sum(user, rules, false, NULL, cache, out, err);
}

bool quota_usage_get_listed(struct mail_user *user, const struct quota_rules *rules,
                            struct quota_folder_list *list, struct fileindex_usage_cache *cache,
                            struct quota_usage *out, struct petrel_error *err)
{
    return sum(user, rules, false, list, cache, out, err);
}

bool quota_usage_recalc(struct mail_user *user, const struct quota_rules *rules,
                        struct quota_usage *out, struct petrel_error *err)
{
    return sum(user, rules, true, NULL, NULL, out, err);
}

struct fileindex_usage_cache *quota_usage_cache_new(size_t folders)
{
    return fileindex_usage_cache_new(folders);
}

void quota_usage_cache_free(struct fileindex_usage_cache *cache)
{
    fileindex_usage_cache_free(cache);
}
