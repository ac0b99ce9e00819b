/* Peer synchronisation (director-sync.h). */
#include "services/director/director-sync.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "services/director/director-link.h"
#include "clients/ring/ring-auth.h"
#include "services/director/director-watermarks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPONENT "director"

struct director_sync {
    struct event_base *base;
    struct director_state *state;
    struct director_peers *peers;
    const struct director_config *cfg;
    char *secret; /* the ring secret the links authenticate with; "" = none */
    struct director_observer observer;
    struct director_watermarks *watermarks;
    struct director_tombstones *tombstones;
    struct director_link *left, *right; /* the same link once when both are one peer */
    char left_addr[64], right_addr[64]; /* "" when none */
    struct buf out;
};

/* ---------- sending ---------- */

/* Sends sync->out to the neighbours other than `except` (NULL: both). */
static void send_neighbours(struct director_sync *sync, const char *except)
{
    struct director_link *links[2] = {sync->left, sync->right != sync->left ? sync->right : NULL};
    for (int i = 0; i < 2; i++) {
        if (links[i] == NULL)
            continue;
        if (except != NULL && strcmp(director_link_addr(links[i]), except) == 0)
            continue;
        director_link_send(links[i], sync->out.data, sync->out.len);
    }
    buf_reset(&sync->out);
}

/* ---------- the state observer: local changes go to both neighbours ---------- */

static void on_backend_changed(const struct director_backend *b, enum ring_change change,
                               const struct director_change *from, void *ctx)
{
    struct director_sync *sync = ctx;
    if (!from->local)
        return; /* a peer's change: director_sync_receive forwards it unchanged */
    director_write_ring_change(&sync->out, b, change, from);
    send_neighbours(sync, NULL);
}

static void on_user_moved(const char *user, uint32_t hash, const struct director_backend *to,
                          const struct director_change *from, void *ctx)
{
    struct director_sync *sync = ctx;
    if (!from->local)
        return;
    director_write_user_moved(&sync->out, user, hash, to, from);
    send_neighbours(sync, NULL);
}

static void on_user_kicked(const char *user, uint32_t hash, const struct director_change *from,
                           void *ctx)
{
    struct director_sync *sync = ctx;
    if (!from->local)
        return;
    director_write_user_kicked(&sync->out, user, hash, from);
    send_neighbours(sync, NULL);
}

/* ---------- receiving ---------- */

int director_sync_host_cmp(const struct ring_host *a, const struct ring_host *b)
{
    if (a->last_updown_change != b->last_updown_change)
        return a->last_updown_change > b->last_updown_change ? 1 : -1;
    if (a->state != b->state)
        return a->state == RING_STATE_FLUSH ? 1 : -1;
    if (a->vhosts != b->vhosts)
        return a->vhosts > b->vhosts ? 1 : -1;
    if (a->port != b->port)
        return a->port > b->port ? 1 : -1;
    int c = strcmp(a->tag, b->tag);
    return c > 0 ? 1 : c < 0 ? -1 : 0;
}

bool director_sync_receive(struct director_sync *sync, const char *sender, const struct ring_msg *m,
                           struct petrel_error *err)
{
    const char *origin;
    uint64_t seq;
    switch (m->type) {
    case RING_MSG_RING_CHANGE:
        origin = m->ring_change.origin;
        seq = m->ring_change.seq;
        break;
    case RING_MSG_USER_MOVED:
        origin = m->user_moved.origin;
        seq = m->user_moved.seq;
        break;
    case RING_MSG_USER_KICKED:
        origin = m->user_kicked.origin;
        seq = m->user_kicked.seq;
        break;
    default:
        return petrel_error_set(err, PETREL_ERR_INVALID, "not a change");
    }
    if (strcmp(origin, director_state_self(sync->state)) == 0)
        return true; /* our own change, back around the ring */
    switch (director_watermarks_accept(sync->watermarks, origin, seq)) {
    case DIRECTOR_WM_DUPLICATE:
        return true;
    case DIRECTOR_WM_FULL:
        return petrel_error_set(err, PETREL_ERR_UNAVAILABLE,
                                "too many origins (limit %d): change from %.64s dropped",
                                DIRECTOR_MAX_PEERS + 1, origin);
    case DIRECTOR_WM_NEW:
        break;
    }
    struct director_change from = {.local = false, .origin = origin, .seq = seq};
    bool ok = true;
    if (m->type == RING_MSG_RING_CHANGE)
        ok = director_state_apply_ring_change(sync->state, m->ring_change.change,
                                              &m->ring_change.host, &from, err);
    else if (m->type == RING_MSG_USER_MOVED)
        ok = director_state_user_move(sync->state, m->user_moved.user, m->user_moved.ip,
                                      m->user_moved.port, &from, err);
    else
        ok = director_state_user_kick(sync->state, m->user_kicked.user, &from, err);
    ring_msg_write(&sync->out, m);
    send_neighbours(sync, sender);
    return ok;
}

