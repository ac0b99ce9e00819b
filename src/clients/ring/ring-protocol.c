/* The ring protocol's codec (docs/ring-protocol.md): splitting and
 * unescaping a line in place, decoding the fields into a typed message with
 * every value checked, and writing a message back as one escaped line.
 *
 * The decoder is the only place that looks at raw client bytes, so it is
 * strict: numbers are plain decimal digits within their range, addresses are
 * real IP literals, ids and names have bounded lengths. The writer escapes
 * every field, so whatever a message holds, the line it writes splits back
 * into the same fields. */
#include "clients/ring/ring-protocol.h"

#include "core/slice.h"
#include "net/line-fields.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- splitting ---------- */

bool ring_line_split(char *line, size_t len, size_t line_max, struct ring_line *out,
                     struct petrel_error *err)
{
    /* The framing is the one every Petrel line protocol shares. */
    const struct line_fields_limits limits = {
        .max_len = line_max, .max_fields = RING_MAX_FIELDS, .name_escaped_nul = false};
    out->count = 0;
    return line_fields_split(line, len, &limits, out->fields, &out->count, err);
}

/* ---------- names ---------- */

static const char *const kind_names[] = {"login", "monitor", "director"};
static const char *const state_names[] = {"up", "flush"};
static const char *const change_names[] = {"up", "flush", "down"};
static const char *const outcome_names[] = {"sticky", "assigned", "killing", "no_backends",
                                            "bad_request"};
static const char *const proto_names[] = {"imap", "imaps", "pop3", "pop3s", "lmtp"};
static const char *const verbs[] = {
    "VERSION",       "HELLO",       "HOST",          "DONE",       "RING-CHANGE",
    "USER-MOVED",    "USER-KICKED", "LOOKUP",        "LOOKUP-OK",  "LOOKUP-FAIL",
    "SESSION-START", "SESSION-END", "BACKEND-FLUSH", "BACKEND-UP", "PING",
    "PONG",          "ERROR",       "USER",          "AUTH",       "AUTH-OK",
};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static int name_index(const char *const *names, size_t count, const char *s)
{
    for (size_t i = 0; i < count; i++) {
        if (strcmp(names[i], s) == 0)
            return (int)i;
    }
    return -1;
}

static const char *name_at(const char *const *names, size_t count, unsigned i)
{
    return i < count ? names[i] : "?";
}

const char *ring_kind_name(enum ring_kind kind)
{
    return name_at(kind_names, COUNT_OF(kind_names), kind);
}

bool ring_kind_parse(const char *s, enum ring_kind *out)
{
    int i = name_index(kind_names, COUNT_OF(kind_names), s);
    if (i >= 0)
        *out = (enum ring_kind)i;
    return i >= 0;
}

const char *ring_state_name(enum ring_backend_state state)
{
    return name_at(state_names, COUNT_OF(state_names), state);
}

bool ring_state_parse(const char *s, enum ring_backend_state *out)
{
    int i = name_index(state_names, COUNT_OF(state_names), s);
    if (i >= 0)
        *out = (enum ring_backend_state)i;
    return i >= 0;
}

const char *ring_change_name(enum ring_change change)
{
    return name_at(change_names, COUNT_OF(change_names), change);
}

bool ring_change_parse(const char *s, enum ring_change *out)
{
    int i = name_index(change_names, COUNT_OF(change_names), s);
    if (i >= 0)
        *out = (enum ring_change)i;
    return i >= 0;
}

const char *ring_outcome_name(enum ring_outcome outcome)
{
    return name_at(outcome_names, COUNT_OF(outcome_names), outcome);
}

bool ring_outcome_parse(const char *s, enum ring_outcome *out)
{
    int i = name_index(outcome_names, COUNT_OF(outcome_names), s);
    if (i >= 0)
        *out = (enum ring_outcome)i;
    return i >= 0;
}

const char *ring_protocol_name(enum ring_session_protocol proto)
{
    return name_at(proto_names, COUNT_OF(proto_names), proto);
}

bool ring_protocol_parse(const char *s, enum ring_session_protocol *out)
{
    int i = name_index(proto_names, COUNT_OF(proto_names), s);
    if (i >= 0)
        *out = (enum ring_session_protocol)i;
    return i >= 0;
}

