/* The director state (director-state.h): applies changes to the backend
 * registry and the user table, keeps the hash ring in step with the
 * registry, tracks reported sessions, and tells observers what changed. */
#include "services/director/director-state.h"

#include "core/clock.h"
#include "core/dlist.h"
#include "core/xalloc.h"
#include "services/director/ring-hash.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_OBSERVERS 8
#define KILLING_RETRY_MAX_MS 500

struct director_session {
    struct director_user *user;
    struct director_backend *backend; /* NULL once the backend is removed */
    enum ring_session_protocol proto;
    struct director_session *prev, *next;           /* every session */
    struct director_session *user_prev, *user_next; /* the user's sessions */
};

struct director_state {
    struct director_state_config cfg;
    char *self;
    director_clock_fn clock;
    void *clock_ctx;
    struct director_backends *backends;
    struct director_users *users;
    struct ring_hash *ring;
    struct ring_hasher *hasher;
    struct director_session *sessions;
    size_t session_count;
    uint64_t local_seq;
    uint64_t seq_base;
    const struct director_observer *observers[MAX_OBSERVERS];
    size_t observer_count;
};

static int64_t real_clock(void *ctx)
{
    (void)ctx;
    return clock_real_ms();
}

struct director_state *director_state_new(const struct director_state_config *cfg,
                                          director_clock_fn clock, void *clock_ctx)
{
    struct director_state *st = xcalloc(1, sizeof(*st));
    st->cfg = *cfg;
    st->self = xstrdup(cfg->self != NULL ? cfg->self : "");
    st->cfg.self = st->self;
    st->clock = clock != NULL ? clock : real_clock;
    st->clock_ctx = clock_ctx;
    st->backends = director_backends_new(cfg->max_backends);
    st->users = director_users_new(cfg->user_expire_ms, cfg->max_users);
    st->ring = ring_hash_new();
    st->hasher = ring_hasher_new();
    return st;
}

void director_state_free(struct director_state *st)
{
    if (st == NULL)
        return;
    while (st->sessions != NULL) {
        struct director_session *s = st->sessions;
        st->sessions = s->next;
        free(s);
    }
    ring_hash_free(st->ring);
    ring_hasher_free(st->hasher);
    director_users_free(st->users);
    director_backends_free(st->backends);
    free(st->self);
    free(st);
}

void director_state_subscribe(struct director_state *st, const struct director_observer *obs)
{
    PETREL_ASSERT(st->observer_count < MAX_OBSERVERS);
    st->observers[st->observer_count++] = obs;
}

void director_state_unsubscribe(struct director_state *st, const struct director_observer *obs)
{
    for (size_t i = 0; i < st->observer_count; i++) {
        if (st->observers[i] == obs) {
            memmove(&st->observers[i], &st->observers[i + 1],
                    (st->observer_count - i - 1) * sizeof(st->observers[0]));
            st->observer_count--;
            return;
        }
    }
}

const char *director_state_self(const struct director_state *st)
{
    return st->self;
}

void director_state_set_self(struct director_state *st, const char *self)
{
    free(st->self);
    st->self = xstrdup(self);
    st->cfg.self = st->self;
}

uint64_t director_state_local_seq(const struct director_state *st)
{
    return st->local_seq > 0 ? st->seq_base + st->local_seq : 0;
}

void director_state_set_seq_base(struct director_state *st, uint64_t base)
{
    st->seq_base = base;
}

int64_t director_state_now_ms(const struct director_state *st)
{
    return st->clock(st->clock_ctx);
}

const struct director_state_config *director_state_config(const struct director_state *st)
{
    return &st->cfg;
}

const struct director_backends *director_state_backends(const struct director_state *st)
{
    return st->backends;
}

const struct director_users *director_state_users(const struct director_state *st)
{
    return st->users;
}

size_t director_state_session_count(const struct director_state *st)
{
    return st->session_count;
}

/* ---------- announcing ---------- */

/* The origin of a change: `from`, or a fresh local one. */
static struct director_change origin_of(struct director_state *st,
                                        const struct director_change *from)
{
    if (from != NULL)
        return *from;
    ++st->local_seq;
    struct director_change c = {
        .local = true, .origin = st->self, .seq = st->seq_base + st->local_seq};
    return c;
}

