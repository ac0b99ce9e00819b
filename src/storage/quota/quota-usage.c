/* A user's quota usage summed over folders (quota-usage.h). */
#include "storage/quota/quota-usage.h"

#include "storage/fileindex/fileindex.h"

#include <string.h>

static bool sum(struct mail_user *user, const struct quota_rules *rules, bool recalc,
                struct fileindex_usage_cache *cache, struct quota_usage *out,
                struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    const struct namespace_config *ns = mail_user_namespace(user, "personal", err);
    if (ns == NULL)
        return false;
    char **names = NULL;
    size_t count = 0;
    if (!mail_folder_list(user, ns, &names, &count, err))
        return false;
    bool ok = true;
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
    mail_folder_list_free(names, count);
    return ok;
}

bool quota_usage_get(struct mail_user *user, const struct quota_rules *rules,
                     struct fileindex_usage_cache *cache, struct quota_usage *out,
                     struct petrel_error *err)
{
    return sum(user, rules, false, cache, out, err);
}

bool quota_usage_recalc(struct mail_user *user, const struct quota_rules *rules,
                        struct quota_usage *out, struct petrel_error *err)
{
    return sum(user, rules, true, NULL, out, err);
}

struct fileindex_usage_cache *quota_usage_cache_new(size_t folders)
{
    return fileindex_usage_cache_new(folders);
}

void quota_usage_cache_free(struct fileindex_usage_cache *cache)
{
    fileindex_usage_cache_free(cache);
}
