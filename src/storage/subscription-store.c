#include "storage/subscription-store.h"

#include "core/xalloc.h"
#include "storage/mailbox-name.h"
#include "storage/subscriptions.h"

#include <stdlib.h>
#include <string.h>

bool mail_subscriptions_file(struct mail_user *user, const struct namespace_config *ns,
                             struct buf *path, const char **prefix, struct petrel_error *err)
{
    const struct namespace_config *owner = ns;
    *prefix = "";
    if (!ns->subscriptions) {
        owner = mail_user_namespace(user, "personal", err);
        if (owner == NULL)
            return false;
        *prefix = ns->prefix;
    }
    if (!mail_user_namespace_root(user, owner, path, err))
        return false;
    buf_append_str(path, "/subscriptions");
    return true;
}

char *mail_subscriptions_row(const char *prefix, const char *name, char separator)
{
    char *s = xasprintf("%s%s", prefix, name);
    if (separator != '/') {
        for (char *p = s; *p != '\0'; p++) {
            if (*p == separator)
                *p = '/';
        }
    }
    return s;
}

/* A row of the personal file that belongs to another namespace kept there. */
static bool foreign_row(struct mail_user *user, const struct namespace_config *ns, const char *row)
{
    if (ns->type != NAMESPACE_PERSONAL)
        return false;
    const struct mail_config *cfg = mail_storage_config(mail_user_storage(user));
    bool foreign = false;
    for (size_t n = 0; n < cfg->namespace_count && !foreign; n++) {
        const struct namespace_config *o = &cfg->namespaces[n];
        char *head = xstrndup(o->prefix, namespace_prefix_head(o)); /* "shared/" of "shared/%u/" */
        char *op = mail_subscriptions_row(head, "", o->separator);
        free(head);
        foreign =
            o != ns && !o->subscriptions && op[0] != '\0' && strncmp(row, op, strlen(op)) == 0;
        free(op);
    }
    return foreign;
}

bool mail_subscriptions_list(struct mail_user *user, const struct namespace_config *ns,
                             char ***names, size_t *count, struct petrel_error *err)
{
    struct buf path = {0};
    const char *prefix = "";
    struct subscriptions subs;
    memset(&subs, 0, sizeof(subs));
    *names = NULL;
    *count = 0;
    if (!mail_subscriptions_file(user, ns, &path, &prefix, err) ||
        !subscriptions_read(path.data, &subs, err)) {
        buf_free(&path);
        return false;
    }
    char *file_prefix = mail_subscriptions_row(prefix, "", ns->separator);
    size_t plen = strlen(file_prefix);
    char **out = xcalloc(subs.count + 1, sizeof(char *));
    size_t n = 0;
    for (size_t i = 0; i < subs.count; i++) {
        const char *row = subs.names[i];
        if (strncmp(row, file_prefix, plen) != 0 || (!ns->subscriptions && plen == 0) ||
            foreign_row(user, ns, row))
            continue;
        char *name = xstrdup(row + plen);
        if (ns->separator != '/') {
            for (char *p = name; *p != '\0'; p++) {
                if (*p == '/')
                    *p = ns->separator;
            }
        }
        out[n++] = name;
    }
    free(file_prefix);
    subscriptions_free(&subs);
    buf_free(&path);
    *names = out;
    *count = n;
    return true;
}

bool mail_subscriptions_set(struct mail_user *user, const struct namespace_config *ns,
                            const char *name, bool subscribed, bool *changed,
                            struct petrel_error *err)
{
    *changed = false;
    if (!mailbox_name_is_inbox(name) && !mailbox_name_validate(name, ns->separator, err))
        return false;
    struct buf path = {0};
    const char *prefix = "";
    if (!mail_subscriptions_file(user, ns, &path, &prefix, err)) {
        buf_free(&path);
        return false;
    }
    char *row = mail_subscriptions_row(prefix, name, ns->separator);
    bool ok = subscribed ? subscriptions_add(path.data, row, changed, err)
                         : subscriptions_remove(path.data, row, changed, err);
    free(row);
    buf_free(&path);
    return ok;
}