static void announce_backend(struct director_state *st, const struct director_backend *b,
                             enum ring_change change, const struct director_change *from)
{
    struct director_change c = origin_of(st, from);
    for (size_t i = 0; i < st->observer_count; i++) {
        if (st->observers[i]->backend_changed != NULL)
            st->observers[i]->backend_changed(b, change, &c, st->observers[i]->ctx);
    }
}

static enum ring_change change_for_state(enum ring_backend_state s)
{
    return s == RING_STATE_UP ? RING_CHANGE_UP : RING_CHANGE_FLUSH;
}

/* Rebuilds the hash ring from the backends that are up. */
static void rebuild_ring(struct director_state *st)
{
    size_t n = director_backends_count(st->backends);
    struct ring_member *members = xcalloc(n + 1, sizeof(*members));
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        struct director_backend *b = director_backends_at(st->backends, i);
        if (b->state != RING_STATE_UP)
            continue;
        members[m].ip = b->ip;
        members[m].port = b->port;
        members[m].tag = b->tag;
        members[m].points = b->points;
        members[m].count = b->vhosts;
        members[m].owner = b;
        m++;
    }
    ring_hash_build(st->ring, members, m);
    free(members);
}

/* ---------- backends ---------- */

static struct director_backend *find_backend(struct director_state *st, const char *ip,
                                             struct petrel_error *err)
{
    struct director_backend *b = director_backends_find(st->backends, ip);
    if (b == NULL)
        petrel_error_set(err, PETREL_ERR_NOT_FOUND, "backend not found: %.64s", ip);
    return b;
}

static bool check_fields(struct director_state *st, const char *tag, uint32_t vhosts,
                         struct petrel_error *err)
{
    if (vhosts > st->cfg.max_vhosts)
        return petrel_error_set(err, PETREL_ERR_INVALID, "vhosts must be 0..%u",
                                (unsigned)st->cfg.max_vhosts);
    if (tag != NULL && strlen(tag) > st->cfg.max_tag)
        return petrel_error_set(err, PETREL_ERR_INVALID, "tag longer than %zu bytes",
                                st->cfg.max_tag);
    return true;
}

bool director_state_backend_add(struct director_state *st, const char *ip, unsigned port,
                                const char *tag, uint32_t vhosts,
                                const struct director_change *from, struct petrel_error *err)
{
    if (!check_fields(st, tag, vhosts, err))
        return false;
    int64_t now_s = st->clock(st->clock_ctx) / 1000;
    struct director_backend *b =
        director_backends_add(st->backends, ip, port, tag, vhosts, now_s, err);
    if (b == NULL)
        return false;
    rebuild_ring(st);
    announce_backend(st, b, RING_CHANGE_UP, from);
    return true;
}

/* Sessions on a removed backend stay counted for their users but no longer
 * for any backend. */
static void detach_sessions(struct director_state *st, const struct director_backend *b)
{
    for (struct director_session *s = st->sessions; s != NULL; s = s->next) {
        if (s->backend == b)
            s->backend = NULL;
    }
}

static void remove_backend(struct director_state *st, struct director_backend *b,
                           const struct director_change *from)
{
    director_users_unmap_backend(st->users, b);
    detach_sessions(st, b);
    announce_backend(st, b, RING_CHANGE_DOWN, from);
    director_backends_remove(st->backends, b);
    rebuild_ring(st);
}

bool director_state_backend_remove(struct director_state *st, const char *ip,
                                   const struct director_change *from, struct petrel_error *err)
{
    struct director_backend *b = find_backend(st, ip, err);
    if (b == NULL)
        return false;
    remove_backend(st, b, from);
    return true;
}

/* Sets the state; true when it changed (then announced). */
static bool set_state(struct director_state *st, struct director_backend *b,
                      enum ring_backend_state state, const struct director_change *from)
{
    if (b->state == state)
        return false;
    b->state = state;
    b->last_updown_change = st->clock(st->clock_ctx) / 1000;
    rebuild_ring(st);
    announce_backend(st, b, change_for_state(state), from);
    return true;
}

bool director_state_backend_set_state(struct director_state *st, const char *ip,
                                      enum ring_backend_state state,
                                      const struct director_change *from, struct petrel_error *err)
{
    struct director_backend *b = find_backend(st, ip, err);
    if (b == NULL)
        return false;
    set_state(st, b, state, from);
    return true;
}

