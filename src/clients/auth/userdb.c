/* userdb entries: field setting by name (passwd-file extra fields, SQL
 * columns), deep copies, the JSON form of document 1's Userdb block, and the
 * allow_nets check.
 *
 * Setting rules beyond the header:
 *  - field names are matched case-insensitively (SQL drivers differ in the
 *    case they report columns in); extra keys keep the spelling given;
 *  - a `userdb_` prefix is dropped before matching, also for extra keys;
 *  - groups and acl_groups append to the one groups list (both names feed
 *    it), skipping names already there;
 *  - quota_rule, quota_rule2, quota_rule3, ... append in the order given;
 *  - allow_nets replaces the list (it is one field in every passdb);
 *  - a failed set leaves the entry unchanged. */
#include "clients/auth/userdb.h"

#include "core/buf.h"
#include "core/utf8.h"
#include "core/xalloc.h"
#include "net/cidr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* uid_t is 32 bits and (uid_t)-1 means "no change" to setuid and chown. */
#define USERDB_MAX_ID 4294967294LL

/* What malloc keeps beside each block; makes userdb_entry_bytes closer to
 * what the heap really spends on many small strings. */
#define ALLOC_OVERHEAD 16

bool userdb_fail(char **error, const char *fmt, ...)
{
    if (error != NULL) {
        va_list ap;
        va_start(ap, fmt);
        *error = xvasprintf(fmt, ap);
        va_end(ap);
    }
    return false;
}

static char **list_new_empty(void)
{
    return xcalloc(1, sizeof(char *));
}

size_t userdb_list_count(char *const *list)
{
    size_t n = 0;
    while (list[n] != NULL)
        n++;
    return n;
}

static void list_free(char **list)
{
    if (list == NULL)
        return;
    for (size_t i = 0; list[i] != NULL; i++)
        free(list[i]);
    free(list);
}

static char **list_clone(char *const *list)
{
    size_t n = userdb_list_count(list);
    char **copy = xcalloc(n + 1, sizeof(char *));
    for (size_t i = 0; i < n; i++)
        copy[i] = xstrdup(list[i]);
    return copy;
}

bool userdb_list_contains(char *const *list, const char *s)
{
    for (size_t i = 0; list[i] != NULL; i++) {
        if (strcmp(list[i], s) == 0)
            return true;
    }
    return false;
}

void userdb_list_push(char ***list, char *s)
{
    size_t n = userdb_list_count(*list);
    char **grown = xrealloc(*list, (n + 2) * sizeof(char *));
    grown[n] = s;
    grown[n + 1] = NULL;
    *list = grown;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Splits a comma list into a fresh NULL-terminated list of trimmed,
 * non-empty items. */
static char **split_comma_list(const char *value)
{
    char **items = list_new_empty();
    const char *p = value;
    for (;;) {
        const char *comma = strchr(p, ',');
        const char *end = comma != NULL ? comma : p + strlen(p);
        const char *start = p;
        while (start < end && is_space(*start))
            start++;
        while (end > start && is_space(end[-1]))
            end--;
        if (end > start)
            userdb_list_push(&items, xstrndup(start, (size_t)(end - start)));
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return items;
}

static bool parse_id(const char *name, const char *value, int64_t *out, char **error)
{
    const char *p = value;
    while (is_space(*p))
        p++;
    if (*p < '0' || *p > '9')
        return userdb_fail(error, "%s must be a non-negative integer, not '%s'", name, value);
    int64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > USERDB_MAX_ID)
            return userdb_fail(error, "%s '%s' is over the limit %lld", name, value, USERDB_MAX_ID);
    }
    while (is_space(*p))
        p++;
    if (*p != '\0')
        return userdb_fail(error, "%s must be a non-negative integer, not '%s'", name, value);
    *out = v;
    return true;
}

static void replace_string(char **field, const char *value)
{
    free(*field);
    *field = xstrdup(value);
}

static bool set_groups(struct userdb_entry *e, const char *name, const char *value, char **error)
{
    char **items = split_comma_list(value);
    char **merged = list_clone(e->groups);
    for (size_t i = 0; items[i] != NULL; i++) {
        if (userdb_list_contains(merged, items[i]))
            continue;
        if (userdb_list_count(merged) >= USERDB_MAX_LIST) {
            list_free(items);
            list_free(merged);
            return userdb_fail(error, "%s: more than %d groups", name, USERDB_MAX_LIST);
        }
        userdb_list_push(&merged, xstrdup(items[i]));
    }
    list_free(items);
    list_free(e->groups);
    e->groups = merged;
    return true;
}

static bool add_quota_rule(struct userdb_entry *e, const char *name, const char *value,
                           char **error)
{
    if (userdb_list_count(e->quota_rule) >= USERDB_MAX_LIST)
        return userdb_fail(error, "%s: more than %d quota rules", name, USERDB_MAX_LIST);
    userdb_list_push(&e->quota_rule, xstrdup(value));
    return true;
}

