/* libFuzzer target: the warden line protocol (clients/warden/warden-protocol.h)
 * and, behind it, the session registry and penalty table it drives.
 * The input is what peers sent on warden connections; it is cut at each LF
 * the way both sides read it, and every piece goes through:
 *   1. warden_line_parse() from an exact-size copy (plus the LF's place);
 *      a refusal carries a reason, a success gives 1..WARDEN_MAX_FIELDS
 *      fields inside the copy;
 *   2. re-encoding with warden_line_add(): one line without raw LF or CR
 *      that parses back to the same fields and encodes to the same bytes;
 *   3. warden_request_read(): an accepted request is written with
 *      warden_request_write() and read back to the same request; a refused
 *      one has a reason;
 *   4. warden_reply_read(): likewise with warden_reply_write();
 *   5. accepted requests run against a registry (at most 16 sessions) and a
 *      penalty table (at most 8 addresses) the way the warden runs them,
 *      from one of three simulated connections (the request id's first
 *      byte picks it; a HELLO replaces that connection's owner, which
 *      reaps like a closed connection). After each request the registry's
 *      invariants are checked: LIST visits exactly COUNT sessions in
 *      order, the per-protocol and per-user groups add up to the total,
 *      and the limits hold. */
#include "core/buf.h"
#include "services/warden/warden-penalty.h"
#include "clients/warden/warden-protocol.h"
#include "services/warden/warden-registry.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define OWNERS 3
#define MAX_SESSIONS 16
#define MAX_IPS 8

struct sim {
    struct warden_registry *reg;
    struct warden_penalty *pen;
    struct warden_owner *owners[OWNERS];
    int64_t now_ms;
};

static bool parse_copy(const char *text, size_t len, char **copy, struct warden_line *line,
                       struct petrel_error *err)
{
    *copy = malloc(len + 1);
    memcpy(*copy, text, len);
    (*copy)[len] = '\n';
    return warden_line_parse(*copy, len, WARDEN_LINE_MAX, line, err);
}

static void encode_fields(struct buf *out, const struct warden_line *line)
{
    for (size_t i = 0; i < line->count; i++)
        warden_line_add(out, line->fields[i]);
    warden_line_end(out);
}

static bool same(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return (a == NULL || a[0] == '\0') && (b == NULL || b[0] == '\0');
    return strcmp(a, b) == 0;
}

static void check_request_round_trip(const struct warden_request *req)
{
    struct buf b = {0};
    warden_request_write(&b, req);
    if (b.len - 1 <= WARDEN_LINE_MAX) {
        char *copy;
        struct warden_line line;
        struct petrel_error err;
        bool ok = parse_copy(b.data, b.len - 1, &copy, &line, &err);
        assert(ok);
        struct warden_request back;
        ok = warden_request_read(&line, &back, NULL, &err);
        assert(ok);
        assert(back.verb == req->verb && same(back.id, req->id));
        assert(back.major == req->major && back.connected_at == req->connected_at);
        assert(back.by == req->by);
        assert(same(back.instance, req->instance) && same(back.boot_id, req->boot_id));
        assert(same(back.session_id, req->session_id) && same(back.user, req->user));
        assert(same(back.ip, req->ip) && same(back.service, req->service));
        free(copy);
    }
    buf_free(&b);
}

static void check_reply_round_trip(const struct warden_reply *r)
{
    struct buf b = {0};
    warden_reply_write(&b, r);
    if (b.len - 1 <= WARDEN_LINE_MAX) {
        char *copy;
        struct warden_line line;
        struct petrel_error err;
        bool ok = parse_copy(b.data, b.len - 1, &copy, &line, &err);
        assert(ok);
        struct warden_reply back;
        ok = warden_reply_read(&line, &back, &err);
        assert(ok);
        assert(back.kind == r->kind && strcmp(back.id, r->id) == 0);
        /* OK writes no number for 0, and reads 0 back for none. */
        assert(back.number == r->number);
        assert(back.connected_at == r->connected_at);
        assert(same(back.reason, r->reason) && same(back.key, r->key));
        assert(same(back.session_id, r->session_id) && same(back.user, r->user));
        assert(same(back.ip, r->ip) && same(back.service, r->service));
        free(copy);
    }
    buf_free(&b);
}

