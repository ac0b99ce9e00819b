#include "core/cfg-read.h"

#include "core/buf.h"
#include "core/xalloc.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool cfg_fail(const struct cfg_ctx *ctx, const struct ynode *node, const char *path,
              const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* An empty path (the document itself) adds no "key: " part. */
    const char *sep = path != NULL && *path != '\0' ? ": " : "";
    if (path == NULL)
        path = "";
    if (node != NULL)
        return petrel_error_set(ctx->err, PETREL_ERR_INVALID, "%s:%d: %s%s%s", ctx->file,
                                node->line, path, sep, msg);
    return petrel_error_set(ctx->err, PETREL_ERR_INVALID, "%s: %s%s%s", ctx->file, path, sep, msg);
}

bool cfg_fail_key(const struct cfg_ctx *ctx, const struct ynode *section, const char *key,
                  const char *path, const char *msg)
{
    const struct ynode *at = ynode_get(section, key);
    return cfg_fail(ctx, at != NULL ? at : section, path, "%s", msg);
}

static void join_path(char *dst, size_t size, const char *path, const char *key)
{
    if (path == NULL || *path == '\0')
        snprintf(dst, size, "%s", key);
    else
        snprintf(dst, size, "%s.%s", path, key);
}

bool cfg_expect_map(const struct cfg_ctx *ctx, const struct ynode *node, const char *path)
{
    if (node == NULL || node->type == YNODE_MAP)
        return true;
    if (node->type == YNODE_SCALAR && node->scalar[0] == '\0' && !node->quoted)
        return true; /* "section:" with nothing under it */
    return cfg_fail(ctx, node, path, "expected a mapping, found %s", ynode_type_name(node->type));
}

bool cfg_check_keys(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                    const char *const allowed[])
{
    if (map == NULL || map->type != YNODE_MAP)
        return true;
    for (size_t i = 0; i < map->count; i++) {
        bool known = false;
        for (size_t k = 0; allowed[k] != NULL; k++) {
            if (strcmp(map->keys[i], allowed[k]) == 0) {
                known = true;
                break;
            }
        }
        if (!known) {
            char full[256];
            join_path(full, sizeof(full), path, map->keys[i]);
            return petrel_error_set(ctx->err, PETREL_ERR_INVALID, "%s:%d: %s: unknown key",
                                    ctx->file, map->key_lines[i], full);
        }
    }
    return true;
}

/* A plain `~`, `null` or empty value counts as absent. */
static bool is_null(const struct ynode *n)
{
    return n->type == YNODE_SCALAR && !n->quoted &&
           (n->scalar[0] == '\0' || strcmp(n->scalar, "~") == 0 ||
            strcmp(n->scalar, "null") == 0);
}

/* The scalar under `key` (NULL when absent or on error, *ok telling
 * which); `full` (FULL_PATH_MAX bytes) gets "<path>.<key>" for messages. */
#define FULL_PATH_MAX 256
static const struct ynode *scalar_of(const struct cfg_ctx *ctx, const struct ynode *map,
                                     const char *path, const char *key, char *full, bool *ok)
{
    *ok = true;
    const struct ynode *n = ynode_get(map, key);
    if (n == NULL)
        return NULL;
    join_path(full, FULL_PATH_MAX, path, key);
    if (n->type != YNODE_SCALAR) {
        *ok = cfg_fail(ctx, n, full, "expected a scalar, found %s", ynode_type_name(n->type));
        return NULL;
    }
    return n;
}

/* As scalar_of, and NULL for a value that counts as absent (is_null). */
static const struct ynode *value_of(const struct cfg_ctx *ctx, const struct ynode *map,
                                    const char *path, const char *key, char *full, bool *ok)
{
    const struct ynode *n = scalar_of(ctx, map, path, key, full, ok);
    return n == NULL || is_null(n) ? NULL : n;
}

