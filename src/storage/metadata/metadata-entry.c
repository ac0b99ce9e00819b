/* METADATA entry names and dict keys (see metadata-entry.h). */
#include "storage/metadata/metadata-entry.h"

#include <string.h>

#define INTERNAL_PREFIX "vendor/vendor.dovecot/pvt"
#define SERVER_PREFIX "vendor/vendor.dovecot/pvt/server/"

static const struct {
    enum metadata_scope scope;
    const char *name;       /* as clients write it */
    const char *key_prefix; /* in the dict */
} scopes[] = {
    {METADATA_PRIVATE, "/private", "priv/"},
    {METADATA_SHARED, "/shared", "shared/"},
};

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* Whether `text` starts with the lower-case `prefix`, ignoring case. */
static bool starts_nocase(const char *text, size_t len, const char *prefix)
{
    size_t plen = strlen(prefix);
    if (len < plen)
        return false;
    for (size_t i = 0; i < plen; i++) {
        if (lower(text[i]) != prefix[i])
            return false;
    }
    return true;
}

bool metadata_entry_parse(const char *text, size_t len, bool bare_ok, struct metadata_entry *e,
                          const char **why)
{
    memset(e, 0, sizeof(*e));
    if (len > METADATA_ENTRY_MAX) {
        *why = "Entry name is too long";
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '*' || c == '%') {
            *why = "Entry name can't contain '*' or '%'";
            return false;
        }
        if (c < 0x20 || c > 0x7e) {
            *why = "Entry name must be printable ASCII";
            return false;
        }
    }
    size_t k = 0;
    for (; k < sizeof(scopes) / sizeof(scopes[0]); k++) {
        size_t slen = strlen(scopes[k].name);
        if (starts_nocase(text, len, scopes[k].name) && (len == slen || text[slen] == '/'))
            break;
    }
    if (k == sizeof(scopes) / sizeof(scopes[0])) {
        *why = "Entry name must begin with /private or /shared";
        return false;
    }
    e->scope = scopes[k].scope;
    size_t slen = strlen(scopes[k].name);
    if (len == slen) {
        if (!bare_ok) {
            *why = "Entry name must name an entry below /private or /shared";
            return false;
        }
        return true;
    }
    const char *path = text + slen + 1;
    size_t plen = len - slen - 1;
    if (plen == 0 || path[plen - 1] == '/') {
        *why = "Entry name can't end with '/'";
        return false;
    }
    for (size_t i = 0; i < plen; i++) {
        if (path[i] == '/' && (i == 0 || path[i - 1] == '/')) {
            *why = "Entry name can't contain consecutive '/'";
            return false;
        }
        e->path[i] = lower(path[i]);
    }
    e->path[plen] = '\0';
    return true;
}

void metadata_entry_format(const struct metadata_entry *e, struct buf *out)
{
    buf_append_str(out, scopes[e->scope].name);
    if (e->path[0] != '\0') {
        buf_append_char(out, '/');
        buf_append_str(out, e->path);
    }
}

bool metadata_entry_internal(const struct metadata_entry *e)
{
    size_t n = strlen(INTERNAL_PREFIX);
    return strncmp(e->path, INTERNAL_PREFIX, n) == 0 &&
           (e->path[n] == '\0' || e->path[n] == '/');
}

void metadata_dict_prefix(enum metadata_scope scope, const char *guid_hex, bool server,
                          struct buf *out)
{
    buf_append_str(out, scopes[scope].key_prefix);
    buf_append_str(out, guid_hex);
    buf_append_char(out, '/');
    if (server)
        buf_append_str(out, SERVER_PREFIX);
}

void metadata_dict_key(const struct metadata_entry *e, const char *guid_hex, bool server,
                       struct buf *out)
{
    metadata_dict_prefix(e->scope, guid_hex, server, out);
    buf_append_str(out, e->path);
}

bool metadata_entry_from_key(const char *key, enum metadata_scope scope, const char *guid_hex,
                             bool server, struct metadata_entry *e)
{
    struct buf prefix = {0};
    metadata_dict_prefix(scope, guid_hex, server, &prefix);
    bool under = strncmp(key, prefix.data, prefix.len) == 0;
    const char *path = key + prefix.len;
    buf_free(&prefix);
    if (!under || *path == '\0')
        return false;
    struct buf name = {0};
    buf_append_str(&name, scopes[scope].name);
    buf_append_char(&name, '/');
    buf_append_str(&name, path);
    const char *why = NULL;
    bool ok = metadata_entry_parse(name.data, name.len, false, e, &why) &&
              strcmp(e->path, path) == 0 && !metadata_entry_internal(e);
    buf_free(&name);
    return ok;
}

bool metadata_entry_in_depth(const struct metadata_entry *base, const struct metadata_entry *e,
                             int depth)
{
    if (base->scope != e->scope)
        return false;
    size_t blen = strlen(base->path);
    if (strcmp(base->path, e->path) == 0)
        return true;
    if (depth == 0)
        return false;
    /* below base: base's path then '/' (or anything, for the bare scope) */
    const char *rest = e->path;
    if (blen > 0) {
        if (strncmp(e->path, base->path, blen) != 0 || e->path[blen] != '/')
            return false;
        rest = e->path + blen + 1;
    }
    return depth < 0 || strchr(rest, '/') == NULL;
}
