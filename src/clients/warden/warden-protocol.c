/* The warden line protocol (warden-protocol.h, docs/warden-protocol.md):
 * its limits on top of the shared TAB-separated framing (net/line-fields.h:
 * split and unescape in place, escape on the way out), the rules every
 * field must follow, and typed reading and writing of requests and replies.
 *
 * Reading is strict: a request whose field breaks a rule is refused with a
 * reason naming the field, never cut or repaired, so what the warden stores
 * is exactly what the client sent. */
#include "clients/warden/warden-protocol.h"

#include "core/slice.h"
#include "core/user-name.h"
#include "core/utf8.h"
#include "net/line-fields.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

/* ---------- framing (net/line-fields.h) ---------- */

bool warden_line_parse(char *line, size_t len, size_t max_len, struct warden_line *out,
                       struct petrel_error *err)
{
    const struct line_fields_limits limits = {.max_len = max_len, .max_fields = WARDEN_MAX_FIELDS};
    return line_fields_split(line, len, &limits, out->fields, &out->count, err);
}

void warden_line_add(struct buf *out, const char *field)
{
    line_fields_add(out, field);
}

void warden_line_add_param(struct buf *out, const char *key, const char *value)
{
    line_fields_add_param(out, key, value);
}

void warden_line_add_uint(struct buf *out, uint64_t value)
{
    line_fields_add_uint(out, value);
}

void warden_line_end(struct buf *out)
{
    line_fields_end(out);
}

const char *warden_line_param(const struct warden_line *line, size_t first, const char *key)
{
    return line_fields_param(line->fields, line->count, first, key, false);
}

/* ---------- field rules ---------- */

bool warden_request_id_valid(const char *id)
{
    return strcmp(id, "-") == 0 || line_fields_token_valid(id, WARDEN_ID_MAX, "");
}

bool warden_token_valid(const char *s, size_t max)
{
    return line_fields_token_valid(s, max, ":@");
}

const char *const warden_services[] = {"imap", "pop3", "submission", "lmtp", NULL};

bool warden_service_valid(const char *service)
{
    for (size_t i = 0; warden_services[i] != NULL; i++) {
        if (strcmp(warden_services[i], service) == 0)
            return true;
    }
    return false;
}

bool warden_user_valid(const char *user)
{
    return user_name_valid(user, WARDEN_USER_MAX, NULL);
}

bool warden_ip_valid(const char *ip, bool allow_empty)
{
    if (ip[0] == '\0')
        return allow_empty;
    unsigned char addr[16];
    if (strlen(ip) >= 64)
        return false;
    return inet_pton(AF_INET, ip, addr) == 1 || inet_pton(AF_INET6, ip, addr) == 1;
}

bool warden_penalty_key_valid(const char *key)
{
    if (strncmp(key, "user:", 5) == 0)
        return warden_user_valid(key + 5);
    return warden_ip_valid(key, false);
}

bool warden_instance_valid(const char *instance)
{
    size_t n = 0;
    for (const char *p = instance; *p != '\0'; p++, n++) {
        unsigned char c = (unsigned char)*p;
        if (c <= 0x20 || c == 0x7f || n == WARDEN_INSTANCE_MAX)
            return false;
    }
    return n > 0;
}

bool warden_parse_uint(const char *text, uint64_t max, uint64_t *out)
{
    /* the warden protocol writes numbers without leading zeros */
    if (text[0] == '0' && text[1] != '\0')
        return false;
    return str_parse_u64(text, max, out);
}

/* ---------- requests ---------- */

static const char *const verb_names[WARDEN_VERB_COUNT] = {
    "HELLO", "CONNECT", "DISCONNECT", "LIST", "COUNT", "PENALTY-GET", "PENALTY-INC",
};

const char *warden_verb_name(enum warden_verb verb)
{
    return verb < WARDEN_VERB_COUNT ? verb_names[verb] : "?";
}

static bool need_fields(const struct warden_line *line, size_t n, const char *usage,
                        struct petrel_error *err)
{
    if (line->count < n)
        return petrel_error_set(err, PETREL_ERR_INVALID, "usage: %s", usage);
    return true;
}

/* Filters of LIST and COUNT: absent and "" both mean any. */
static bool read_filters(const struct warden_line *line, struct warden_request *out,
                         struct petrel_error *err)
{
    const char *service = warden_line_param(line, 2, "service");
    const char *user = warden_line_param(line, 2, "user");
    if (service != NULL && service[0] != '\0') {
        if (!warden_service_valid(service))
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "unknown service (imap, pop3, submission, lmtp)");
        out->service = service;
    }
    if (user != NULL && user[0] != '\0') {
        if (!warden_user_valid(user))
            return petrel_error_set(err, PETREL_ERR_INVALID, "invalid user name");
        out->user = user;
    }
    return true;
}