bool cfg_string(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                const char *key, char **out)
{
    bool ok;
    char full[FULL_PATH_MAX];
    const struct ynode *n = scalar_of(ctx, map, path, key, full, &ok);
    if (n == NULL)
        return ok;
    if (is_null(n) && n->scalar[0] != '\0')
        return true;
    free(*out);
    *out = xstrdup(n->scalar);
    return true;
}

bool cfg_bool(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
              const char *key, bool *out)
{
    bool ok;
    char full[FULL_PATH_MAX];
    const struct ynode *n = value_of(ctx, map, path, key, full, &ok);
    if (n == NULL)
        return ok;
    if (n->quoted)
        return cfg_fail(ctx, n, full, "expected true or false, found a quoted string");
    if (strcasecmp(n->scalar, "true") == 0 || strcasecmp(n->scalar, "yes") == 0 ||
        strcasecmp(n->scalar, "on") == 0) {
        *out = true;
        return true;
    }
    if (strcasecmp(n->scalar, "false") == 0 || strcasecmp(n->scalar, "no") == 0 ||
        strcasecmp(n->scalar, "off") == 0) {
        *out = false;
        return true;
    }
    return cfg_fail(ctx, n, full, "expected true or false, found '%s'", n->scalar);
}

bool cfg_int(const struct cfg_ctx *ctx, const struct ynode *map, const char *path, const char *key,
             int64_t min, int64_t max, int64_t *out)
{
    bool ok;
    char full[FULL_PATH_MAX];
    const struct ynode *n = value_of(ctx, map, path, key, full, &ok);
    if (n == NULL)
        return ok;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(n->scalar, &end, 10);
    if (n->quoted || end == n->scalar || *end != '\0' || errno != 0)
        return cfg_fail(ctx, n, full, "expected an integer, found '%s'", n->scalar);
    if (v < min || v > max)
        return cfg_fail(ctx, n, full, "%lld is out of range [%lld, %lld]", v, (long long)min,
                        (long long)max);
    *out = v;
    return true;
}

bool duration_parse_ms(const char *text, int64_t *out_ms)
{
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0')
        return false;
    /* Plain integer: seconds. */
    char *end = NULL;
    errno = 0;
    long long plain = strtoll(p, &end, 10);
    if (errno == 0 && end != p && *end == '\0') {
        if (plain < 0 || plain > INT64_MAX / 1000)
            return false;
        *out_ms = plain * 1000;
        return true;
    }
    int64_t total = 0;
    while (*p != '\0') {
        if (!isdigit((unsigned char)*p))
            return false;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno != 0 || v < 0)
            return false;
        p = end;
        int64_t unit;
        if (strncmp(p, "ms", 2) == 0) {
            unit = 1;
            p += 2;
        } else if (*p == 's') {
            unit = 1000;
            p++;
        } else if (*p == 'm') {
            unit = 60 * 1000;
            p++;
        } else if (*p == 'h') {
            unit = 3600 * 1000;
            p++;
        } else if (*p == 'd') {
            unit = 86400 * 1000;
            p++;
        } else {
            return false;
        }
        if (v > (INT64_MAX - total) / unit)
            return false;
        total += v * unit;
    }
    *out_ms = total;
    return true;
}

bool cfg_duration_ms(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                     const char *key, int64_t min_ms, int64_t max_ms, int64_t *out_ms)
{
    bool ok;
    char full[FULL_PATH_MAX];
    const struct ynode *n = value_of(ctx, map, path, key, full, &ok);
    if (n == NULL)
        return ok;
    int64_t v;
    if (!duration_parse_ms(n->scalar, &v))
        return cfg_fail(ctx, n, full, "expected a duration like 30s, 5m or 250ms, found '%s'",
                        n->scalar);
    if (v < min_ms || v > max_ms)
        return cfg_fail(ctx, n, full, "duration out of range [%lldms, %lldms]",
                        (long long)min_ms, (long long)max_ms);
    *out_ms = v;
    return true;
}