const char *ring_msg_verb(enum ring_msg_type type)
{
    return name_at(verbs, COUNT_OF(verbs), type);
}

/* ---------- field checks ---------- */

bool ring_id_valid(const char *id)
{
    size_t n = 0;
    for (const char *p = id; *p != '\0'; p++, n++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        if (!ok || n == RING_ID_MAX)
            return false;
    }
    return n > 0;
}

bool ring_ip_valid(const char *ip)
{
    unsigned char addr[sizeof(struct in6_addr)];
    if (strchr(ip, ':') != NULL)
        return inet_pton(AF_INET6, ip, addr) == 1;
    return inet_pton(AF_INET, ip, addr) == 1;
}

bool ring_auth_hex_valid(const char *s)
{
    size_t n = 0;
    for (; s[n] != '\0'; n++) {
        bool hex = (s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f');
        if (!hex || n == RING_AUTH_HEX_LEN)
            return false;
    }
    return n == RING_AUTH_HEX_LEN;
}

/* "<ip>:<port>" or "[<ip6>]:<port>". */
static bool addr_valid(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > 64)
        return false;
    const char *colon = strrchr(s, ':');
    if (colon == NULL)
        return false;
    uint64_t port;
    if (!str_parse_u64(colon + 1, 65535, &port) || port == 0)
        return false;
    char ip[64];
    size_t ip_len = (size_t)(colon - s);
    if (s[0] == '[') {
        if (ip_len < 3 || s[ip_len - 1] != ']')
            return false;
        memcpy(ip, s + 1, ip_len - 2);
        ip[ip_len - 2] = '\0';
        return strchr(ip, ':') != NULL && ring_ip_valid(ip);
    }
    memcpy(ip, s, ip_len);
    ip[ip_len] = '\0';
    return strchr(ip, ':') == NULL && ring_ip_valid(ip);
}

/* The decoder's state: the fields and where the error goes. */
struct decoder {
    const struct ring_line *line;
    const char *verb;
    struct petrel_error *err;
};

static bool bad(struct decoder *d, const char *what, size_t index)
{
    return petrel_error_set(d->err, PETREL_ERR_INVALID, "%s: bad %s in field %zu", d->verb, what,
                            index);
}

/* Positional fields 1..n-1 must exist; more are parameters. */
static bool need_fields(struct decoder *d, size_t n)
{
    if (d->line->count < n)
        return petrel_error_set(d->err, PETREL_ERR_INVALID, "%s: %zu fields, %zu expected", d->verb,
                                d->line->count - 1, n - 1);
    return true;
}

/* Exactly n fields (messages without parameters). */
static bool exact_fields(struct decoder *d, size_t n)
{
    if (d->line->count != n)
        return petrel_error_set(d->err, PETREL_ERR_INVALID, "%s: %zu fields, %zu expected", d->verb,
                                d->line->count - 1, n - 1);
    return true;
}

static bool get_name(struct decoder *d, size_t i, bool allow_empty, const char *what,
                     const char **out)
{
    const char *s = d->line->fields[i];
    size_t len = strlen(s);
    if ((!allow_empty && len == 0) || len > RING_NAME_MAX)
        return bad(d, what, i);
    *out = s;
    return true;
}

static bool get_ip(struct decoder *d, size_t i, const char **out)
{
    if (!ring_ip_valid(d->line->fields[i]))
        return bad(d, "ip", i);
    *out = d->line->fields[i];
    return true;
}

static bool get_port(struct decoder *d, size_t i, unsigned *out)
{
    uint64_t v;
    if (!str_parse_u64(d->line->fields[i], 65535, &v) || v == 0)
        return bad(d, "port", i);
    *out = (unsigned)v;
    return true;
}

static bool get_u32(struct decoder *d, size_t i, const char *what, uint32_t min, uint32_t *out)
{
    uint64_t v;
    if (!str_parse_u64(d->line->fields[i], UINT32_MAX, &v) || v < min)
        return bad(d, what, i);
    *out = (uint32_t)v;
    return true;
}

static bool get_time(struct decoder *d, size_t i, int64_t *out)
{
    uint64_t v;
    if (!str_parse_u64(d->line->fields[i], INT64_MAX, &v))
        return bad(d, "timestamp", i);
    *out = (int64_t)v;
    return true;
}

