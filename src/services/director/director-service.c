/* The director component (director-service.h): wires the state, the ring
 * server, the admin API and the peer list together, and owns the metrics
 * collector and the expiry timer. */
#include "services/director/director-service.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "services/director/director-api.h"
#include "services/director/director-peers.h"
#include "services/director/director-state.h"
#include "services/director/director-sync.h"
#include "clients/ring/ring-auth.h"
#include "services/director/ring-server.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COMPONENT "director"
#define EXPIRE_INTERVAL_MS 1000

struct director_service {
    const struct director_config *cfg;
    struct metrics_registry *metrics;
    struct director_state *state;
    struct director_peers *peers;
    struct ring_server *ring;
    struct director_sync *sync;
    struct director_api *api;
    struct event *expire_timer;
    struct metric_family *backend_info;
    struct metric_family *backend_sessions;
    bool collector_added;
};

/* ---------- metrics ---------- */

static void collect(void *arg)
{
    struct director_service *svc = arg;
    const struct director_backends *reg = director_state_backends(svc->state);
    metric_family_reset(svc->backend_info);
    metric_family_reset(svc->backend_sessions);
    for (size_t i = 0; i < director_backends_count(reg); i++) {
        const struct director_backend *b = director_backends_at(reg, i);
        char port[8];
        snprintf(port, sizeof(port), "%u", b->port);
        const char *info[] = {b->ip, port, b->tag, b->state == RING_STATE_UP ? "up" : "flush"};
        metric_set(metric_series_get(svc->backend_info, info), 1);
        for (int p = 0; p < RING_PROTO_COUNT; p++) {
            const char *labels[] = {b->ip, port, b->tag,
                                    ring_protocol_name((enum ring_session_protocol)p)};
            metric_set(metric_series_get(svc->backend_sessions, labels), (double)b->sessions[p]);
        }
    }
}

static void metrics_init(struct director_service *svc, struct metrics_registry *reg)
{
    static const char *const info_labels[] = {"ip", "port", "tag", "status", NULL};
    static const char *const session_labels[] = {"ip", "port", "tag", "protocol", NULL};
    svc->backend_info = metrics_gauge(
        reg, "petrel_director_backend_info",
        "Always 1 per backend; status up (accepting new sessions) or flush (draining).",
        info_labels);
    svc->backend_sessions = metrics_gauge(
        reg, "petrel_director_backend_sessions",
        "Sessions login proxies report proxying to each backend, by protocol.", session_labels);
    metrics_add_collector(reg, collect, svc);
    svc->collector_added = true;
}

/* ---------- expiry ---------- */

static void expire_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct director_service *svc = arg;
    size_t n = director_state_expire(svc->state);
    if (n > 0)
        log_debug(COMPONENT, "user mappings expired", "count=%zu", n);
}

/* ---------- start ---------- */

/* This director's ring address: director.ring.self, else the bound ring
 * address when it names one interface, else POD_IP (Kubernetes) with the
 * ring port, else loopback. */
static void derive_self(const struct director_config *cfg, const char *bound, char *out,
                        size_t size)
{
    if (cfg->self[0] != '\0') {
        snprintf(out, size, "%s", cfg->self);
        return;
    }
    const char *colon = strrchr(bound, ':');
    const char *port = colon != NULL ? colon + 1 : "9102";
    bool wildcard = strncmp(bound, "0.0.0.0:", 8) == 0 || strncmp(bound, "[::]:", 5) == 0;
    if (!wildcard) {
        snprintf(out, size, "%s", bound);
        return;
    }
    const char *pod_ip = getenv("POD_IP");
    if (pod_ip != NULL && *pod_ip != '\0') {
        if (strchr(pod_ip, ':') != NULL)
            snprintf(out, size, "[%s]:%s", pod_ip, port);
        else
            snprintf(out, size, "%s:%s", pod_ip, port);
        return;
    }
    snprintf(out, size, "127.0.0.1:%s", port);
    log_warn(COMPONENT, "ring identity defaults to loopback",
             "self=%s hint=\"set director.ring.self (or POD_IP) before adding peer directors\"",
             out);
}

/* The start of this run's change sequence: the start time in microseconds,
 * above any number an earlier run of this director gave (peers keep its
 * watermark across its restart). */
static uint64_t seq_base(void)
{
    return (uint64_t)clock_real_us();
}

static bool peer_change(const char *sender, const struct ring_msg *msg, struct petrel_error *err,
                        void *ctx)
{
    return director_sync_receive(ctx, sender, msg, err);
}

static bool add_initial(struct director_service *svc, struct petrel_error *err)
{
    const struct director_config *cfg = svc->cfg;
    for (size_t i = 0; i < cfg->backend_count; i++) {
        const struct director_backend_config *b = &cfg->backends[i];
        /* With peers, a configured backend starts as "never changed"
         * (last_updown_change 0), so the ring's view of it (a peer's down,
         * made while this director was away) wins when this one joins. */
        struct ring_host h = {.ip = b->ip,
                              .port = (unsigned)b->port,
                              .tag = b->tag,
                              .vhosts = (uint32_t)b->vhosts,
                              .state = RING_STATE_UP,
                              .last_updown_change = 0};
        bool ok = cfg->peers[0] != NULL
                      ? director_state_apply_ring_change(svc->state, RING_CHANGE_UP, &h, NULL, err)
                      : director_state_backend_add(svc->state, b->ip, (unsigned)b->port, b->tag,
                                                   (uint32_t)b->vhosts, NULL, err);
        if (!ok) {
            petrel_error_prefix(err, "director.backends");
            return false;
        }
    }
    for (size_t i = 0; cfg->peers[i] != NULL; i++) {
        if (!director_peers_add(svc->peers, cfg->peers[i], true, err)) {
            petrel_error_prefix(err, "director.peers");
            return false;
        }
    }
    return true;
}

