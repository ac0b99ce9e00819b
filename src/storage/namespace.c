#include "storage/namespace.h"

#include "core/cfg-read.h"
#include "core/xalloc.h"
#include "storage/fileindex/fileindex.h"
#include "storage/mail-storage-private.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAMESPACES 32
#define MAX_SPECIAL_USE 32

static const char *const rfc6154_attrs[] = {"\\All",     "\\Archive",   "\\Drafts",
                                            "\\Flagged", "\\Important", "\\Junk",
                                            "\\Sent",    "\\Trash",     NULL};

/* The `type:` names, indexed by enum namespace_type: read and printed. */
static const char *const type_names[] = {"personal", "shared", "public", NULL};

const char *namespace_type_name(enum namespace_type type)
{
    return (unsigned)type <= NAMESPACE_PUBLIC ? type_names[type] : type_names[0];
}

size_t namespace_prefix_head(const struct namespace_config *ns)
{
    return ns->per_owner ? ns->owner_at : strlen(ns->prefix);
}

bool namespace_has_inbox(const struct namespace_config *ns)
{
    return ns->type == NAMESPACE_PERSONAL || ns->owner != NULL;
}

void namespace_slug(const char *prefix, struct buf *out)
{
    size_t start = out->len;
    for (const unsigned char *p = (const unsigned char *)prefix; *p != '\0'; p++) {
        if (isalnum(*p))
            buf_append_char(out, (char)tolower(*p));
        else if ((*p == '-' || *p == '_') && out->len > start)
            buf_append_char(out, (char)*p);
    }
    if (out->len == start)
        buf_append_str(out, "personal");
}

void mail_config_free(struct mail_config *cfg)
{
    free(cfg->home);
    for (size_t i = 0; i < cfg->namespace_count; i++) {
        free(cfg->namespaces[i].name);
        free(cfg->namespaces[i].prefix);
        free(cfg->namespaces[i].location);
        free(cfg->namespaces[i].slug);
        free(cfg->namespaces[i].private_index);
    }
    free(cfg->namespaces);
    for (size_t i = 0; i < cfg->special_use_count; i++) {
        free(cfg->special_use[i].folder);
        free(cfg->special_use[i].attr);
    }
    free(cfg->special_use);
    free(cfg->attribute_dict);
    free(cfg->metadata_server_admin);
    free(cfg->acl.sharing_map);
    memset(cfg, 0, sizeof(*cfg));
}

static bool valid_attr(const char *attr)
{
    for (size_t i = 0; rfc6154_attrs[i] != NULL; i++) {
        if (strcmp(rfc6154_attrs[i], attr) == 0)
            return true;
    }
    return false;
}

static void add_special_use(struct mail_config *cfg, const char *folder, const char *attr)
{
    size_t cap = cfg->special_use_count;
    cfg->special_use =
        xgrow(cfg->special_use, &cap, cfg->special_use_count + 1, sizeof(*cfg->special_use));
    cfg->special_use[cfg->special_use_count].folder = xstrdup(folder);
    cfg->special_use[cfg->special_use_count].attr = xstrdup(attr);
    cfg->special_use_count++;
}

/* "shared/%u/": a shared namespace per owner. The variable is the last
 * level and appears once; other variables are not taken in a prefix. */
static bool read_owner_template(const struct cfg_ctx *ctx, const struct ynode *node,
                                struct namespace_config *ns)
{
    const char *pct = strchr(ns->prefix, '%');
    if (pct == NULL)
        return true;
    const struct ynode *at = ynode_get(node, "prefix");
    size_t len = strlen(ns->prefix);
    size_t off = (size_t)(pct - ns->prefix);
    if (ns->type != NAMESPACE_SHARED || pct[1] != 'u' || off + 3 != len || off == 0 ||
        ns->prefix[off - 1] != ns->separator)
        return cfg_fail(ctx, at, "mail.namespaces.prefix",
                        "a variable in a prefix is the owner level of a shared namespace, "
                        "'<path>%cu%c' ('shared/%%u/')",
                        '%', ns->separator);
    if (ynode_get(node, "subscriptions") != NULL && ns->subscriptions)
        return cfg_fail(ctx, ynode_get(node, "subscriptions"), "mail.namespaces.subscriptions",
                        "a per-owner shared namespace keeps its subscriptions in the reader's "
                        "personal file (subscriptions: false)");
    ns->subscriptions = false;
    ns->per_owner = true;
    ns->owner_at = off;
    return true;
}