/* ---------- links ---------- */

static void link_handshake_line(struct director_link *link, const struct ring_msg *m, void *ctx)
{
    struct director_sync *sync = ctx;
    if (m->type == RING_MSG_USER) {
        director_state_user_merge(sync->state, m->user.hash, m->user.ip, m->user.port,
                                  m->user.expires_at);
        return;
    }
    const struct director_backend *b =
        director_backends_find(director_state_backends(sync->state), m->host.ip);
    if (b != NULL) {
        struct ring_host mine;
        director_backend_ring_host(b, &mine);
        if (director_sync_host_cmp(&m->host, &mine) <= 0)
            return; /* ours is as new or newer */
    }
    struct petrel_error err;
    enum ring_change change = m->host.state == RING_STATE_UP ? RING_CHANGE_UP : RING_CHANGE_FLUSH;
    if (!director_state_apply_ring_change(sync->state, change, &m->host, NULL, &err)) {
        char why_q[300];
        log_warn(COMPONENT, "peer backend not merged", "peer=%s backend=%s reason=%s",
                 director_link_addr(link), m->host.ip,
                 log_quote(why_q, sizeof(why_q), err.message));
    }
}

static void link_connected(struct director_link *link, void *ctx)
{
    struct director_sync *sync = ctx;
    director_tombstones_clear(sync->tombstones, director_link_addr(link));
}

static void link_lost(struct director_link *link, const char *why, void *ctx)
{
    (void)why;
    struct director_sync *sync = ctx;
    director_tombstones_add(sync->tombstones, director_link_addr(link),
                            director_state_now_ms(sync->state));
}

static struct director_link *link_new(struct director_sync *sync, const char *addr)
{
    struct director_link_config lc = {
        .self = director_state_self(sync->state),
        .secret = sync->secret,
        .reconnect_min_ms = sync->cfg->ring_reconnect_min_ms,
        .reconnect_max_ms = sync->cfg->ring_reconnect_max_ms,
        .handshake_timeout_ms = sync->cfg->ring_peer_timeout_ms,
        .ping_interval_ms = sync->cfg->ring_ping_interval_ms,
        .max_line = (size_t)sync->cfg->ring_max_line,
        .max_output = (size_t)sync->cfg->ring_max_output,
    };
    struct director_link_callbacks cb = {
        .handshake_line = link_handshake_line,
        .connected = link_connected,
        .lost = link_lost,
        .ctx = sync,
    };
    return director_link_new(sync->base, addr, &lc, &cb);
}

static void drop_links(struct director_sync *sync)
{
    if (sync->right != sync->left)
        director_link_free(sync->right);
    director_link_free(sync->left);
    sync->left = sync->right = NULL;
}

/* Takes the current link to `addr` out of left/right (NULL: none). */
static struct director_link *take_link(struct director_sync *sync, const char *addr)
{
    struct director_link *found = NULL;
    if (sync->left != NULL && strcmp(director_link_addr(sync->left), addr) == 0)
        found = sync->left;
    else if (sync->right != NULL && strcmp(director_link_addr(sync->right), addr) == 0)
        found = sync->right;
    if (found == NULL)
        return NULL;
    if (sync->left == found)
        sync->left = NULL;
    if (sync->right == found)
        sync->right = NULL;
    return found;
}