static bool get_id(struct decoder *d, size_t i, const char **out)
{
    if (!ring_id_valid(d->line->fields[i]))
        return bad(d, "id", i);
    *out = d->line->fields[i];
    return true;
}

static bool get_origin(struct decoder *d, size_t io, size_t is, const char **origin, uint64_t *seq)
{
    if (!addr_valid(d->line->fields[io]))
        return bad(d, "origin", io);
    *origin = d->line->fields[io];
    if (!str_parse_u64(d->line->fields[is], UINT64_MAX, seq) || *seq == 0)
        return bad(d, "sequence number", is);
    return true;
}

/* The value of parameter `key` among fields[first..], or NULL. */
static const char *param(const struct decoder *d, size_t first, const char *key)
{
    size_t key_len = strlen(key);
    for (size_t i = first; i < d->line->count; i++) {
        const char *f = d->line->fields[i];
        if (strncmp(f, key, key_len) == 0 && f[key_len] == '=')
            return f + key_len + 1;
    }
    return NULL;
}

/* HOST and the host part of RING-CHANGE, starting at field `i`. */
static bool get_host(struct decoder *d, size_t i, struct ring_host *h)
{
    return get_ip(d, i, &h->ip) && get_port(d, i + 1, &h->port) &&
           get_name(d, i + 2, true, "tag", &h->tag) && get_u32(d, i + 3, "vhosts", 0, &h->vhosts);
}

/* ---------- decoding, one function per verb ---------- */

static bool decode_version(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 4))
        return false;
    if (strcmp(d->line->fields[1], RING_PROTOCOL_NAME) != 0)
        return petrel_error_set(d->err, PETREL_ERR_INVALID, "VERSION: not %s", RING_PROTOCOL_NAME);
    uint32_t major = 0, minor = 0;
    if (!get_u32(d, 2, "major version", 0, &major) || !get_u32(d, 3, "minor version", 0, &minor))
        return false;
    m->version.major = major;
    m->version.minor = minor;
    m->version.auth = param(d, 4, "auth");
    m->version.nonce = param(d, 4, "nonce");
    if (m->version.auth != NULL &&
        (m->version.auth[0] == '\0' || strlen(m->version.auth) > RING_NAME_MAX))
        return bad(d, "auth mechanism", 4);
    if (m->version.nonce != NULL && !ring_auth_hex_valid(m->version.nonce))
        return bad(d, "nonce", 4);
    return true;
}

static bool decode_auth(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 4) || !get_name(d, 1, false, "auth mechanism", &m->auth.mech))
        return false;
    if (!ring_auth_hex_valid(d->line->fields[2]))
        return bad(d, "nonce", 2);
    if (!ring_auth_hex_valid(d->line->fields[3]))
        return bad(d, "proof", 3);
    m->auth.nonce = d->line->fields[2];
    m->auth.proof = d->line->fields[3];
    return true;
}

static bool decode_auth_ok(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 2))
        return false;
    if (!ring_auth_hex_valid(d->line->fields[1]))
        return bad(d, "proof", 1);
    m->auth_ok.proof = d->line->fields[1];
    return true;
}

static bool decode_hello(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 3))
        return false;
    if (!ring_kind_parse(d->line->fields[1], &m->hello.kind))
        return bad(d, "client kind", 1);
    return get_name(d, 2, false, "name", &m->hello.name);
}

static bool decode_host(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 7) || !get_host(d, 1, &m->host))
        return false;
    if (!ring_state_parse(d->line->fields[5], &m->host.state))
        return bad(d, "state", 5);
    return get_time(d, 6, &m->host.last_updown_change);
}

static bool decode_ring_change(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 9))
        return false;
    if (!ring_change_parse(d->line->fields[1], &m->ring_change.change))
        return bad(d, "change", 1);
    if (!get_host(d, 2, &m->ring_change.host) ||
        !get_time(d, 6, &m->ring_change.host.last_updown_change))
        return false;
    m->ring_change.host.state =
        m->ring_change.change == RING_CHANGE_UP ? RING_STATE_UP : RING_STATE_FLUSH;
    return get_origin(d, 7, 8, &m->ring_change.origin, &m->ring_change.seq);
}