/* index_private: a template of the reader's directory, shared and public
 * namespaces only; tried on a sample user so a bad variable is a
 * configuration error, not a failing SELECT. */
static bool read_private_index(const struct cfg_ctx *ctx, const struct ynode *node,
                               struct namespace_config *ns)
{
    const struct ynode *at = ynode_get(node, "index_private");
    if (ns->private_index[0] == '\0') {
        free(ns->private_index);
        ns->private_index = NULL;
        return true;
    }
    if (ns->type == NAMESPACE_PERSONAL)
        return cfg_fail(ctx, at, "mail.namespaces.index_private",
                        "private indexes are for shared and public namespaces");
    struct buf out = {0};
    struct petrel_error e;
    bool ok = mail_template_expand(ns->private_index, "user@example.org", "/home", &out, &e);
    buf_free(&out);
    return ok || cfg_fail(ctx, at, "mail.namespaces.index_private", "%s", e.message);
}

static bool read_namespace(const struct cfg_ctx *ctx, const struct ynode *node,
                           struct namespace_config *ns)
{
    static const char *const keys[] = {"name",     "type",          "prefix",        "separator",
                                       "location", "subscriptions", "index_private", NULL};
    const char *path = "mail.namespaces";
    if (node->type != YNODE_MAP)
        return cfg_fail(ctx, node, path, "each namespace is a mapping");
    if (!cfg_check_keys(ctx, node, path, keys))
        return false;
    int type = NAMESPACE_PERSONAL;
    char *sep = NULL;
    ns->subscriptions = true;
    bool ok = cfg_string(ctx, node, path, "name", &ns->name) &&
              cfg_choice(ctx, node, path, "type", type_names, &type) &&
              cfg_string(ctx, node, path, "prefix", &ns->prefix) &&
              cfg_string(ctx, node, path, "separator", &sep) &&
              cfg_string(ctx, node, path, "location", &ns->location) &&
              cfg_bool(ctx, node, path, "subscriptions", &ns->subscriptions) &&
              cfg_string(ctx, node, path, "index_private", &ns->private_index);
    ns->type = (enum namespace_type)type;
    if (ok) {
        if (sep == NULL)
            ns->separator = '/';
        else if (strlen(sep) == 1 && (sep[0] == '/' || sep[0] == '.'))
            ns->separator = sep[0];
        else
            ok = cfg_fail(ctx, ynode_get(node, "separator"), "mail.namespaces.separator",
                          "the separator is '/' or '.'");
    }
    free(sep);
    if (!ok)
        return false;
    if (ns->prefix == NULL)
        ns->prefix = xstrdup("");
    if (ns->location == NULL)
        return cfg_fail(ctx, node, path, "location is required (maildir:<path>)");
    const struct mail_storage_vfuncs *driver = mail_storage_driver_find(ns->location);
    if (driver == NULL || ns->location[strlen(driver->scheme) + 1] == '\0')
        return cfg_fail(ctx, ynode_get(node, "location"), "mail.namespaces.location",
                        "a location is <driver>:<path> with a storage driver (maildir)");
    if (ns->prefix[0] != '\0' && ns->prefix[strlen(ns->prefix) - 1] != ns->separator)
        return cfg_fail(ctx, ynode_get(node, "prefix"), "mail.namespaces.prefix",
                        "a prefix ends with the separator ('%s%c')", ns->prefix, ns->separator);
    if (ns->type == NAMESPACE_PERSONAL && ns->prefix[0] != '\0')
        return cfg_fail(ctx, ynode_get(node, "prefix"), "mail.namespaces.prefix",
                        "the personal namespace has the empty prefix");
    if (!read_owner_template(ctx, node, ns))
        return false;
    if (ns->private_index != NULL && !read_private_index(ctx, node, ns))
        return false;
    struct buf slug = {0};
    char *head = xstrndup(ns->prefix, namespace_prefix_head(ns));
    namespace_slug(head, &slug);
    free(head);
    ns->slug = buf_steal(&slug);
    if (ns->name == NULL)
        ns->name = xstrdup(ns->slug);
    return true;
}