/* ---------- the registry's invariants ---------- */

struct walk {
    size_t n;
    const char *last_user; /* copies: the visit must not rely on later calls */
    char last_user_buf[WARDEN_USER_MAX + 1];
    int64_t last_at;
    char last_id[WARDEN_SESSION_ID_MAX + 1];
    const char *service;
    const char *user;
};

static void visit(const struct warden_session_info *s, void *ctx)
{
    struct walk *w = ctx;
    assert(w->service == NULL || strcmp(s->service, w->service) == 0);
    assert(w->user == NULL || strcmp(s->user, w->user) == 0);
    assert(warden_service_valid(s->service) && warden_user_valid(s->user));
    if (w->last_user != NULL) {
        int c = strcmp(w->last_user, s->user);
        assert(c <= 0);
        if (c == 0) {
            assert(w->last_at <= s->connected_at);
            if (w->last_at == s->connected_at)
                assert(strcmp(w->last_id, s->id) < 0);
        }
    }
    snprintf(w->last_user_buf, sizeof(w->last_user_buf), "%s", s->user);
    w->last_user = w->last_user_buf;
    w->last_at = s->connected_at;
    snprintf(w->last_id, sizeof(w->last_id), "%s", s->id);
    w->n++;
}

static void add_up(const char *key, uint64_t count, void *ctx)
{
    assert(key[0] != '\0' && count > 0);
    *(uint64_t *)ctx += count;
}

static void check_registry(const struct warden_registry *reg, const char *service, const char *user)
{
    size_t sessions = warden_registry_sessions(reg);
    assert(sessions <= MAX_SESSIONS);
    struct walk w = {.service = service, .user = user};
    size_t listed = warden_registry_list(reg, service, user, visit, &w);
    assert(listed == w.n);
    uint64_t total = warden_registry_count(reg, WARDEN_BY_NONE, service, user, NULL, NULL);
    assert(total == listed);
    uint64_t sum = 0;
    assert(warden_registry_count(reg, WARDEN_BY_PROTOCOL, service, user, add_up, &sum) == total);
    assert(sum == total);
    sum = 0;
    assert(warden_registry_count(reg, WARDEN_BY_USER, service, user, add_up, &sum) == total);
    assert(sum == total);
    assert(warden_registry_count(reg, WARDEN_BY_NONE, NULL, NULL, NULL, NULL) == sessions);
}

/* ---------- running requests ---------- */

static void run(struct sim *sim, const struct warden_request *req)
{
    size_t slot = (unsigned char)req->id[0] % OWNERS;
    struct warden_owner **owner = &sim->owners[slot];
    struct petrel_error err;
    sim->now_ms += 250;
    switch (req->verb) {
    case WARDEN_HELLO: {
        warden_registry_detach(sim->reg, *owner); /* the old connection closed */
        size_t before = warden_registry_sessions(sim->reg);
        size_t reaped = 0;
        *owner = warden_registry_attach(sim->reg, req->instance, req->boot_id, &reaped);
        assert(warden_registry_sessions(sim->reg) + reaped == before);
        break;
    }
    case WARDEN_CONNECT:
        if (*owner != NULL) {
            struct warden_session_info s = {.id = req->session_id,
                                            .user = req->user,
                                            .ip = req->ip,
                                            .service = req->service,
                                            .connected_at = req->connected_at};
            if (!warden_registry_connect(sim->reg, *owner, &s, &err))
                assert(err.message[0] != '\0');
        }
        break;
    case WARDEN_DISCONNECT:
        (void)warden_registry_disconnect(sim->reg, req->session_id);
        break;
    case WARDEN_LIST:
    case WARDEN_COUNT:
        check_registry(sim->reg, req->service, req->user);
        break;
    case WARDEN_PENALTY_GET: {
        enum warden_penalty_lookup how;
        unsigned n = warden_penalty_get(sim->pen, req->ip, sim->now_ms, &how);
        assert((how == WARDEN_PENALTY_HIT) == (n > 0));
        break;
    }
    case WARDEN_PENALTY_INC: {
        unsigned n = warden_penalty_inc(sim->pen, req->ip, sim->now_ms);
        assert(n >= 1 && n <= WARDEN_PENALTY_MAX_FAILURES);
        assert(warden_penalty_get(sim->pen, req->ip, sim->now_ms, NULL) == n);
        break;
    }
    case WARDEN_VERB_COUNT:
        break;
    }
    assert(warden_penalty_entries(sim->pen) <= MAX_IPS);
    check_registry(sim->reg, NULL, NULL);
}