static bool read_hello(const struct warden_line *line, struct warden_request *out,
                       struct petrel_error *err)
{
    if (!need_fields(line, 5, "HELLO <id> <major> <instance> <boot-id>", err))
        return false;
    if (!warden_parse_uint(line->fields[2], 1000000, &out->major))
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid protocol version");
    if (!warden_instance_valid(line->fields[3]))
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "invalid instance name (1-%d printable bytes, no spaces)",
                                WARDEN_INSTANCE_MAX);
    if (!warden_token_valid(line->fields[4], WARDEN_BOOT_ID_MAX))
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid boot id");
    out->instance = line->fields[3];
    out->boot_id = line->fields[4];
    return true;
}

static bool read_connect(const struct warden_line *line, struct warden_request *out,
                         struct petrel_error *err)
{
    if (!need_fields(line, 7, "CONNECT <id> <session> <user> <ip> <service> <connected-at>", err))
        return false;
    uint64_t at;
    if (!warden_token_valid(line->fields[2], WARDEN_SESSION_ID_MAX))
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "invalid session id (1-%d bytes of A-Z a-z 0-9 _ . : @ -)",
                                WARDEN_SESSION_ID_MAX);
    struct petrel_error uerr;
    if (!user_name_valid(line->fields[3], WARDEN_USER_MAX, &uerr))
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid user name: %s", uerr.message);
    if (!warden_ip_valid(line->fields[4], true))
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid IP address");
    if (!warden_service_valid(line->fields[5]))
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "unknown service (imap, pop3, submission, lmtp)");
    if (!warden_parse_uint(line->fields[6], WARDEN_TIME_MAX, &at))
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid connected-at time");
    out->session_id = line->fields[2];
    out->user = line->fields[3];
    out->ip = line->fields[4];
    out->service = line->fields[5];
    out->connected_at = (int64_t)at;
    return true;
}

static bool read_by(const struct warden_line *line, struct warden_request *out,
                    struct petrel_error *err)
{
    const char *by = warden_line_param(line, 2, "by");
    if (by == NULL || by[0] == '\0')
        out->by = WARDEN_BY_NONE;
    else if (strcmp(by, "protocol") == 0)
        out->by = WARDEN_BY_PROTOCOL;
    else if (strcmp(by, "user") == 0)
        out->by = WARDEN_BY_USER;
    else
        return petrel_error_set(err, PETREL_ERR_INVALID, "by must be protocol or user");
    return true;
}

static bool read_penalty_key(const struct warden_line *line, struct warden_request *out,
                             const char *usage, struct petrel_error *err)
{
    if (!need_fields(line, 3, usage, err))
        return false;
    if (!warden_penalty_key_valid(line->fields[2]))
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid IP address (or user:<user>)");
    out->ip = line->fields[2];
    return true;
}

bool warden_request_read(const struct warden_line *line, struct warden_request *out,
                         const char **id_out, struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    out->verb = WARDEN_VERB_COUNT;
    if (id_out != NULL)
        *id_out = NULL;
    if (line->count < 2 || !warden_request_id_valid(line->fields[1]))
        return petrel_error_set(err, PETREL_ERR_INVALID, "missing or invalid request id");
    out->id = line->fields[1];
    if (id_out != NULL)
        *id_out = out->id;
    for (int v = 0; v < WARDEN_VERB_COUNT; v++) {
        if (strcmp(line->fields[0], verb_names[v]) == 0)
            out->verb = (enum warden_verb)v;
    }
    switch (out->verb) {
    case WARDEN_HELLO:
        return read_hello(line, out, err);
    case WARDEN_CONNECT:
        return read_connect(line, out, err);
    case WARDEN_DISCONNECT:
        if (!need_fields(line, 3, "DISCONNECT <id> <session>", err))
            return false;
        if (!warden_token_valid(line->fields[2], WARDEN_SESSION_ID_MAX))
            return petrel_error_set(err, PETREL_ERR_INVALID, "invalid session id");
        out->session_id = line->fields[2];
        return true;
    case WARDEN_LIST:
        return read_filters(line, out, err);
    case WARDEN_COUNT:
        return read_by(line, out, err) && read_filters(line, out, err);
    case WARDEN_PENALTY_GET:
        return read_penalty_key(line, out, "PENALTY-GET <id> <ip>|user:<user>", err);
    case WARDEN_PENALTY_INC:
        return read_penalty_key(line, out, "PENALTY-INC <id> <ip>|user:<user>", err);
    case WARDEN_VERB_COUNT:
        break;
    }
    return petrel_error_set(err, PETREL_ERR_INVALID, "unknown verb");
}