bool mail_config_read(const char *file, const struct ynode *section, struct mail_config *out,
                      struct petrel_error *err)
{
    static const char *const keys[] = {"home",
                                       "fsync",
                                       "special_use",
                                       "namespaces",
                                       "acl",
                                       "attribute_dict",
                                       "metadata_max_value_bytes",
                                       "metadata_max_entries",
                                       "metadata_private",
                                       "metadata_server_admin",
                                       NULL};
    struct cfg_ctx ctx = {.file = file, .err = err};
    memset(out, 0, sizeof(*out));
    out->home = xstrdup("./var/mail/%u");
    out->fsync = FILEINDEX_FSYNC_ALWAYS;
    out->metadata_max_value_bytes = 64 * 1024;
    out->metadata_max_entries = 1000;
    out->metadata_private = true;
    if (!cfg_expect_map(&ctx, section, "mail") || !cfg_check_keys(&ctx, section, "mail", keys) ||
        !cfg_string(&ctx, section, "mail", "home", &out->home) ||
        !cfg_string(&ctx, section, "mail", "attribute_dict", &out->attribute_dict) ||
        /* RFC 5464 4.1: a server MUST accept values of 1024 bytes and 10
         * entries per folder or server. */
        !cfg_int(&ctx, section, "mail", "metadata_max_value_bytes", 1024, 1024 * 1024,
                 &out->metadata_max_value_bytes) ||
        !cfg_int(&ctx, section, "mail", "metadata_max_entries", 10, 1000000,
                 &out->metadata_max_entries) ||
        !cfg_bool(&ctx, section, "mail", "metadata_private", &out->metadata_private) ||
        !cfg_string(&ctx, section, "mail", "metadata_server_admin", &out->metadata_server_admin))
        goto fail;
    if (out->metadata_server_admin != NULL && *out->metadata_server_admin == '\0') {
        free(out->metadata_server_admin);
        out->metadata_server_admin = NULL;
    }
    if (out->attribute_dict != NULL && *out->attribute_dict == '\0') {
        free(out->attribute_dict); /* "" is the default: no METADATA */
        out->attribute_dict = NULL;
    }
    char *fsync = NULL;
    if (!cfg_string(&ctx, section, "mail", "fsync", &fsync))
        goto fail;
    if (fsync != NULL) {
        if (strcmp(fsync, "always") == 0)
            out->fsync = FILEINDEX_FSYNC_ALWAYS;
        else if (strcmp(fsync, "optimized") == 0)
            out->fsync = FILEINDEX_FSYNC_OPTIMIZED;
        else if (strcmp(fsync, "never") == 0)
            out->fsync = FILEINDEX_FSYNC_NEVER;
        else {
            cfg_fail(&ctx, ynode_get(section, "fsync"), "mail.fsync",
                     "expected always, optimized or never");
            free(fsync);
            goto fail;
        }
        free(fsync);
    }
    const struct ynode *su = ynode_get(section, "special_use");
    if (su != NULL) {
        if (!cfg_expect_map(&ctx, su, "mail.special_use"))
            goto fail;
        if (su->type == YNODE_MAP && su->count > MAX_SPECIAL_USE) {
            cfg_fail(&ctx, su, "mail.special_use", "more than %d entries", MAX_SPECIAL_USE);
            goto fail;
        }
        for (size_t i = 0; su->type == YNODE_MAP && i < su->count; i++) {
            const struct ynode *v = su->items[i];
            if (v->type != YNODE_SCALAR || !valid_attr(v->scalar)) {
                cfg_fail(&ctx, v, "mail.special_use",
                         "%s: expected an RFC 6154 attribute such as \\Sent", su->keys[i]);
                goto fail;
            }
            if (strchr(su->keys[i], '/') != NULL || su->keys[i][0] == '\0') {
                cfg_fail(&ctx, v, "mail.special_use", "%s: a top-level folder name", su->keys[i]);
                goto fail;
            }
            add_special_use(out, su->keys[i], v->scalar);
        }
    } else {
        static const char *const defaults[][2] = {{"Drafts", "\\Drafts"},
                                                  {"Sent", "\\Sent"},
                                                  {"Trash", "\\Trash"},
                                                  {"Junk", "\\Junk"},
                                                  {"Archive", "\\Archive"}};
        for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
            add_special_use(out, defaults[i][0], defaults[i][1]);
    }
    out->acl.cache_ms = 1000;
    const struct ynode *acl = ynode_get(section, "acl");
    if (acl != NULL) {
        static const char *const acl_keys[] = {"enabled", "cache_secs", "allow_anyone",
                                               "sharing_map", NULL};
        if (!cfg_expect_map(&ctx, acl, "mail.acl") ||
            !cfg_check_keys(&ctx, acl, "mail.acl", acl_keys) ||
            !cfg_bool(&ctx, acl, "mail.acl", "enabled", &out->acl.enabled) ||
            !cfg_bool(&ctx, acl, "mail.acl", "allow_anyone", &out->acl.allow_anyone) ||
            !cfg_duration_ms(&ctx, acl, "mail.acl", "cache_secs", 0, 3600 * 1000,
                             &out->acl.cache_ms) ||
            !cfg_string(&ctx, acl, "mail.acl", "sharing_map", &out->acl.sharing_map))
            goto fail;
        if (out->acl.sharing_map != NULL && *out->acl.sharing_map == '\0') {
            free(out->acl.sharing_map); /* "" is the default: no registry */
            out->acl.sharing_map = NULL;
        }
    }
    const struct ynode *nss = ynode_get(section, "namespaces");
    if (nss != NULL && nss->type != YNODE_SEQ) {
        cfg_fail(&ctx, nss, "mail.namespaces", "expected a list");
        goto fail;
    }
    if (nss != NULL && nss->count > MAX_NAMESPACES) {
        cfg_fail(&ctx, nss, "mail.namespaces", "more than %d namespaces", MAX_NAMESPACES);
        goto fail;
    }
    size_t count = nss != NULL ? nss->count : 0;
    out->namespaces = xcalloc(count + 1, sizeof(*out->namespaces));
    if (count == 0) {
        struct namespace_config *ns = &out->namespaces[0];
        ns->name = xstrdup("inbox");
        ns->type = NAMESPACE_PERSONAL;
        ns->prefix = xstrdup("");
        ns->separator = '/';
        ns->location = xstrdup("maildir:%h/Maildir");
        ns->subscriptions = true;
        ns->slug = xstrdup("personal");
        out->namespace_count = 1;
        return true;
    }
    bool personal = false;
    for (size_t i = 0; i < count; i++) {
        struct namespace_config *ns = &out->namespaces[i];
        out->namespace_count++;
        if (!read_namespace(&ctx, nss->items[i], ns))
            goto fail;
        for (size_t k = 0; k < i; k++) {
            if (strcmp(out->namespaces[k].slug, ns->slug) == 0) {
                cfg_fail(&ctx, nss->items[i], "mail.namespaces",
                         "two namespaces have the slug '%s'", ns->slug);
                goto fail;
            }
        }
        if (ns->per_owner && !out->acl.enabled) {
            /* Without the ACL module nothing would stand between a user
             * and every other user's mail. */
            cfg_fail(&ctx, nss->items[i], "mail.namespaces",
                     "a per-owner shared namespace ('%s') needs mail.acl.enabled: true",
                     ns->prefix);
            goto fail;
        }
        if (ns->type == NAMESPACE_PERSONAL) {
            if (personal) {
                cfg_fail(&ctx, nss->items[i], "mail.namespaces",
                         "more than one personal namespace");
                goto fail;
            }
            personal = true;
        }
    }
    return true;
fail:
    mail_config_free(out);
    return false;
}