static void check_line(struct sim *sim, const char *text, size_t len)
{
    char *copy;
    struct warden_line line;
    struct petrel_error err = {0};
    if (!parse_copy(text, len, &copy, &line, &err)) {
        assert(err.code == PETREL_ERR_INVALID && err.message[0] != '\0');
        free(copy);
        return;
    }
    assert(len > 0 && len <= WARDEN_LINE_MAX);
    assert(line.count >= 1 && line.count <= WARDEN_MAX_FIELDS);
    for (size_t i = 0; i < line.count; i++) {
        assert(line.fields[i] >= copy && line.fields[i] <= copy + len);
        assert(line.fields[i] + strlen(line.fields[i]) <= copy + len);
    }

    if (line.fields[0][0] != '\0') {
        struct buf enc = {0};
        encode_fields(&enc, &line);
        assert(memchr(enc.data, '\n', enc.len - 1) == NULL);
        assert(memchr(enc.data, '\r', enc.len) == NULL);
        if (enc.len - 1 <= WARDEN_LINE_MAX) {
            char *copy2;
            struct warden_line line2;
            bool ok = parse_copy(enc.data, enc.len - 1, &copy2, &line2, &err);
            assert(ok && line2.count == line.count);
            for (size_t i = 0; i < line.count; i++)
                assert(strcmp(line.fields[i], line2.fields[i]) == 0);
            struct buf enc2 = {0};
            encode_fields(&enc2, &line2);
            assert(enc2.len == enc.len && memcmp(enc2.data, enc.data, enc.len) == 0);
            buf_free(&enc2);
            free(copy2);
        }
        buf_free(&enc);
    }

    struct warden_request req;
    const char *id = NULL;
    if (warden_request_read(&line, &req, &id, &err)) {
        assert(id == req.id && warden_request_id_valid(id));
        check_request_round_trip(&req);
        run(sim, &req);
    } else {
        assert(err.message[0] != '\0');
    }
    struct warden_reply reply;
    if (warden_reply_read(&line, &reply, &err))
        check_reply_round_trip(&reply);
    else
        assert(err.message[0] != '\0');
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct warden_penalty_config pcfg = {.decay_ms = 1000, .max_ips = MAX_IPS};
    struct sim sim = {.reg = warden_registry_new(MAX_SESSIONS), .pen = warden_penalty_new(&pcfg)};
    const char *p = (const char *)data;
    size_t left = size;
    while (left > 0) {
        const char *lf = memchr(p, '\n', left);
        size_t len = lf != NULL ? (size_t)(lf - p) : left;
        check_line(&sim, p, len);
        if (lf == NULL)
            break;
        p = lf + 1;
        left -= len + 1;
    }
    for (size_t i = 0; i < OWNERS; i++)
        warden_registry_detach(sim.reg, sim.owners[i]);
    assert(warden_registry_sessions(sim.reg) == 0);
    warden_registry_free(sim.reg);
    warden_penalty_free(sim.pen);
    return 0;
}