char **cfg_strv_dup(const char *const *items)
{
    size_t n = 0;
    while (items[n] != NULL)
        n++;
    char **v = xcalloc(n + 1, sizeof(char *));
    for (size_t i = 0; i < n; i++)
        v[i] = xstrdup(items[i]);
    return v;
}

bool cfg_check_username_format(const struct cfg_ctx *ctx, const struct ynode *map,
                               const char *section, const char *fmt)
{
    const struct ynode *at = ynode_get(map, "username_format");
    char full[128];
    snprintf(full, sizeof(full), "%s.username_format", section);
    if (*fmt == '\0')
        return cfg_fail(ctx, at, full, "must not be empty");
    for (const char *p = fmt; *p != '\0'; p++) {
        if (*p != '%')
            continue;
        p++;
        if (*p != 'u' && *p != 'n' && *p != 'd' && *p != '%')
            return cfg_fail(ctx, at, full, "unknown variable %%%c (use %%u, %%n, %%d or %%%%)",
                            *p != '\0' ? *p : '?');
    }
    return true;
}

bool cfg_check_recipient_delimiter(const struct cfg_ctx *ctx, const struct ynode *map,
                                   const char *section, const char *delimiters)
{
    for (const char *p = delimiters; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (c <= ' ' || c >= 0x7f || c == '@' || c == '"' || c == '\\') {
            char full[128];
            snprintf(full, sizeof(full), "%s.recipient_delimiter", section);
            return cfg_fail(ctx, ynode_get(map, "recipient_delimiter"), full,
                            "printable ASCII characters other than '@', '\"' and '\\' only");
        }
    }
    return true;
}

void cfg_strv_free(char **v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; v[i] != NULL; i++)
        free(v[i]);
    free(v);
}

bool cfg_choice(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                const char *key, const char *const names[], int *out)
{
    char *text = NULL;
    if (!cfg_string(ctx, map, path, key, &text))
        return false;
    if (text == NULL)
        return true;
    struct buf expected = {0};
    for (size_t i = 0; names[i] != NULL; i++) {
        if (strcmp(text, names[i]) == 0) {
            free(text);
            buf_free(&expected);
            *out = (int)i;
            return true;
        }
        buf_append_str(&expected, i == 0 ? "" : names[i + 1] == NULL ? " or " : ", ");
        buf_append_str(&expected, names[i]);
    }
    char full[FULL_PATH_MAX];
    join_path(full, sizeof(full), path, key);
    bool ok = cfg_fail(ctx, ynode_get(map, key), full, "expected %s, found '%s'",
                       buf_cstr(&expected), text);
    buf_free(&expected);
    free(text);
    return ok;
}

bool cfg_string_list(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                     const char *key, size_t max_items, char ***out, size_t *count)
{
    const struct ynode *n = ynode_get(map, key);
    if (n == NULL || is_null(n))
        return true;
    char full[256];
    join_path(full, sizeof(full), path, key);
    if (n->type != YNODE_SEQ)
        return cfg_fail(ctx, n, full, "expected a list, found %s", ynode_type_name(n->type));
    if (n->count > max_items)
        return cfg_fail(ctx, n, full, "more than %zu items", max_items);
    char **v = xcalloc(n->count + 1, sizeof(*v));
    for (size_t i = 0; i < n->count; i++) {
        const struct ynode *item = n->items[i];
        if (item->type != YNODE_SCALAR) {
            cfg_strv_free(v);
            return cfg_fail(ctx, item, full, "list items must be strings, found %s",
                            ynode_type_name(item->type));
        }
        v[i] = xstrdup(item->scalar);
    }
    cfg_strv_free(*out);
    *out = v;
    if (count != NULL)
        *count = n->count;
    return true;
}

const struct ynode *cfg_list_item(const struct ynode *map, const char *key, size_t i)
{
    const struct ynode *list = ynode_get(map, key);
    if (list != NULL && list->type == YNODE_SEQ && i < list->count)
        return list->items[i];
    return list;
}