const struct namespace_config *namespace_by_slug(const struct mail_config *cfg, const char *slug)
{
    for (size_t i = 0; i < cfg->namespace_count; i++) {
        if (strcmp(cfg->namespaces[i].slug, slug) == 0)
            return &cfg->namespaces[i];
    }
    return NULL;
}

/* A domain for %d: dot-separated labels of letters, digits, '-' and '_'
 * (RFC 1035's letter-digit-hyphen plus the underscore some sites use), each
 * 1..63 bytes and not starting or ending with '-', 253 bytes in all. No
 * empty label, so no "..", no leading or trailing dot, and never a '/'. */
static bool valid_domain(const char *domain, struct petrel_error *err)
{
    size_t len = strlen(domain);
    if (len == 0 || len > 253)
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "the domain of the user must be 1 to 253 bytes");
    size_t label = 0;
    for (const char *p = domain;; p++) {
        if (*p == '.' || *p == '\0') {
            if (label == 0 || label > 63 || p[-1] == '-' || p[-(ptrdiff_t)label] == '-')
                return petrel_error_set(err, PETREL_ERR_INVALID,
                                        "the domain of the user is not a valid domain name");
            if (*p == '\0')
                return true;
            label = 0;
            continue;
        }
        unsigned char c = (unsigned char)*p;
        if (!isalnum(c) && c != '-' && c != '_')
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "the domain of the user is not a valid domain name");
        label++;
    }
}