static bool decode_user_moved(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 7))
        return false;
    return get_name(d, 1, false, "user", &m->user_moved.user) &&
           get_u32(d, 2, "hash", 1, &m->user_moved.hash) && get_ip(d, 3, &m->user_moved.ip) &&
           get_port(d, 4, &m->user_moved.port) &&
           get_origin(d, 5, 6, &m->user_moved.origin, &m->user_moved.seq);
}

static bool decode_user(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 6))
        return false;
    const char *weak = d->line->fields[5];
    if (!get_u32(d, 1, "hash", 1, &m->user.hash) || !get_ip(d, 2, &m->user.ip) ||
        !get_port(d, 3, &m->user.port) || !get_time(d, 4, &m->user.expires_at))
        return false;
    if (strcmp(weak, "0") != 0 && strcmp(weak, "1") != 0)
        return bad(d, "weak flag", 5);
    m->user.weak = weak[0] == '1';
    return true;
}

static bool decode_user_kicked(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 5))
        return false;
    return get_name(d, 1, false, "user", &m->user_kicked.user) &&
           get_u32(d, 2, "hash", 1, &m->user_kicked.hash) &&
           get_origin(d, 3, 4, &m->user_kicked.origin, &m->user_kicked.seq);
}

static bool decode_lookup(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 3) || !get_id(d, 1, &m->lookup.id) ||
        !get_name(d, 2, false, "user", &m->lookup.user))
        return false;
    const char *tag = param(d, 3, "tag");
    if (tag != NULL && strlen(tag) > RING_NAME_MAX)
        return bad(d, "tag", 3);
    m->lookup.tag = tag != NULL ? tag : "";
    return true;
}

static bool decode_lookup_ok(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 6) || !get_id(d, 1, &m->lookup_ok.id) || !get_ip(d, 2, &m->lookup_ok.ip) ||
        !get_port(d, 3, &m->lookup_ok.port) || !get_name(d, 4, true, "tag", &m->lookup_ok.tag))
        return false;
    enum ring_outcome o;
    if (!ring_outcome_parse(d->line->fields[5], &o) ||
        (o != RING_OUTCOME_STICKY && o != RING_OUTCOME_ASSIGNED))
        return bad(d, "outcome", 5);
    m->lookup_ok.outcome = o;
    return true;
}

static bool decode_lookup_fail(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 3) || !get_id(d, 1, &m->lookup_fail.id))
        return false;
    enum ring_outcome o;
    if (!ring_outcome_parse(d->line->fields[2], &o) || o == RING_OUTCOME_STICKY ||
        o == RING_OUTCOME_ASSIGNED)
        return bad(d, "outcome", 2);
    m->lookup_fail.outcome = o;
    m->lookup_fail.retry_ms = 0;
    const char *retry = param(d, 3, "retry_ms");
    uint64_t v = 0;
    if (retry != NULL && !str_parse_u64(retry, UINT32_MAX, &v))
        return bad(d, "retry_ms", 3);
    m->lookup_fail.retry_ms = (uint32_t)v;
    m->lookup_fail.error = param(d, 3, "error");
    return true;
}

static bool decode_session_start(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 5) || !get_id(d, 1, &m->session_start.sid) ||
        !get_name(d, 2, false, "user", &m->session_start.user) ||
        !get_ip(d, 3, &m->session_start.ip))
        return false;
    if (!ring_protocol_parse(d->line->fields[4], &m->session_start.protocol))
        return bad(d, "protocol", 4);
    return true;
}

static bool decode_backend_flush(struct decoder *d, struct ring_msg *m)
{
    if (!need_fields(d, 2) || !get_ip(d, 1, &m->backend_flush.ip))
        return false;
    m->backend_flush.reason = param(d, 2, "reason");
    return true;
}

static bool decode_ping(struct decoder *d, struct ring_msg *m)
{
    if (d->line->count > 2)
        return exact_fields(d, 2);
    m->ping.token = d->line->count == 2 ? d->line->fields[1] : NULL;
    return true;
}