bool director_state_backend_flush(struct director_state *st, const char *ip,
                                  const struct director_change *from, size_t *users_flushed,
                                  struct petrel_error *err)
{
    struct director_backend *b = find_backend(st, ip, err);
    if (b == NULL)
        return false;
    set_state(st, b, RING_STATE_FLUSH, from);
    size_t n = director_users_unmap_backend(st->users, b);
    if (users_flushed != NULL)
        *users_flushed = n;
    return true;
}

bool director_state_backend_set_vhosts(struct director_state *st, const char *ip, uint32_t vhosts,
                                       const struct director_change *from, struct petrel_error *err)
{
    struct director_backend *b = find_backend(st, ip, err);
    if (b == NULL || !check_fields(st, NULL, vhosts, err))
        return false;
    if (b->vhosts == vhosts)
        return true;
    director_backend_set_vhosts(b, vhosts);
    rebuild_ring(st);
    announce_backend(st, b, change_for_state(b->state), from);
    return true;
}

bool director_state_apply_ring_change(struct director_state *st, enum ring_change change,
                                      const struct ring_host *host,
                                      const struct director_change *from, struct petrel_error *err)
{
    struct director_backend *b = director_backends_find(st->backends, host->ip);
    if (change == RING_CHANGE_DOWN) {
        if (b != NULL)
            remove_backend(st, b, from);
        return true;
    }
    if (!check_fields(st, host->tag, host->vhosts, err))
        return false;
    enum ring_backend_state state = change == RING_CHANGE_UP ? RING_STATE_UP : RING_STATE_FLUSH;
    if (b == NULL) {
        b = director_backends_add(st->backends, host->ip, host->port, host->tag, host->vhosts,
                                  host->last_updown_change, err);
        if (b == NULL)
            return false;
        b->state = state;
    } else {
        bool same = b->port == host->port && strcmp(b->tag, host->tag) == 0 &&
                    b->vhosts == host->vhosts && b->state == state &&
                    b->last_updown_change == host->last_updown_change;
        if (same)
            return true;
        b->port = host->port;
        if (strcmp(b->tag, host->tag) != 0)
            director_backend_set_tag(b, host->tag);
        if (b->vhosts != host->vhosts)
            director_backend_set_vhosts(b, host->vhosts);
        b->state = state;
        b->last_updown_change = host->last_updown_change;
    }
    rebuild_ring(st);
    announce_backend(st, b, change, from);
    return true;
}

void director_backend_ring_host(const struct director_backend *b, struct ring_host *h)
{
    h->ip = b->ip;
    h->port = b->port;
    h->tag = b->tag;
    h->vhosts = b->vhosts;
    h->state = b->state;
    h->last_updown_change = b->last_updown_change;
}

void director_write_ring_change(struct buf *out, const struct director_backend *b,
                                enum ring_change change, const struct director_change *from)
{
    struct ring_msg m = {.type = RING_MSG_RING_CHANGE};
    m.ring_change.change = change;
    director_backend_ring_host(b, &m.ring_change.host);
    m.ring_change.origin = from->origin;
    m.ring_change.seq = from->seq;
    ring_msg_write(out, &m);
}

void director_write_user_moved(struct buf *out, const char *user, uint32_t hash,
                               const struct director_backend *to,
                               const struct director_change *from)
{
    struct ring_msg m = {.type = RING_MSG_USER_MOVED,
                         .user_moved = {.user = user,
                                        .hash = hash,
                                        .ip = to->ip,
                                        .port = to->port,
                                        .origin = from->origin,
                                        .seq = from->seq}};
    ring_msg_write(out, &m);
}

void director_write_user_kicked(struct buf *out, const char *user, uint32_t hash,
                                const struct director_change *from)
{
    struct ring_msg m = {
        .type = RING_MSG_USER_KICKED,
        .user_kicked = {.user = user, .hash = hash, .origin = from->origin, .seq = from->seq}};
    ring_msg_write(out, &m);
}

