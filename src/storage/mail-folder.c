/* The storage API's calls on a user's folders that no storage module hooks
 * (listing, existence, usage) and the spool a save starts from: passed to
 * the driver. Create, delete and rename are hooked: mail-storage.c. */
#include "storage/mail-storage-private.h"

#include <stdlib.h>

bool mail_folder_list(struct mail_user *user, const struct namespace_config *ns, char ***names,
                      size_t *count, struct petrel_error *err)
{
    return user->storage->v->folder_list(user, ns, names, count, err);
}

void mail_folder_list_free(char **names, size_t count)
{
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

bool mail_folder_exists(struct mail_user *user, const struct namespace_config *ns, const char *name)
{
    return user->storage->v->folder_exists(user, ns, name);
}

bool mail_folder_usage(struct mail_user *user, const struct namespace_config *ns, const char *name,
                       struct fileindex_usage_cache *cache, struct mail_folder_usage *out,
                       struct petrel_error *err)
{
    return user->storage->v->folder_usage(user, ns, name, cache, out, err);
}

int mail_user_spool_open(struct mail_user *user, struct petrel_error *err)
{
    return user->storage->v->spool_open(user, err);
}