static bool set_allow_nets(struct userdb_entry *e, const char *name, const char *value,
                           char **error)
{
    char **items = split_comma_list(value);
    size_t n = userdb_list_count(items);
    if (n > USERDB_MAX_LIST) {
        list_free(items);
        return userdb_fail(error, "%s: more than %d networks", name, USERDB_MAX_LIST);
    }
    for (size_t i = 0; i < n; i++) {
        struct cidr net;
        struct petrel_error err;
        if (!cidr_parse(items[i], &net, &err)) {
            bool r = userdb_fail(error, "%s: %s", name, err.message);
            list_free(items);
            return r;
        }
    }
    list_free(e->allow_nets);
    e->allow_nets = items;
    return true;
}

static bool set_extra(struct userdb_entry *e, const char *key, const char *value, char **error)
{
    for (size_t i = 0; i < e->extra_count; i++) {
        if (strcmp(e->extra[i].key, key) == 0) {
            replace_string(&e->extra[i].value, value);
            return true;
        }
    }
    if (e->extra_count >= USERDB_MAX_EXTRA)
        return userdb_fail(error, "more than %d extra fields (at '%s')", USERDB_MAX_EXTRA, key);
    e->extra = xrealloc(e->extra, (e->extra_count + 1) * sizeof(*e->extra));
    e->extra[e->extra_count].key = xstrdup(key);
    e->extra[e->extra_count].value = xstrdup(value);
    e->extra_count++;
    return true;
}

/* "quota_rule" followed by nothing or by a number (quota_rule2, ...). */
static bool is_quota_rule_name(const char *name)
{
    static const char prefix[] = "quota_rule";
    size_t plen = sizeof(prefix) - 1;
    if (strncasecmp(name, prefix, plen) != 0)
        return false;
    for (const char *p = name + plen; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return false;
    }
    return true;
}

struct userdb_entry *userdb_entry_new(const char *username)
{
    struct userdb_entry *e = xcalloc(1, sizeof(*e));
    e->username = xstrdup(username != NULL ? username : "");
    e->uid = -1;
    e->gid = -1;
    e->home = xstrdup("");
    e->mail_location = xstrdup("");
    e->groups = list_new_empty();
    e->quota_rule = list_new_empty();
    e->allow_nets = list_new_empty();
    return e;
}

void userdb_entry_free(struct userdb_entry *e)
{
    if (e == NULL)
        return;
    free(e->username);
    if (e->password != NULL) {
        /* Stored hashes (or PLAIN passwords) should not linger in freed heap. */
        explicit_bzero(e->password, strlen(e->password));
        free(e->password);
    }
    free(e->home);
    free(e->mail_location);
    list_free(e->groups);
    list_free(e->quota_rule);
    list_free(e->allow_nets);
    for (size_t i = 0; i < e->extra_count; i++) {
        free(e->extra[i].key);
        free(e->extra[i].value);
    }
    free(e->extra);
    free(e);
}

struct userdb_entry *userdb_entry_clone(const struct userdb_entry *e)
{
    struct userdb_entry *c = xcalloc(1, sizeof(*c));
    c->username = xstrdup(e->username);
    c->password = e->password != NULL ? xstrdup(e->password) : NULL;
    c->uid = e->uid;
    c->gid = e->gid;
    c->home = xstrdup(e->home);
    c->mail_location = xstrdup(e->mail_location);
    c->groups = list_clone(e->groups);
    c->quota_rule = list_clone(e->quota_rule);
    c->allow_nets = list_clone(e->allow_nets);
    if (e->extra_count > 0) {
        c->extra = xcalloc(e->extra_count, sizeof(*c->extra));
        for (size_t i = 0; i < e->extra_count; i++) {
            c->extra[i].key = xstrdup(e->extra[i].key);
            c->extra[i].value = xstrdup(e->extra[i].value);
        }
    }
    c->extra_count = e->extra_count;
    return c;
}

bool userdb_entry_set(struct userdb_entry *e, const char *name, const char *value, char **error)
{
    if (error != NULL)
        *error = NULL;
    if (name == NULL || value == NULL)
        return userdb_fail(error, "field name and value are required");
    const char *field = name;
    if (strncasecmp(field, "userdb_", 7) == 0)
        field += 7;
    if (*field == '\0')
        return userdb_fail(error, "empty field name '%s'", name);
    if (strlen(field) > USERDB_MAX_FIELD)
        return userdb_fail(error, "field name longer than %d bytes", USERDB_MAX_FIELD);
    if (strlen(value) > USERDB_MAX_FIELD)
        return userdb_fail(error, "value of '%s' longer than %d bytes", field, USERDB_MAX_FIELD);

    if (strcasecmp(field, "uid") == 0)
        return parse_id("uid", value, &e->uid, error);
    if (strcasecmp(field, "gid") == 0)
        return parse_id("gid", value, &e->gid, error);
    if (strcasecmp(field, "home") == 0) {
        replace_string(&e->home, value);
        return true;
    }
    if (strcasecmp(field, "mail") == 0 || strcasecmp(field, "mail_location") == 0) {
        replace_string(&e->mail_location, value);
        return true;
    }
    if (strcasecmp(field, "groups") == 0 || strcasecmp(field, "acl_groups") == 0)
        return set_groups(e, field, value, error);
    if (is_quota_rule_name(field))
        return add_quota_rule(e, field, value, error);
    if (strcasecmp(field, "allow_nets") == 0)
        return set_allow_nets(e, field, value, error);
    return set_extra(e, field, value, error);
}