void director_sync_refresh(struct director_sync *sync)
{
    const struct director_peer *left, *right;
    director_peers_neighbours(sync->peers, &left, &right);
    char want_left[64] = "", want_right[64] = "";
    if (left != NULL)
        snprintf(want_left, sizeof(want_left), "%s", left->addr);
    if (right != NULL)
        snprintf(want_right, sizeof(want_right), "%s", right->addr);
    /* Keep links that still go to a neighbour (no redial). */
    struct director_link *new_left = want_left[0] != '\0' ? take_link(sync, want_left) : NULL;
    struct director_link *new_right = NULL;
    if (want_right[0] != '\0') {
        if (strcmp(want_right, want_left) == 0)
            new_right = new_left;
        else
            new_right = take_link(sync, want_right);
    }
    drop_links(sync);
    if (want_left[0] != '\0' && new_left == NULL)
        new_left = link_new(sync, want_left);
    if (want_right[0] != '\0' && new_right == NULL)
        new_right = strcmp(want_right, want_left) == 0 ? new_left : link_new(sync, want_right);
    sync->left = new_left;
    sync->right = new_right;
    snprintf(sync->left_addr, sizeof(sync->left_addr), "%s", want_left);
    snprintf(sync->right_addr, sizeof(sync->right_addr), "%s", want_right);
    /* Tombstones are kept for neighbours only: a member that left the ring
     * or is no longer a neighbour (no link tells about it) loses its own. */
    for (size_t i = director_tombstones_count(sync->tombstones); i-- > 0;) {
        const char *addr = director_tombstones_at(sync->tombstones, i)->addr;
        if (strcmp(addr, want_left) != 0 && strcmp(addr, want_right) != 0) {
            char copy[64];
            snprintf(copy, sizeof(copy), "%s", addr);
            director_tombstones_clear(sync->tombstones, copy);
        }
    }
}

/* ---------- life cycle and queries ---------- */

struct director_sync *director_sync_new(struct event_base *base, struct director_state *state,
                                        struct director_peers *peers,
                                        const struct director_config *cfg, const char *secret)
{
    struct director_sync *sync = xcalloc(1, sizeof(*sync));
    sync->secret = xstrdup(secret != NULL ? secret : "");
    sync->base = base;
    sync->state = state;
    sync->peers = peers;
    sync->cfg = cfg;
    sync->watermarks = director_watermarks_new(DIRECTOR_MAX_PEERS + 1);
    sync->tombstones = director_tombstones_new(DIRECTOR_MAX_PEERS);
    sync->observer.backend_changed = on_backend_changed;
    sync->observer.user_moved = on_user_moved;
    sync->observer.user_kicked = on_user_kicked;
    sync->observer.ctx = sync;
    director_state_subscribe(state, &sync->observer);
    director_sync_refresh(sync);
    return sync;
}

void director_sync_free(struct director_sync *sync)
{
    if (sync == NULL)
        return;
    director_state_unsubscribe(sync->state, &sync->observer);
    drop_links(sync);
    director_watermarks_free(sync->watermarks);
    director_tombstones_free(sync->tombstones);
    buf_free(&sync->out);
    ring_secret_free(sync->secret);
    free(sync);
}

uint64_t director_sync_watermark(const struct director_sync *sync, const char *addr)
{
    return director_watermarks_get(sync->watermarks, addr);
}

void director_sync_link_info(const struct director_sync *sync, const char *addr,
                             struct director_link_info *out)
{
    memset(out, 0, sizeof(*out));
    bool is_left = sync->left_addr[0] != '\0' && strcmp(sync->left_addr, addr) == 0;
    bool is_right = sync->right_addr[0] != '\0' && strcmp(sync->right_addr, addr) == 0;
    if (!is_left && !is_right)
        return;
    out->role = is_left && is_right ? DIRECTOR_ROLE_BOTH
                : is_left           ? DIRECTOR_ROLE_LEFT
                                    : DIRECTOR_ROLE_RIGHT;
    const struct director_link *link = is_left ? sync->left : sync->right;
    if (link != NULL && director_link_connected(link)) {
        out->connected = true;
        out->since_ms = director_link_since_ms(link);
    }
}

const struct director_tombstones *director_sync_tombstones(const struct director_sync *sync)
{
    return sync->tombstones;
}