void director_state_backend_set_hash(const struct director_state *st, char out[65])
{
    struct buf text = {0};
    for (size_t i = 0; i < director_backends_count(st->backends); i++) {
        const struct director_backend *b = director_backends_at(st->backends, i);
        /* The tag goes last and length-prefixed so no tag can imitate
         * another backend's fields. */
        buf_printf(&text, "%s\t%u\t%u\t%s\t%zu:", b->ip, b->port, (unsigned)b->vhosts,
                   b->state == RING_STATE_UP ? "up" : "flush", strlen(b->tag));
        buf_append_str(&text, b->tag);
        buf_append_char(&text, '\n');
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (EVP_Digest(text.data != NULL ? text.data : "", text.len, digest, &dlen, EVP_sha256(),
                   NULL) != 1)
        petrel_fatal("SHA-256 failed");
    buf_free(&text);
    for (unsigned i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", digest[i]);
    out[64] = '\0';
}

/* ---------- users ---------- */

static bool check_user(const struct director_state *st, const char *user, size_t len,
                       const char **why)
{
    if (len == 0) {
        *why = "empty username";
        return false;
    }
    if (len > st->cfg.max_username) {
        *why = "username too long";
        return false;
    }
    return true;
}

/* True while `u` waits for sessions on backends other than its mapping. */
static bool sessions_elsewhere(const struct director_user *u)
{
    for (const struct director_session *s = u->sessions_head; s != NULL; s = s->user_next) {
        if (s->backend != u->backend)
            return true;
    }
    return false;
}

/* A move's wait ends when the old sessions are gone or time is up. */
static bool still_killing(struct director_user *u, int64_t now)
{
    if (u->killing_until_ms == 0)
        return false;
    if (now < u->killing_until_ms && sessions_elsewhere(u))
        return true;
    u->killing_until_ms = 0;
    u->weak = false;
    return false;
}

void director_state_lookup(struct director_state *st, const char *user, size_t len, const char *tag,
                           bool record, struct director_lookup *out)
{
    memset(out, 0, sizeof(*out));
    if (!check_user(st, user, len, &out->error)) {
        out->outcome = RING_OUTCOME_BAD_REQUEST;
        return;
    }
    if (tag == NULL)
        tag = "";
    if (strlen(tag) > st->cfg.max_tag) {
        out->outcome = RING_OUTCOME_BAD_REQUEST;
        out->error = "tag too long";
        return;
    }
    int64_t now = st->clock(st->clock_ctx);
    out->hash = ring_hasher_user(st->hasher, user, len);
    struct director_user *u = director_users_find(st->users, out->hash);
    if (u != NULL && u->backend != NULL && !director_user_expired(u, now) &&
        u->backend->state == RING_STATE_UP && strcmp(u->backend->tag, tag) == 0) {
        if (still_killing(u, now)) {
            int64_t left = u->killing_until_ms - now;
            out->outcome = RING_OUTCOME_KILLING;
            out->retry_ms = (uint32_t)(left < KILLING_RETRY_MAX_MS ? left : KILLING_RETRY_MAX_MS);
            out->backend = u->backend;
            return;
        }
        out->outcome = RING_OUTCOME_STICKY;
        out->backend = u->backend;
        if (record)
            director_users_refresh(st->users, u, now);
        return;
    }
    struct director_backend *b = ring_hash_lookup(st->ring, tag, out->hash);
    if (b == NULL) {
        out->outcome = RING_OUTCOME_NO_BACKENDS;
        return;
    }
    out->outcome = RING_OUTCOME_ASSIGNED;
    out->backend = b;
    if (!record)
        return;
    if (u == NULL)
        u = director_users_get(st->users, out->hash, now);
    if (u != NULL) /* a full table still answers, it just cannot remember */
        director_users_map(st->users, u, b, false, now);
}

bool director_state_user_move(struct director_state *st, const char *user, const char *ip,
                              unsigned port, const struct director_change *from,
                              struct petrel_error *err)
{
    const char *why;
    if (!check_user(st, user, strlen(user), &why))
        return petrel_error_set(err, PETREL_ERR_INVALID, "%s", why);
    struct director_backend *b = director_backends_find(st->backends, ip);
    if (b == NULL || (port != 0 && b->port != port)) {
        if (port != 0)
            return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "backend not found: %.64s:%u", ip,
                                    port);
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "backend not found: %.64s", ip);
    }
    if (b->state != RING_STATE_UP)
        return petrel_error_set(err, PETREL_ERR_CONFLICT, "backend %s is flushed (not up)", b->ip);
    int64_t now = st->clock(st->clock_ctx);
    uint32_t hash = ring_hasher_user(st->hasher, user, strlen(user));
    struct director_user *u = director_users_get(st->users, hash, now);
    if (u == NULL)
        return petrel_error_set(err, PETREL_ERR_UNAVAILABLE, "user table full (limit %zu)",
                                st->cfg.max_users);
    director_users_map(st->users, u, b, false, now);
    u->killing_until_ms = 0;
    if (sessions_elsewhere(u)) {
        u->weak = true;
        u->killing_until_ms = now + st->cfg.kill_timeout_ms;
    }
    struct director_change c = origin_of(st, from);
    for (size_t i = 0; i < st->observer_count; i++) {
        if (st->observers[i]->user_moved != NULL)
            st->observers[i]->user_moved(user, hash, b, &c, st->observers[i]->ctx);
    }
    return true;
}