void warden_request_write(struct buf *out, const struct warden_request *req)
{
    static const char *const by_names[] = {"", "protocol", "user"};
    warden_line_add(out, warden_verb_name(req->verb));
    warden_line_add(out, req->id);
    switch (req->verb) {
    case WARDEN_HELLO:
        warden_line_add_uint(out, req->major);
        warden_line_add(out, req->instance);
        warden_line_add(out, req->boot_id);
        break;
    case WARDEN_CONNECT:
        warden_line_add(out, req->session_id);
        warden_line_add(out, req->user);
        warden_line_add(out, req->ip != NULL ? req->ip : "");
        warden_line_add(out, req->service);
        warden_line_add_uint(out, (uint64_t)req->connected_at);
        break;
    case WARDEN_DISCONNECT:
        warden_line_add(out, req->session_id);
        break;
    case WARDEN_LIST:
    case WARDEN_COUNT:
        if (req->verb == WARDEN_COUNT && req->by != WARDEN_BY_NONE)
            warden_line_add_param(out, "by", by_names[req->by]);
        if (req->service != NULL)
            warden_line_add_param(out, "service", req->service);
        if (req->user != NULL)
            warden_line_add_param(out, "user", req->user);
        break;
    case WARDEN_PENALTY_GET:
    case WARDEN_PENALTY_INC:
        warden_line_add(out, req->ip);
        break;
    case WARDEN_VERB_COUNT:
        break;
    }
    warden_line_end(out);
}

/* ---------- replies ---------- */

static bool bad_reply(struct petrel_error *err, const char *what)
{
    return petrel_error_set(err, PETREL_ERR_INVALID, "malformed %s reply", what);
}

bool warden_reply_read(const struct warden_line *line, struct warden_reply *out,
                       struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    if (line->count < 2 || !warden_request_id_valid(line->fields[1]))
        return petrel_error_set(err, PETREL_ERR_INVALID, "reply without a valid request id");
    const char *verb = line->fields[0];
    const char *const *f = (const char *const *)line->fields;
    out->id = f[1];
    if (strcmp(verb, "OK") == 0) {
        out->kind = WARDEN_REPLY_OK;
        if (line->count >= 3 && !warden_parse_uint(f[2], 1000000, &out->number))
            return bad_reply(err, "OK");
        return true;
    }
    if (strcmp(verb, "ERROR") == 0) {
        out->kind = WARDEN_REPLY_ERROR;
        out->reason = line->count >= 3 ? f[2] : "";
        return true;
    }
    if (strcmp(verb, "SESSION") == 0) {
        uint64_t at;
        out->kind = WARDEN_REPLY_SESSION;
        if (line->count < 7 || !warden_token_valid(f[2], WARDEN_SESSION_ID_MAX) ||
            !warden_user_valid(f[3]) || !warden_ip_valid(f[4], true) ||
            !warden_service_valid(f[5]) || !warden_parse_uint(f[6], WARDEN_TIME_MAX, &at))
            return bad_reply(err, "SESSION");
        out->session_id = f[2];
        out->user = f[3];
        out->ip = f[4];
        out->service = f[5];
        out->connected_at = (int64_t)at;
        return true;
    }
    if (strcmp(verb, "ITEM") == 0) {
        out->kind = WARDEN_REPLY_ITEM;
        if (line->count < 4 || f[2][0] == '\0' ||
            !warden_parse_uint(f[3], UINT64_MAX, &out->number))
            return bad_reply(err, "ITEM");
        out->key = f[2];
        return true;
    }
    if (strcmp(verb, "DONE") == 0 || strcmp(verb, "PENALTY") == 0) {
        out->kind = verb[0] == 'D' ? WARDEN_REPLY_DONE : WARDEN_REPLY_PENALTY;
        if (line->count < 3 || !warden_parse_uint(f[2], UINT64_MAX, &out->number))
            return bad_reply(err, verb);
        return true;
    }
    return petrel_error_set(err, PETREL_ERR_INVALID, "unknown reply");
}

void warden_reply_write(struct buf *out, const struct warden_reply *reply)
{
    switch (reply->kind) {
    case WARDEN_REPLY_OK:
        warden_line_add(out, "OK");
        warden_line_add(out, reply->id);
        if (reply->number > 0)
            warden_line_add_uint(out, reply->number);
        break;
    case WARDEN_REPLY_ERROR:
        warden_line_add(out, "ERROR");
        warden_line_add(out, reply->id);
        warden_line_add(out, reply->reason);
        break;
    case WARDEN_REPLY_SESSION:
        warden_line_add(out, "SESSION");
        warden_line_add(out, reply->id);
        warden_line_add(out, reply->session_id);
        warden_line_add(out, reply->user);
        warden_line_add(out, reply->ip);
        warden_line_add(out, reply->service);
        warden_line_add_uint(out, (uint64_t)reply->connected_at);
        break;
    case WARDEN_REPLY_ITEM:
        warden_line_add(out, "ITEM");
        warden_line_add(out, reply->id);
        warden_line_add(out, reply->key);
        warden_line_add_uint(out, reply->number);
        break;
    case WARDEN_REPLY_DONE:
    case WARDEN_REPLY_PENALTY:
        warden_line_add(out, reply->kind == WARDEN_REPLY_DONE ? "DONE" : "PENALTY");
        warden_line_add(out, reply->id);
        warden_line_add_uint(out, reply->number);
        break;
    }
    warden_line_end(out);
}
