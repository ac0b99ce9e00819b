/* libFuzzer target: the director's ring protocol (services/director/
 * ring-protocol.h) and what the director does with what it decodes
 * (director-state.h, director-users.h, ring-hash.h). The input is what a
 * client sent on a ring connection; it is cut at each LF the way the ring
 * server reads it, and every piece goes through:
 *   1. ring_line_split() with a small line limit and the default one, from
 *      an exact-size copy: a refusal carries a reason; a success gives
 *      1..RING_MAX_FIELDS fields inside the copy, each shorter than the line;
 *   2. ring_msg_decode(): a decoded message is written with ring_msg_write()
 *      as exactly one line without raw LF or CR, which decodes again to a
 *      message that writes the same bytes (the encoding is canonical);
 *   3. the director state, as the ring server and the admin API would apply
 *      it (lookups recording and read-only, sessions started and ended,
 *      monitor reports, peer RING-CHANGE/USER-MOVED/USER-KICKED, flush,
 *      expiry on a clock that moves with the input): outcomes are
 *      consistent (a backend for sticky/assigned, a reason for
 *      bad_request), session counts never go negative, the user table
 *      stays within its limit, and everything is freed at the end. */
#include "core/buf.h"
#include "services/director/director-state.h"
#include "services/director/ring-hash.h"
#include "services/director/ring-protocol.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SESSIONS 32
#define SMALL_LINE_MAX 64

struct harness {
    int64_t now_ms;
    struct director_state *st;
    struct director_session *sessions[MAX_SESSIONS];
    char sids[MAX_SESSIONS][RING_ID_MAX + 1];
    size_t session_count;
};

static int64_t clock_fn(void *ctx)
{
    return ((struct harness *)ctx)->now_ms;
}

static void check_roundtrip(const struct ring_msg *m)
{
    struct buf out = {0};
    ring_msg_write(&out, m);
    assert(out.len > 0 && out.data[out.len - 1] == '\n');
    assert(memchr(out.data, '\n', out.len - 1) == NULL);
    assert(memchr(out.data, '\r', out.len) == NULL);
    struct buf copy = {0};
    buf_append(&copy, out.data, out.len);
    struct ring_line f;
    struct ring_msg back;
    struct petrel_error err;
    bool ok = ring_msg_parse(copy.data, copy.len - 1, out.len, &f, &back, &err);
    if (!ok) {
        fprintf(stderr, "written line does not decode: %s\n", err.message);
        abort();
    }
    assert(back.type == m->type);
    struct buf again = {0};
    ring_msg_write(&again, &back);
    assert(again.len == out.len && memcmp(again.data, out.data, out.len) == 0);
    buf_free(&out);
    buf_free(&copy);
    buf_free(&again);
}

static void check_lookup(const struct director_lookup *res)
{
    switch (res->outcome) {
    case RING_OUTCOME_STICKY:
    case RING_OUTCOME_ASSIGNED:
    case RING_OUTCOME_KILLING:
        assert(res->backend != NULL);
        assert(res->backend->state == RING_STATE_UP);
        break;
    case RING_OUTCOME_BAD_REQUEST:
        assert(res->error != NULL);
        break;
    case RING_OUTCOME_NO_BACKENDS:
        assert(res->backend == NULL);
        break;
    }
}

static void session_end(struct harness *h, const char *sid)
{
    for (size_t i = 0; i < h->session_count; i++) {
        if (strcmp(h->sids[i], sid) == 0) {
            director_state_session_end(h->st, h->sessions[i]);
            h->session_count--;
            h->sessions[i] = h->sessions[h->session_count];
            memcpy(h->sids[i], h->sids[h->session_count], sizeof(h->sids[i]));
            return;
        }
    }
}