struct director_service *director_service_start(const struct service_env *env,
                                                const struct director_config *cfg,
                                                struct petrel_error *err)
{
    char *token = NULL;
    char *secret = NULL;
    if (!director_config_token(cfg, &token, err))
        return NULL;
    if (!director_config_ring_secret(cfg, &secret, err)) {
        free(token);
        return NULL;
    }
    struct director_service *svc = xcalloc(1, sizeof(*svc));
    svc->cfg = cfg;
    svc->metrics = env->metrics;
    struct director_state_config sc = {
        .self = "",
        .user_expire_ms = cfg->user_expire_ms,
        .kill_timeout_ms = cfg->kill_timeout_ms,
        .max_users = (size_t)cfg->max_users,
        .max_backends = (size_t)cfg->max_backends,
        .max_vhosts = (uint32_t)cfg->max_vhosts,
        .max_username = (size_t)cfg->max_username,
        .max_tag = (size_t)cfg->max_tag,
    };
    svc->state = director_state_new(&sc, NULL, NULL);
    svc->ring = ring_server_start(env->base, svc->state, cfg, secret, env->metrics, err);
    if (svc->ring == NULL)
        goto fail;
    char self[128];
    derive_self(cfg, ring_server_address(svc->ring), self, sizeof(self));
    director_state_set_self(svc->state, self);
    director_state_set_seq_base(svc->state, seq_base());
    svc->peers = director_peers_new(self, DIRECTOR_MAX_PEERS);
    if (!add_initial(svc, err))
        goto fail;
    svc->sync = director_sync_new(env->base, svc->state, svc->peers, cfg, secret);
    ring_server_set_peer_handler(svc->ring, peer_change, svc->sync);
    svc->api = director_api_start(env, cfg, token, svc->state, svc->peers, svc->sync, err);
    if (svc->api == NULL)
        goto fail;
    metrics_init(svc, env->metrics);
    svc->expire_timer = event_new(env->base, -1, EV_PERSIST, expire_cb, svc);
    struct timeval tv = {EXPIRE_INTERVAL_MS / 1000, (EXPIRE_INTERVAL_MS % 1000) * 1000};
    evtimer_add(svc->expire_timer, &tv);
    readiness_add_tcp(env->readiness, "director-ring-listener", ring_server_address(svc->ring),
                      false, NULL, NULL);
    readiness_add_tcp(env->readiness, "director-api-listener", director_api_address(svc->api),
                      false, NULL, NULL);
    if (token[0] == '\0' && cfg->api_allow_unauthenticated_remote)
        log_warn(COMPONENT, "admin API authentication disabled on a listener other hosts may reach",
                 "reason=\"%s is empty and director.api.allow_unauthenticated_remote is set\" "
                 "listen=%s",
                 cfg->token_env, cfg->api_listen);
    else if (token[0] == '\0')
        log_warn(COMPONENT, "admin API authentication disabled",
                 "reason=\"%s is empty\" hint=\"set it (or %s_FILE, or director.api.token_file)\"",
                 cfg->token_env, cfg->token_env);
    if (secret[0] == '\0')
        log_warn(COMPONENT, "ring authentication disabled",
                 "reason=\"director.ring.allow_unauthenticated is true and there is no ring "
                 "secret\" hint=\"anyone in director.ring.allowed_nets can change the ring\"");
    else if (cfg->ring_allow_unauthenticated)
        log_warn(COMPONENT, "ring accepts unauthenticated clients",
                 "reason=\"director.ring.allow_unauthenticated is true\" hint=\"remove it once "
                 "every peer, monitor and login proxy has the ring secret\"");
    log_info(COMPONENT, "listening",
             "api=%s ring=%s self=%s backends=%zu peers=%zu auth=%s ring_auth=%s",
             director_api_address(svc->api), ring_server_address(svc->ring), self,
             director_backends_count(director_state_backends(svc->state)),
             director_peers_count(svc->peers), token[0] != '\0' ? "token" : "off",
             secret[0] == '\0'                 ? "off"
             : cfg->ring_allow_unauthenticated ? "optional"
                                               : RING_AUTH_MECH);
    free(token);
    ring_secret_free(secret);
    return svc;
fail:
    free(token);
    ring_secret_free(secret);
    director_service_free(svc);
    return NULL;
}

const char *director_service_api_address(const struct director_service *svc)
{
    return director_api_address(svc->api);
}

const char *director_service_ring_address(const struct director_service *svc)
{
    return ring_server_address(svc->ring);
}

void director_service_stop_accepting(struct director_service *svc)
{
    director_api_stop_accepting(svc->api);
    ring_server_stop_accepting(svc->ring);
}

size_t director_service_in_flight(const struct director_service *svc)
{
    return director_api_in_flight(svc->api);
}

void director_service_abandon_in_flight(struct director_service *svc)
{
    director_api_abandon_in_flight(svc->api);
}

void director_service_free(struct director_service *svc)
{
    if (svc == NULL)
        return;
    if (svc->collector_added)
        metrics_remove_collector(svc->metrics, collect, svc);
    if (svc->expire_timer != NULL)
        event_free(svc->expire_timer);
    director_api_free(svc->api);
    ring_server_free(svc->ring);
    director_sync_free(svc->sync);
    director_peers_free(svc->peers);
    director_state_free(svc->state);
    free(svc);
}