bool director_state_user_kick(struct director_state *st, const char *user,
                              const struct director_change *from, struct petrel_error *err)
{
    const char *why;
    if (!check_user(st, user, strlen(user), &why))
        return petrel_error_set(err, PETREL_ERR_INVALID, "%s", why);
    uint32_t hash = ring_hasher_user(st->hasher, user, strlen(user));
    struct director_change c = origin_of(st, from);
    for (size_t i = 0; i < st->observer_count; i++) {
        if (st->observers[i]->user_kicked != NULL)
            st->observers[i]->user_kicked(user, hash, &c, st->observers[i]->ctx);
    }
    return true;
}

bool director_state_user_merge(struct director_state *st, uint32_t hash, const char *ip,
                               unsigned port, int64_t expires_at_s)
{
    /* seconds from the wire, any size: compared without overflow */
    int64_t expires_at_ms = expires_at_s > INT64_MAX / 1000 ? INT64_MAX : expires_at_s * 1000;
    struct director_backend *b = director_backends_find(st->backends, ip);
    if (b == NULL || b->port != port || hash == 0)
        return false;
    int64_t now = st->clock(st->clock_ctx);
    struct director_user *u = director_users_find(st->users, hash);
    if (u != NULL && u->backend != NULL && !director_user_expired(u, now))
        return true;
    if (expires_at_ms <= now)
        return true; /* expired on the peer already */
    if (u == NULL)
        u = director_users_get(st->users, hash, now);
    if (u == NULL)
        return false;
    director_users_map(st->users, u, b, false, now);
    return true;
}

size_t director_state_expire(struct director_state *st)
{
    return director_users_expire(st->users, st->clock(st->clock_ctx));
}

/* ---------- sessions ---------- */

struct director_session *director_state_session_start(struct director_state *st, const char *user,
                                                      const char *ip,
                                                      enum ring_session_protocol proto,
                                                      struct petrel_error *err)
{
    const char *why;
    if (!check_user(st, user, strlen(user), &why)) {
        petrel_error_set(err, PETREL_ERR_INVALID, "%s", why);
        return NULL;
    }
    struct director_backend *b = find_backend(st, ip, err);
    if (b == NULL)
        return NULL;
    int64_t now = st->clock(st->clock_ctx);
    struct director_user *u =
        director_users_get(st->users, ring_hasher_user(st->hasher, user, strlen(user)), now);
    if (u == NULL) {
        petrel_error_set(err, PETREL_ERR_UNAVAILABLE, "user table full (limit %zu)",
                         st->cfg.max_users);
        return NULL;
    }
    if (u->backend == NULL || director_user_expired(u, now))
        director_users_map(st->users, u, b, false, now); /* the proxy chose: remember it */
    struct director_session *s = xcalloc(1, sizeof(*s));
    s->user = u;
    s->backend = b;
    s->proto = proto;
    DLIST_PUSH_AT(st->sessions, s, prev, next);
    DLIST_PUSH_AT(u->sessions_head, s, user_prev, user_next);
    director_users_session_added(st->users, u);
    b->sessions[proto]++;
    st->session_count++;
    return s;
}

void director_state_session_end(struct director_state *st, struct director_session *s)
{
    if (s == NULL)
        return;
    struct director_user *u = s->user;
    if (s->backend != NULL && s->backend->sessions[s->proto] > 0)
        s->backend->sessions[s->proto]--;
    DLIST_UNLINK(st->sessions, s);
    DLIST_UNLINK_AT(u->sessions_head, s, user_prev, user_next);
    free(s);
    st->session_count--;
    if (u->killing_until_ms != 0)
        still_killing(u, st->clock(st->clock_ctx)); /* the last old session may be gone */
    director_users_session_removed(st->users, u, st->clock(st->clock_ctx));
}