static void apply(struct harness *h, const struct ring_msg *m)
{
    struct petrel_error err;
    struct director_change from = {.local = false, .origin = "10.9.9.9:9102", .seq = 1};
    struct director_lookup res;
    switch (m->type) {
    case RING_MSG_LOOKUP:
        director_state_lookup(h->st, m->lookup.user, strlen(m->lookup.user), m->lookup.tag, true,
                              &res);
        check_lookup(&res);
        director_state_lookup(h->st, m->lookup.user, strlen(m->lookup.user), m->lookup.tag, false,
                              &res);
        check_lookup(&res);
        break;
    case RING_MSG_SESSION_START:
        if (h->session_count < MAX_SESSIONS) {
            struct director_session *s = director_state_session_start(
                h->st, m->session_start.user, m->session_start.ip, m->session_start.protocol, &err);
            if (s != NULL) {
                h->sessions[h->session_count] = s;
                snprintf(h->sids[h->session_count], sizeof(h->sids[0]), "%s", m->session_start.sid);
                h->session_count++;
            }
        }
        break;
    case RING_MSG_SESSION_END:
        session_end(h, m->session_end.sid);
        break;
    case RING_MSG_BACKEND_FLUSH:
        director_state_backend_set_state(h->st, m->backend_flush.ip, RING_STATE_FLUSH, NULL, &err);
        break;
    case RING_MSG_BACKEND_UP:
        director_state_backend_set_state(h->st, m->backend_up.ip, RING_STATE_UP, NULL, &err);
        break;
    case RING_MSG_HOST: {
        size_t flushed = 0;
        director_state_apply_ring_change(
            h->st, m->host.state == RING_STATE_UP ? RING_CHANGE_UP : RING_CHANGE_FLUSH, &m->host,
            &from, &err);
        if (m->host.vhosts % 7 == 3)
            director_state_backend_flush(h->st, m->host.ip, NULL, &flushed, &err);
        break;
    }
    case RING_MSG_RING_CHANGE:
        from.origin = m->ring_change.origin;
        from.seq = m->ring_change.seq;
        director_state_apply_ring_change(h->st, m->ring_change.change, &m->ring_change.host, &from,
                                         &err);
        break;
    case RING_MSG_USER_MOVED:
        from.origin = m->user_moved.origin;
        from.seq = m->user_moved.seq;
        director_state_user_move(h->st, m->user_moved.user, m->user_moved.ip, m->user_moved.port,
                                 &from, &err);
        break;
    case RING_MSG_USER_KICKED:
        director_state_user_kick(h->st, m->user_kicked.user, NULL, &err);
        break;
    case RING_MSG_PING:
        h->now_ms += 30000; /* time passes: mappings and kills expire */
        director_state_expire(h->st);
        break;
    default:
        break;
    }
    const struct director_backends *reg = director_state_backends(h->st);
    for (size_t i = 0; i < director_backends_count(reg); i++) {
        const struct director_backend *b = director_backends_at(reg, i);
        for (int p = 0; p < RING_PROTO_COUNT; p++)
            assert(b->sessions[p] <= MAX_SESSIONS);
    }
    assert(director_users_count(director_state_users(h->st)) <= 64);
}

static void one_line(struct harness *h, const uint8_t *text, size_t len)
{
    for (int pass = 0; pass < 2; pass++) {
        size_t limit = pass == 0 ? SMALL_LINE_MAX : RING_LINE_MAX_DEFAULT;
        char *copy = malloc(len + 1);
        if (len > 0)
            memcpy(copy, text, len);
        copy[len] = '\n';
        struct ring_line f;
        struct petrel_error err;
        memset(&err, 0, sizeof(err));
        if (!ring_line_split(copy, len, limit, &f, &err)) {
            assert(err.message[0] != '\0');
            free(copy);
            continue;
        }
        assert(f.count >= 1 && f.count <= RING_MAX_FIELDS);
        for (size_t i = 0; i < f.count; i++) {
            assert(f.fields[i] >= copy && f.fields[i] <= copy + len);
            assert(strlen(f.fields[i]) <= len);
        }
        struct ring_msg m;
        if (ring_msg_decode(&f, &m, &err)) {
            check_roundtrip(&m);
            if (pass == 1)
                apply(h, &m);
        } else {
            assert(err.message[0] != '\0');
            assert(err.code == PETREL_ERR_INVALID || err.code == PETREL_ERR_UNSUPPORTED);
        }
        free(copy);
    }
    h->now_ms += 100;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct harness h;
    memset(&h, 0, sizeof(h));
    h.now_ms = 1700000000000;
    struct director_state_config cfg = {.self = "10.0.0.100:9102",
                                        .user_expire_ms = 60000,
                                        .kill_timeout_ms = 2000,
                                        .max_users = 64,
                                        .max_backends = 16,
                                        .max_vhosts = 24,
                                        .max_username = 255,
                                        .max_tag = 64};
    h.st = director_state_new(&cfg, clock_fn, &h);
    director_state_backend_add(h.st, "10.0.0.1", 143, "", 12, NULL, NULL);
    director_state_backend_add(h.st, "10.0.0.2", 143, "blue", 6, NULL, NULL);
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i == size || data[i] == '\n') {
            if (i > start || i < size)
                one_line(&h, data + start, i - start);
            start = i + 1;
        }
    }
    char hash[65];
    director_state_backend_set_hash(h.st, hash);
    assert(strlen(hash) == 64);
    for (size_t i = 0; i < h.session_count; i++)
        director_state_session_end(h.st, h.sessions[i]);
    assert(director_state_session_count(h.st) == 0);
    director_state_free(h.st);
    return 0;
}
