#include "storage/special-use.h"

#include "core/buf.h"
#include "core/fs-util.h"
#include "core/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <unistd.h>

#define SPECIAL_USE_FILE "petrel-special-use"
#define SPECIAL_USE_MAX_BYTES (1024 * 1024)

static const char *const attrs[] = {"\\All",  "\\Archive", "\\Drafts", "\\Flagged", "\\Important",
                                    "\\Junk", "\\Sent",    "\\Trash",  NULL};

bool special_use_attr_valid(const char *attr)
{
    for (size_t i = 0; attrs[i] != NULL; i++) {
        if (strcmp(attrs[i], attr) == 0)
            return true;
    }
    return false;
}

const char *special_use_attr_canonical(const char *attr)
{
    for (size_t i = 0; attrs[i] != NULL; i++) {
        if (strcasecmp(attrs[i], attr) == 0)
            return attrs[i];
    }
    return NULL;
}

const char *special_use_source_name(enum special_use_source source)
{
    switch (source) {
    case SPECIAL_USE_OVERRIDE:
        return "override";
    case SPECIAL_USE_DEFAULT:
        return "default";
    case SPECIAL_USE_NONE:
        return "none";
    }
    return "none";
}

void special_use_list_free(struct special_use_list *list)
{
    for (size_t i = 0; i < list->count; i++) {
        free(list->entries[i].folder);
        free(list->entries[i].attr);
    }
    free(list->entries);
    memset(list, 0, sizeof(*list));
}

static const struct namespace_config *personal(struct mail_user *user, struct petrel_error *err)
{
    return mail_user_namespace(user, "personal", err);
}

static bool file_path(struct mail_user *user, struct buf *out, struct petrel_error *err)
{
    const struct namespace_config *ns = personal(user, err);
    if (ns == NULL)
        return false;
    if (!mail_user_namespace_root(user, ns, out, err))
        return false;
    buf_append_str(out, "/" SPECIAL_USE_FILE);
    return true;
}

static void list_put(struct special_use_list *list, const char *folder, const char *attr)
{
    for (size_t i = 0; i < list->count; i++) {
        if (strcmp(list->entries[i].folder, folder) == 0) {
            free(list->entries[i].attr);
            list->entries[i].attr = xstrdup(attr);
            return;
        }
    }
    list->entries = xgrow(list->entries, &list->cap, list->count + 1, sizeof(*list->entries));
    list->entries[list->count].folder = xstrdup(folder);
    list->entries[list->count].attr = xstrdup(attr);
    list->count++;
}

static bool parse(const char *text, struct special_use_list *out)
{
    const char *p = text;
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        const char *tab = memchr(p, '\t', len);
        if (tab != NULL && tab > p) {
            char *folder = xstrndup(p, (size_t)(tab - p));
            char *attr = xstrndup(tab + 1, len - (size_t)(tab - p) - 1);
            if (attr[0] == '\0' || special_use_attr_valid(attr))
                list_put(out, folder, attr);
            free(folder);
            free(attr);
        }
        p += len;
        if (*p == '\n')
            p++;
    }
    return true;
}

bool special_use_read(struct mail_user *user, struct special_use_list *out,
                      struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    struct buf path = {0};
    if (!file_path(user, &path, err)) {
        buf_free(&path);
        return false;
    }
    char *text = NULL;
    size_t len = 0;
    struct petrel_error rerr;
    bool ok = true;
    if (fs_read_file(path.data, SPECIAL_USE_MAX_BYTES, &text, &len, &rerr)) {
        parse(text, out);
        free(text);
    } else if (rerr.code != PETREL_ERR_NOT_FOUND) {
        ok = petrel_error_set(err, rerr.code, "%s", rerr.message);
    }
    buf_free(&path);
    return ok;
}

const char *special_use_in_force(struct mail_user *user, const struct special_use_list *overrides,
                                 const char *folder, enum special_use_source *source)
{
    enum special_use_source ignored;
    if (source == NULL)
        source = &ignored;
    for (size_t i = 0; i < overrides->count; i++) {
        if (strcmp(overrides->entries[i].folder, folder) == 0) {
            *source =
                overrides->entries[i].attr[0] != '\0' ? SPECIAL_USE_OVERRIDE : SPECIAL_USE_NONE;
            return overrides->entries[i].attr;
        }
    }
    const struct mail_config *cfg = mail_storage_config(mail_user_storage(user));
    for (size_t i = 0; i < cfg->special_use_count; i++) {
        if (strcmp(cfg->special_use[i].folder, folder) == 0) {
            *source = SPECIAL_USE_DEFAULT;
            return cfg->special_use[i].attr;
        }
    }
    *source = SPECIAL_USE_NONE;
    return "";
}

