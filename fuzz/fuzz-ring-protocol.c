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
 *      monitor reports, peer RING-CHANGE/USER-MOVED/USER-KICKED through
 *      peer sync's receive path (per-origin watermarks: a change is applied
 *      once), HOST merged by last-writer-wins and USER lines merged as a
 *      joining director would, flush, expiry on a clock that moves with the
 *      input; AUTH and AUTH-OK checked against a fixed secret and nonce, the
 *      constant-time check agreeing with a plain comparison of the expected
 *      proof): outcomes are
 *      consistent (a backend for sticky/assigned, a reason for
 *      bad_request), session counts never go negative, the user table
 *      stays within its limit, and everything is freed at the end. */
#include "core/buf.h"
#include "services/director/director-config.h"
#include "services/director/director-peers.h"
#include "services/director/director-state.h"
#include "services/director/director-sync.h"
#include "clients/ring/ring-auth.h"
#include "services/director/ring-hash.h"
#include "clients/ring/ring-protocol.h"

#include <assert.h>
#include <event2/event.h>
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
    struct director_sync *sync;
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
        const struct director_backend *known =
            director_backends_find(director_state_backends(h->st), m->host.ip);
        if (known != NULL) { /* the merge order is antisymmetric */
            struct ring_host mine = {.ip = known->ip,
                                     .port = known->port,
                                     .tag = known->tag,
                                     .vhosts = known->vhosts,
                                     .state = known->state,
                                     .last_updown_change = known->last_updown_change};
            assert(director_sync_host_cmp(&m->host, &mine) ==
                   -director_sync_host_cmp(&mine, &m->host));
        }
        director_state_apply_ring_change(
            h->st, m->host.state == RING_STATE_UP ? RING_CHANGE_UP : RING_CHANGE_FLUSH, &m->host,
            &from, &err);
        if (m->host.vhosts % 7 == 3)
            director_state_backend_flush(h->st, m->host.ip, NULL, &flushed, &err);
        break;
    }
    case RING_MSG_RING_CHANGE:
    case RING_MSG_USER_MOVED:
    case RING_MSG_USER_KICKED: {
        const char *origin = m->type == RING_MSG_RING_CHANGE  ? m->ring_change.origin
                             : m->type == RING_MSG_USER_MOVED ? m->user_moved.origin
                                                              : m->user_kicked.origin;
        uint64_t seq = m->type == RING_MSG_RING_CHANGE  ? m->ring_change.seq
                       : m->type == RING_MSG_USER_MOVED ? m->user_moved.seq
                                                        : m->user_kicked.seq;
        uint64_t before = director_sync_watermark(h->sync, origin);
        bool ok = director_sync_receive(h->sync, "10.9.9.9:9102", m, &err);
        uint64_t after = director_sync_watermark(h->sync, origin);
        assert(after >= before); /* a watermark never goes back */
        if (strcmp(origin, director_state_self(h->st)) == 0)
            assert(after == 0 && ok); /* our own change: ignored */
        else if (ok || err.code != PETREL_ERR_UNAVAILABLE)
            assert(after == (seq > before ? seq : before));
        break;
    }
    case RING_MSG_USER: {
        int64_t now = director_state_now_ms(h->st);
        bool ok = director_state_user_merge(h->st, m->user.hash, m->user.ip, m->user.port,
                                            m->user.expires_at);
        const struct director_backend *b =
            director_backends_find(director_state_backends(h->st), m->user.ip);
        if (b == NULL || b->port != m->user.port)
            assert(!ok);
        const struct director_user *u =
            director_users_find(director_state_users(h->st), m->user.hash);
        if (ok && u != NULL && u->backend != NULL && !director_user_expired(u, now))
            assert(u->backend->state == RING_STATE_UP || u->backend->state == RING_STATE_FLUSH);
        break;
    }
    case RING_MSG_VERSION:
        assert(m->version.nonce == NULL || ring_auth_hex_valid(m->version.nonce));
        break;
    case RING_MSG_AUTH:
    case RING_MSG_AUTH_OK: {
        static const char secret[] = "fuzz-ring-secret-0123456789";
        static const char fixed[] =
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        bool client = m->type == RING_MSG_AUTH;
        const char *cn = client ? m->auth.nonce : fixed;
        const char *proof = client ? m->auth.proof : m->auth_ok.proof;
        enum ring_auth_role role = client ? RING_AUTH_CLIENT : RING_AUTH_SERVER;
        char want[RING_AUTH_HEX_LEN + 1];
        ring_auth_proof(secret, sizeof(secret) - 1, role, fixed, cn, want);
        assert(ring_auth_check(secret, sizeof(secret) - 1, role, fixed, cn, proof) ==
               (strcmp(want, proof) == 0));
        assert(ring_auth_check(secret, sizeof(secret) - 1, role, fixed, cn, want));
        break;
    }
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
    /* Peer sync without peers: its receive path (watermarks) only; no
     * link is dialled, the event base never runs. */
    struct event_base *base = event_base_new();
    struct director_config dcfg;
    director_config_defaults(&dcfg);
    struct director_peers *peers = director_peers_new(cfg.self, 4);
    h.sync = director_sync_new(base, h.st, peers, &dcfg, NULL);
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
    director_sync_free(h.sync);
    director_peers_free(peers);
    director_config_free(&dcfg);
    event_base_free(base);
    director_state_free(h.st);
    return 0;
}
