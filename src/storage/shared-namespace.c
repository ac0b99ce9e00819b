/* Shared namespaces per owner (see shared-namespace.h). */
#include "storage/shared-namespace.h"

#include "core/user-name.h"
#include "core/xalloc.h"
#include "storage/mail-storage-private.h"

#include <stdlib.h>
#include <string.h>

static struct namespace_config *instance_new(const struct namespace_config *tmpl, const char *owner)
{
    struct namespace_config *ns = xcalloc(1, sizeof(*ns));
    ns->name = xstrdup(tmpl->name);
    ns->type = NAMESPACE_SHARED;
    ns->prefix = xasprintf("%.*s%s%c", (int)tmpl->owner_at, tmpl->prefix, owner, tmpl->separator);
    ns->separator = tmpl->separator;
    ns->location = xstrdup(tmpl->location);
    ns->subscriptions = false; /* the reader's personal file, with the prefix */
    ns->slug = xstrdup(tmpl->slug);
    ns->owner = xstrdup(owner);
    ns->tmpl = tmpl;
    ns->private_index = tmpl->private_index != NULL ? xstrdup(tmpl->private_index) : NULL;
    return ns;
}

const struct namespace_config *mail_shared_namespace(struct mail_user *user,
                                                     const struct namespace_config *tmpl,
                                                     const char *owner, struct petrel_error *err)
{
    struct mail_storage *st = user->storage;
    struct petrel_error ignored;
    if (!tmpl->per_owner || !user_name_valid(owner, USER_NAME_MAX, &ignored) ||
        strcmp(owner, user->name) == 0)
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "folder not found"), NULL;
    for (size_t i = 0; i < st->shared_ns_count; i++) {
        struct namespace_config *ns = st->shared_ns[i];
        if (ns->tmpl == tmpl && strcmp(ns->owner, owner) == 0)
            return ns;
    }
    if (st->shared_ns_count >= SHARED_NAMESPACE_MAX)
        return petrel_error_set(err, PETREL_ERR_LIMIT, "too many owners in shared namespaces"),
               NULL;
    st->shared_ns =
        xgrow(st->shared_ns, &st->shared_ns_cap, st->shared_ns_count + 1, sizeof(*st->shared_ns));
    struct namespace_config *ns = instance_new(tmpl, owner);
    st->shared_ns[st->shared_ns_count++] = ns;
    return ns;
}

const struct namespace_config *mail_namespace_resolve(struct mail_user *user, const char *full_name,
                                                      const char **rest, struct petrel_error *err)
{
    const char *after = NULL;
    const struct namespace_config *ns =
        namespace_by_prefix(mail_storage_config(user->storage), full_name, &after);
    if (ns == NULL)
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "no namespace holds this name"), NULL;
    if (!ns->per_owner) {
        *rest = after;
        return ns;
    }
    const char *sep = strchr(after, ns->separator);
    if (sep == NULL || sep == after)
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "folder not found"), NULL;
    char *owner = xstrndup(after, (size_t)(sep - after));
    const struct namespace_config *inst = mail_shared_namespace(user, ns, owner, err);
    free(owner);
    if (inst != NULL)
        *rest = sep + 1;
    return inst;
}

bool mail_shared_namespace_root(const struct mail_storage *storage,
                                const struct namespace_config *ns, struct buf *out,
                                struct petrel_error *err)
{
    struct buf home = {0};
    const char *colon = strchr(ns->location, ':');
    const char *template = colon != NULL ? colon + 1 : ns->location;
    bool ok = mail_template_expand(storage->cfg.home, ns->owner, NULL, &home, err);
    if (ok) {
        buf_append_char(&home, '\0');
        ok = mail_template_expand(template, ns->owner, home.data, out, err);
    }
    buf_free(&home);
    return ok;
}

void mail_namespace_acl_holder(struct mail_user *user, const struct namespace_config *ns,
                               struct mail_user **holder, const struct namespace_config **holder_ns)
{
    *holder = user;
    *holder_ns = ns;
    if (ns->owner == NULL)
        return;
    const struct namespace_config *personal =
        namespace_by_slug(mail_storage_config(user->storage), "personal");
    struct petrel_error err;
    struct mail_user *owner = mail_user_get(user->storage, ns->owner, &err);
    if (personal != NULL && owner != NULL && strcmp(personal->location, ns->location) == 0) {
        *holder = owner;
        *holder_ns = personal;
    }
}

void mail_shared_namespaces_free(struct mail_storage *storage)
{
    for (size_t i = 0; i < storage->shared_ns_count; i++) {
        struct namespace_config *ns = storage->shared_ns[i];
        free(ns->name);
        free(ns->prefix);
        free(ns->location);
        free(ns->slug);
        free(ns->owner);
        free(ns->private_index);
        free(ns);
    }
    free(storage->shared_ns);
    storage->shared_ns = NULL;
    storage->shared_ns_count = 0;
}