const struct namespace_config *namespace_by_prefix(const struct mail_config *cfg,
                                                   const char *full_name, const char **rest)
{
    const struct namespace_config *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < cfg->namespace_count; i++) {
        const struct namespace_config *ns = &cfg->namespaces[i];
        size_t plen = namespace_prefix_head(ns);
        if (strncmp(full_name, ns->prefix, plen) == 0 && (best == NULL || plen > best_len)) {
            best = ns;
            best_len = plen;
        }
    }
    if (best != NULL && rest != NULL)
        *rest = full_name + best_len;
    return best;
}

bool mail_template_expand(const char *template, const char *user, const char *home, struct buf *out,
                          struct petrel_error *err)
{
    /* Every value put into the path is checked, not only the whole user
     * name: "escape@.." is a valid user name but its %d is "..", which a
     * template like "/var/mail/%d/%n" would turn into a path outside the
     * mail root. The literal text of the template is configuration and is
     * trusted. */
    if (!user_name_valid(user, USER_NAME_MAX, err))
        return false;
    const char *at = strchr(user, '@');
    for (const char *p = template; *p != '\0'; p++) {
        if (*p != '%') {
            /* the literal run up to the next variable at once (a path is
             * made on every quota check: a byte at a time was most of it) */
            size_t run = strcspn(p, "%");
            buf_append(out, p, run);
            p += run - 1;
            continue;
        }
        p++;
        switch (*p) {
        case 'u':
            buf_append_str(out, user);
            break;
        case 'n':
            /* the local part is a prefix of a valid user name, so it has
             * no '/' and no leading '.'; it must not be empty ("@x") */
            if (at == user)
                return petrel_error_set(err, PETREL_ERR_INVALID,
                                        "the local part of the user is empty");
            if (at != NULL)
                buf_append(out, user, (size_t)(at - user));
            else
                buf_append_str(out, user);
            break;
        case 'd':
            if (at != NULL) {
                if (!valid_domain(at + 1, err))
                    return false;
                buf_append_str(out, at + 1);
            }
            break;
        case 'h':
            if (home == NULL)
                return petrel_error_set(err, PETREL_ERR_INVALID, "%%h used where no home is known");
            buf_append_str(out, home);
            break;
        case '%':
            buf_append_char(out, '%');
            break;
        default:
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "unknown variable %%%c in '%s' (use %%u %%n %%d %%h)",
                                    *p != '\0' ? *p : '?', template);
        }
        if (*p == '\0')
            break;
    }
    return true;
}