bool ring_msg_decode(const struct ring_line *line, struct ring_msg *out, struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    if (line->count == 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "empty line");
    int type = name_index(verbs, COUNT_OF(verbs), line->fields[0]);
    if (type < 0)
        return petrel_error_set(err, PETREL_ERR_UNSUPPORTED, "unknown command: %.64s",
                                line->fields[0]);
    struct decoder d = {.line = line, .verb = verbs[type], .err = err};
    out->type = (enum ring_msg_type)type;
    switch (out->type) {
    case RING_MSG_VERSION:
        return decode_version(&d, out);
    case RING_MSG_HELLO:
        return decode_hello(&d, out);
    case RING_MSG_HOST:
        return decode_host(&d, out);
    case RING_MSG_DONE:
        return need_fields(&d, 1);
    case RING_MSG_RING_CHANGE:
        return decode_ring_change(&d, out);
    case RING_MSG_USER_MOVED:
        return decode_user_moved(&d, out);
    case RING_MSG_USER_KICKED:
        return decode_user_kicked(&d, out);
    case RING_MSG_LOOKUP:
        return decode_lookup(&d, out);
    case RING_MSG_LOOKUP_OK:
        return decode_lookup_ok(&d, out);
    case RING_MSG_LOOKUP_FAIL:
        return decode_lookup_fail(&d, out);
    case RING_MSG_SESSION_START:
        return decode_session_start(&d, out);
    case RING_MSG_SESSION_END:
        return need_fields(&d, 2) && get_id(&d, 1, &out->session_end.sid);
    case RING_MSG_BACKEND_FLUSH:
        return decode_backend_flush(&d, out);
    case RING_MSG_BACKEND_UP:
        return need_fields(&d, 2) && get_ip(&d, 1, &out->backend_up.ip);
    case RING_MSG_PING:
    case RING_MSG_PONG:
        return decode_ping(&d, out);
    case RING_MSG_ERROR:
        if (!need_fields(&d, 2))
            return false;
        out->error.text = line->fields[1];
        return true;
    case RING_MSG_USER:
        return decode_user(&d, out);
    case RING_MSG_AUTH:
        return decode_auth(&d, out);
    case RING_MSG_AUTH_OK:
        return decode_auth_ok(&d, out);
    }
    return petrel_error_set(err, PETREL_ERR_INVALID, "unknown command");
}

bool ring_msg_parse(char *line, size_t len, size_t line_max, struct ring_line *fields,
                    struct ring_msg *out, struct petrel_error *err)
{
    return ring_line_split(line, len, line_max, fields, err) && ring_msg_decode(fields, out, err);
}

/* ---------- writing ---------- */

static void add_host(struct buf *out, const struct ring_host *h)
{
    line_fields_add(out, h->ip);
    line_fields_add_uint(out, h->port);
    line_fields_add(out, h->tag);
    line_fields_add_uint(out, h->vhosts);
}