bool special_use_get(struct mail_user *user, const char *folder, const char **attr,
                     enum special_use_source *source, struct special_use_list *scratch,
                     struct petrel_error *err)
{
    if (!special_use_read(user, scratch, err))
        return false;
    *attr = special_use_in_force(user, scratch, folder, source);
    return true;
}

/* Locked read-modify-write of the overrides file. */
static bool modify(struct mail_user *user, bool (*change)(struct special_use_list *list, void *ctx),
                   void *ctx, struct petrel_error *err)
{
    struct buf path = {0};
    if (!file_path(user, &path, err)) {
        buf_free(&path);
        return false;
    }
    char *dir = fs_dirname(path.data);
    bool ok = fs_mkdir_p(dir, 0700, err);
    free(dir);
    char *lock_path = xasprintf("%s.lock", path.data);
    int lock = ok ? open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
    if (ok && lock < 0)
        ok = petrel_error_set_errno(err, errno, "cannot open %s: %s", lock_path, strerror(errno));
    if (ok && flock(lock, LOCK_EX) != 0)
        ok = petrel_error_set_errno(err, errno, "cannot lock %s: %s", lock_path, strerror(errno));
    struct special_use_list list;
    memset(&list, 0, sizeof(list));
    if (ok)
        ok = special_use_read(user, &list, err);
    if (ok && change(&list, ctx)) {
        struct buf text = {0};
        for (size_t i = 0; i < list.count; i++)
            buf_printf(&text, "%s\t%s\n", list.entries[i].folder, list.entries[i].attr);
        ok = fs_write_atomic(path.data, buf_cstr(&text), text.len, true, err);
        buf_free(&text);
    }
    special_use_list_free(&list);
    if (lock >= 0)
        close(lock);
    free(lock_path);
    buf_free(&path);
    return ok;
}

struct set_args {
    const char *folder;
    const char *attr;
};

static bool change_set(struct special_use_list *list, void *ctx)
{
    struct set_args *a = ctx;
    if (a->attr != NULL) {
        list_put(list, a->folder, a->attr);
        return true;
    }
    for (size_t i = 0; i < list->count; i++) {
        if (strcmp(list->entries[i].folder, a->folder) == 0) {
            free(list->entries[i].folder);
            free(list->entries[i].attr);
            list->entries[i] = list->entries[--list->count];
            return true;
        }
    }
    return false;
}

bool special_use_set(struct mail_user *user, const char *folder, const char *attr,
                     struct petrel_error *err)
{
    if (attr != NULL && attr[0] != '\0' && !special_use_attr_valid(attr))
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "unknown special-use attribute '%s' (RFC 6154: \\All \\Archive "
                                "\\Drafts \\Flagged \\Important \\Junk \\Sent \\Trash)",
                                attr);
    if (strchr(folder, '\t') != NULL || strchr(folder, '\n') != NULL)
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid folder name");
    struct set_args a = {folder, attr};
    return modify(user, change_set, &a, err);
}

struct rename_args {
    const char *old_name;
    const char *new_name;
    char separator;
    bool delete_only;
};

static bool change_rename(struct special_use_list *list, void *ctx)
{
    struct rename_args *a = ctx;
    size_t old_len = strlen(a->old_name);
    bool changed = false;
    for (size_t i = 0; i < list->count;) {
        char *f = list->entries[i].folder;
        bool match = strcmp(f, a->old_name) == 0 ||
                     (strncmp(f, a->old_name, old_len) == 0 && f[old_len] == a->separator);
        if (!match) {
            i++;
            continue;
        }
        changed = true;
        if (a->delete_only) {
            /* Children keep their attributes when only the parent goes. */
            if (strcmp(f, a->old_name) != 0) {
                i++;
                continue;
            }
            free(list->entries[i].folder);
            free(list->entries[i].attr);
            list->entries[i] = list->entries[--list->count];
            continue;
        }
        char *renamed = xasprintf("%s%s", a->new_name, f + old_len);
        free(f);
        list->entries[i].folder = renamed;
        i++;
    }
    return changed;
}

bool special_use_folder_renamed(struct mail_user *user, const char *old_name, const char *new_name,
                                char separator, struct petrel_error *err)
{
    struct rename_args a = {old_name, new_name, separator, false};
    return modify(user, change_rename, &a, err);
}

bool special_use_folder_deleted(struct mail_user *user, const char *name, struct petrel_error *err)
{
    struct rename_args a = {name, NULL, '/', true};
    return modify(user, change_rename, &a, err);
}
