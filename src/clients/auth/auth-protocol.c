/* The auth line protocol (docs/auth-protocol.md): its limits and flags on
 * top of the shared TAB-separated framing (net/line-fields.h: splitting and
 * unescaping in place, escaping, parameters, request ids), and userdb
 * fields as parameters.
 *
 * Reading userdb parameters is stricter than writing them: the reader is
 * the client side, and a bad value there must not turn into a half-filled
 * userdb entry. The writer writes what the entry holds; the one thing it
 * cannot express, an extra field whose key is empty or contains '=', is
 * left out (the reader splits `extra=<key>=<value>` at the first '='). */
#include "clients/auth/auth-protocol.h"

#include "core/xalloc.h"
#include "net/cidr.h"
#include "net/line-fields.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- framing (net/line-fields.h) ---------- */

static const struct line_fields_limits limits = {
    .max_len = AUTH_LINE_MAX,
    .max_fields = AUTH_MAX_FIELDS,
    .name_escaped_nul = true,
};

bool auth_line_parse(char *line, size_t len, struct auth_line *out, struct petrel_error *err)
{
    return line_fields_split(line, len, &limits, out->fields, &out->count, err);
}

void auth_line_add(struct buf *out, const char *field)
{
    line_fields_add(out, field);
}

void auth_line_add_param(struct buf *out, const char *key, const char *value)
{
    line_fields_add_param(out, key, value);
}

void auth_line_end(struct buf *out)
{
    line_fields_end(out);
}

const char *auth_line_param(const struct auth_line *line, size_t first, const char *key)
{
    return line_fields_param(line->fields, line->count, first, key, true);
}

bool auth_id_valid(const char *id)
{
    return line_fields_token_valid(id, AUTH_ID_MAX, "");
}

/* ---------- userdb fields ---------- */

void auth_line_add_userdb(struct buf *out, const struct userdb_entry *e)
{
    if (e->uid >= 0) {
        char num[24];
        snprintf(num, sizeof(num), "%lld", (long long)e->uid);
        auth_line_add_param(out, "uid", num);
    }
    if (e->gid >= 0) {
        char num[24];
        snprintf(num, sizeof(num), "%lld", (long long)e->gid);
        auth_line_add_param(out, "gid", num);
    }
    if (e->home[0] != '\0')
        auth_line_add_param(out, "home", e->home);
    if (e->mail_location[0] != '\0')
        auth_line_add_param(out, "mail_location", e->mail_location);
    for (size_t i = 0; e->groups[i] != NULL; i++)
        auth_line_add_param(out, "group", e->groups[i]);
    for (size_t i = 0; e->quota_rule[i] != NULL; i++)
        auth_line_add_param(out, "quota_rule", e->quota_rule[i]);
    for (size_t i = 0; e->allow_nets[i] != NULL; i++)
        auth_line_add_param(out, "allow_net", e->allow_nets[i]);
    for (size_t i = 0; i < e->extra_count; i++) {
        const struct userdb_extra *x = &e->extra[i];
        if (x->key[0] == '\0' || strchr(x->key, '=') != NULL)
            continue; /* would read back as a different key (see the top of the file) */
        struct buf kv = {0};
        buf_append_str(&kv, x->key);
        buf_append_char(&kv, '=');
        buf_append_str(&kv, x->value);
        auth_line_add_param(out, "extra", buf_cstr(&kv));
        buf_free(&kv);
    }
}

/* Appends a copy of `value` to the NULL-terminated *list; false when the
 * list is full. Groups and networks are sets (a repeat is dropped, as
 * userdb_entry_set does for groups); quota rules keep every entry. */
static bool list_add(char ***list, const char *value, bool set, const char *what, char **error)
{
    if (set && userdb_list_contains(*list, value))
        return true;
    if (userdb_list_count(*list) >= USERDB_MAX_LIST)
        return userdb_fail(error, "more than %d %s", USERDB_MAX_LIST, what);
    userdb_list_push(list, xstrdup(value));
    return true;
}

static bool add_extra(struct userdb_entry *e, const char *kv, char **error)
{
    const char *eq = strchr(kv, '=');
    if (eq == NULL || eq == kv)
        return userdb_fail(error, "extra field '%.64s' is not <key>=<value>", kv);
    size_t key_len = (size_t)(eq - kv);
    for (size_t i = 0; i < e->extra_count; i++) {
        struct userdb_extra *x = &e->extra[i];
        if (strlen(x->key) == key_len && memcmp(x->key, kv, key_len) == 0) {
            free(x->value);
            x->value = xstrdup(eq + 1);
            return true;
        }
    }
    if (e->extra_count >= USERDB_MAX_EXTRA)
        return userdb_fail(error, "more than %d extra fields", USERDB_MAX_EXTRA);
    e->extra = xrealloc(e->extra, (e->extra_count + 1) * sizeof(*e->extra));
    e->extra[e->extra_count].key = xstrndup(kv, key_len);
    e->extra[e->extra_count].value = xstrdup(eq + 1);
    e->extra_count++;
    return true;
}

static bool read_userdb_param(struct userdb_entry *e, const char *key, const char *value,
                              char **error)
{
    if (strlen(value) > USERDB_MAX_FIELD)
        return userdb_fail(error, "%s longer than %d bytes", key, USERDB_MAX_FIELD);
    if (strcmp(key, "uid") == 0 || strcmp(key, "gid") == 0 || strcmp(key, "home") == 0 ||
        strcmp(key, "mail_location") == 0)
        return userdb_entry_set(e, key, value, error); /* the same checks as every passdb */
    if (strcmp(key, "group") == 0) {
        if (value[0] == '\0')
            return userdb_fail(error, "empty group name");
        return list_add(&e->groups, value, true, "groups", error);
    }
    if (strcmp(key, "quota_rule") == 0)
        return list_add(&e->quota_rule, value, false, "quota rules", error);
    if (strcmp(key, "allow_net") == 0) {
        struct cidr net;
        struct petrel_error err;
        if (!cidr_parse(value, &net, &err))
            return userdb_fail(error, "allow_net: %s", err.message);
        return list_add(&e->allow_nets, value, true, "networks", error);
    }
    if (strcmp(key, "extra") == 0)
        return add_extra(e, value, error);
    return true; /* a newer server's field: ignored */
}

bool auth_line_read_userdb(const struct auth_line *line, size_t first, struct userdb_entry *e,
                           char **error)
{
    if (error != NULL)
        *error = NULL;
    for (size_t i = first; i < line->count; i++) {
        const char *f = line->fields[i];
        const char *eq = strchr(f, '=');
        if (eq == NULL)
            continue; /* a flag; none is defined for userdb fields */
        size_t key_len = (size_t)(eq - f);
        char key[16];
        if (key_len >= sizeof(key))
            continue; /* longer than any key we know */
        memcpy(key, f, key_len);
        key[key_len] = '\0';
        if (!read_userdb_param(e, key, eq + 1, error))
            return false;
    }
    return true;
}