void ring_msg_write(struct buf *out, const struct ring_msg *m)
{
    buf_append_str(out, ring_msg_verb(m->type));
    switch (m->type) {
    case RING_MSG_VERSION:
        line_fields_add(out, RING_PROTOCOL_NAME);
        line_fields_add_uint(out, m->version.major);
        line_fields_add_uint(out, m->version.minor);
        if (m->version.auth != NULL)
            line_fields_add_param(out, "auth", m->version.auth);
        if (m->version.nonce != NULL)
            line_fields_add_param(out, "nonce", m->version.nonce);
        break;
    case RING_MSG_HELLO:
        line_fields_add(out, ring_kind_name(m->hello.kind));
        line_fields_add(out, m->hello.name);
        break;
    case RING_MSG_HOST:
        add_host(out, &m->host);
        line_fields_add(out, ring_state_name(m->host.state));
        line_fields_add_uint(out, (uint64_t)m->host.last_updown_change);
        break;
    case RING_MSG_DONE:
        break;
    case RING_MSG_RING_CHANGE:
        line_fields_add(out, ring_change_name(m->ring_change.change));
        add_host(out, &m->ring_change.host);
        line_fields_add_uint(out, (uint64_t)m->ring_change.host.last_updown_change);
        line_fields_add(out, m->ring_change.origin);
        line_fields_add_uint(out, m->ring_change.seq);
        break;
    case RING_MSG_USER_MOVED:
        line_fields_add(out, m->user_moved.user);
        line_fields_add_uint(out, m->user_moved.hash);
        line_fields_add(out, m->user_moved.ip);
        line_fields_add_uint(out, m->user_moved.port);
        line_fields_add(out, m->user_moved.origin);
        line_fields_add_uint(out, m->user_moved.seq);
        break;
    case RING_MSG_USER_KICKED:
        line_fields_add(out, m->user_kicked.user);
        line_fields_add_uint(out, m->user_kicked.hash);
        line_fields_add(out, m->user_kicked.origin);
        line_fields_add_uint(out, m->user_kicked.seq);
        break;
    case RING_MSG_LOOKUP:
        line_fields_add(out, m->lookup.id);
        line_fields_add(out, m->lookup.user);
        if (m->lookup.tag != NULL && m->lookup.tag[0] != '\0')
            line_fields_add_param(out, "tag", m->lookup.tag);
        break;
    case RING_MSG_LOOKUP_OK:
        line_fields_add(out, m->lookup_ok.id);
        line_fields_add(out, m->lookup_ok.ip);
        line_fields_add_uint(out, m->lookup_ok.port);
        line_fields_add(out, m->lookup_ok.tag);
        line_fields_add(out, ring_outcome_name(m->lookup_ok.outcome));
        break;
    case RING_MSG_LOOKUP_FAIL:
        line_fields_add(out, m->lookup_fail.id);
        line_fields_add(out, ring_outcome_name(m->lookup_fail.outcome));
        if (m->lookup_fail.retry_ms > 0)
            buf_printf(out, "\tretry_ms=%u", (unsigned)m->lookup_fail.retry_ms);
        if (m->lookup_fail.error != NULL)
            line_fields_add_param(out, "error", m->lookup_fail.error);
        break;
    case RING_MSG_SESSION_START:
        line_fields_add(out, m->session_start.sid);
        line_fields_add(out, m->session_start.user);
        line_fields_add(out, m->session_start.ip);
        line_fields_add(out, ring_protocol_name(m->session_start.protocol));
        break;
    case RING_MSG_SESSION_END:
        line_fields_add(out, m->session_end.sid);
        break;
    case RING_MSG_BACKEND_FLUSH:
        line_fields_add(out, m->backend_flush.ip);
        if (m->backend_flush.reason != NULL)
            line_fields_add_param(out, "reason", m->backend_flush.reason);
        break;
    case RING_MSG_BACKEND_UP:
        line_fields_add(out, m->backend_up.ip);
        break;
    case RING_MSG_PING:
    case RING_MSG_PONG:
        if (m->ping.token != NULL)
            line_fields_add(out, m->ping.token);
        break;
    case RING_MSG_ERROR:
        line_fields_add(out, m->error.text != NULL ? m->error.text : "");
        break;
    case RING_MSG_USER:
        line_fields_add_uint(out, m->user.hash);
        line_fields_add(out, m->user.ip);
        line_fields_add_uint(out, m->user.port);
        line_fields_add_uint(out, (uint64_t)(m->user.expires_at > 0 ? m->user.expires_at : 0));
        line_fields_add(out, m->user.weak ? "1" : "0");
        break;
    case RING_MSG_AUTH:
        line_fields_add(out, m->auth.mech);
        line_fields_add(out, m->auth.nonce);
        line_fields_add(out, m->auth.proof);
        break;
    case RING_MSG_AUTH_OK:
        line_fields_add(out, m->auth_ok.proof);
        break;
    }
    buf_append_char(out, '\n');
}

struct ring_msg ring_msg_pong(const struct ring_msg *ping)
{
    struct ring_msg pong = {.type = RING_MSG_PONG};
    pong.ping.token = ping->ping.token;
    return pong;
}

void ring_write_version(struct buf *out)
{
    struct ring_msg m = {.type = RING_MSG_VERSION};
    m.version.major = RING_VERSION_MAJOR;
    m.version.minor = RING_VERSION_MINOR;
    ring_msg_write(out, &m);
}

void ring_write_hello(struct buf *out, enum ring_kind kind, const char *name)
{
    struct ring_msg m = {.type = RING_MSG_HELLO};
    m.hello.kind = kind;
    m.hello.name = name;
    ring_msg_write(out, &m);
}