/* jansson rejects strings that are not UTF-8; a home directory or an extra
 * field from a legacy database may not be. Invalid bytes become U+FFFD so
 * the record still serialises. */
static json_t *json_text(const char *s)
{
    size_t len = strlen(s);
    if (utf8_valid(s, len))
        return json_stringn(s, len);
    struct buf b = {0};
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t n = utf8_decode(p + i, len - i, &cp);
        if (n == 0) {
            utf8_encode(0xFFFD, &b);
            i++;
        } else {
            buf_append(&b, p + i, n);
            i += n;
        }
    }
    json_t *j = json_stringn(b.data != NULL ? b.data : "", b.len);
    buf_free(&b);
    return j;
}

static json_t *json_list(char *const *list)
{
    json_t *arr = json_array();
    for (size_t i = 0; list[i] != NULL; i++)
        json_array_append_new(arr, json_text(list[i]));
    return arr;
}

json_t *userdb_entry_to_json(const struct userdb_entry *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "uid", json_integer(e->uid));
    json_object_set_new(o, "gid", json_integer(e->gid));
    json_object_set_new(o, "home", json_text(e->home));
    json_object_set_new(o, "mail_location", json_text(e->mail_location));
    json_object_set_new(o, "groups", json_list(e->groups));
    json_object_set_new(o, "quota_rule", json_list(e->quota_rule));
    json_object_set_new(o, "allow_nets", json_list(e->allow_nets));
    json_t *extra = json_object();
    for (size_t i = 0; i < e->extra_count; i++) {
        /* Keys are object keys: jansson needs them UTF-8 as well. */
        json_t *key = json_text(e->extra[i].key);
        json_object_set_new(extra, json_string_value(key), json_text(e->extra[i].value));
        json_decref(key);
    }
    json_object_set_new(o, "extra", extra);
    return o;
}

static size_t string_bytes(const char *s)
{
    return s != NULL ? strlen(s) + 1 + ALLOC_OVERHEAD : 0;
}

static size_t list_bytes(char *const *list)
{
    size_t n = userdb_list_count(list);
    size_t total = (n + 1) * sizeof(char *) + ALLOC_OVERHEAD;
    for (size_t i = 0; i < n; i++)
        total += string_bytes(list[i]);
    return total;
}

size_t userdb_entry_bytes(const struct userdb_entry *e)
{
    size_t total = sizeof(*e) + ALLOC_OVERHEAD;
    total += string_bytes(e->username) + string_bytes(e->password);
    total += string_bytes(e->home) + string_bytes(e->mail_location);
    total += list_bytes(e->groups) + list_bytes(e->quota_rule) + list_bytes(e->allow_nets);
    if (e->extra_count > 0)
        total += e->extra_count * sizeof(*e->extra) + ALLOC_OVERHEAD;
    for (size_t i = 0; i < e->extra_count; i++)
        total += string_bytes(e->extra[i].key) + string_bytes(e->extra[i].value);
    return total;
}

/* Text address to a sockaddr; an IPv6 zone ("fe80::1%eth0") is ignored. */
static bool parse_ip(const char *ip, struct sockaddr_storage *ss)
{
    char text[INET6_ADDRSTRLEN + 1];
    size_t len = strcspn(ip, "%");
    if (len == 0 || len >= sizeof(text))
        return false;
    memcpy(text, ip, len);
    text[len] = '\0';
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    if (inet_pton(AF_INET, text, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        return true;
    }
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET6, text, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        return true;
    }
    return false;
}

bool userdb_entry_allows_ip(const struct userdb_entry *e, const char *ip)
{
    if (e->allow_nets[0] == NULL)
        return true;
    struct sockaddr_storage ss;
    if (ip == NULL || !parse_ip(ip, &ss))
        return false;
    for (size_t i = 0; e->allow_nets[i] != NULL; i++) {
        struct cidr net;
        /* Validated when set; parsing again keeps the public struct plain text. */
        if (cidr_parse(e->allow_nets[i], &net, NULL) &&
            cidr_match(&net, (const struct sockaddr *)&ss))
            return true;
    }
    return false;
}
