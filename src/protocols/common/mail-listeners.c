/* The listener set of a mail protocol server: listeners, TLS, accepting
 * under the connection limit, the connection list and per-user counts. */
#include "protocols/common/mail-listeners.h"

#include "core/dlist.h"
#include "core/sorted-map.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/conn-limits.h"
#include "net/conn-slots.h"
#include "net/listener-set.h"
#include "net/sockaddr.h"
#include "net/tls.h"
#include "net/tls-conn.h"
#include "protocols/common/mail-session-io.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The login timeout once 3/4 of max_connections are taken (nginx-style:
 * idle pre-login connections make room sooner when slots run short). */
#define MAIL_PRESSED_LOGIN_TIMEOUT_MS 10000

struct mail_session_set {
    struct mail_listeners *listeners;
    struct event_base *base;
    struct mail_session_io *sessions; /* newest first */
    size_t count;
};

struct mail_listeners {
    struct mail_listeners_params p;
    SSL_CTX *tls;
    struct net_listener_set *set;
    /* max_connections: sessions plus descriptors handed to a loop;
     * thread-safe itself (workers give slots back from their loops). */
    struct conn_slots *slots;
    struct cidr_list exempt;
    struct cidr_list trusted;   /* login_trusted_networks */
    struct conn_limits *per_ip; /* thread-safe itself */
    struct mail_session_set main_set;
    /* Shared by every loop's sessions. Never held while calling out (a
     * metric, a session callback). */
    pthread_mutex_t lock;
    unsigned long long session_ids;
    struct smap *per_user; /* username -> (uintptr_t) session count */
};

struct mail_listeners *mail_listeners_new(const struct mail_listeners_params *params,
                                          struct petrel_error *err)
{
    struct mail_listeners *ls = xcalloc(1, sizeof(*ls));
    ls->p = *params;
    pthread_mutex_init(&ls->lock, NULL);
    ls->main_set.listeners = ls;
    ls->main_set.base = params->base;
    ls->per_user = smap_new();
    ls->set = net_listener_set_new(params->base);
    const struct mail_login_config *cfg = params->cfg;
    if (!cidr_list_parse((const char *const *)cfg->per_ip_limit_exempt_nets, &ls->exempt, err) ||
        !cidr_list_parse((const char *const *)cfg->login_trusted_networks, &ls->trusted, err)) {
        mail_listeners_free(ls);
        return NULL;
    }
    struct conn_limits_config lc = {.max_per_ip = cfg->max_connections_per_ip,
                                    .exempt = &ls->exempt};
    ls->per_ip = conn_limits_new(&lc);
    char slots_key[64];
    snprintf(slots_key, sizeof(slots_key), "%s.max_connections", params->component);
    struct conn_slots_config sc = {
        .max = (size_t)cfg->max_connections,
        .full = CONN_SLOTS_REFUSE,
        .component = params->component,
        .limit_key = slots_key,
        .busy_reply = params->busy_reply,
    };
    ls->slots = conn_slots_new(&sc);
    if (cfg->tls_cert_file != NULL && *cfg->tls_cert_file != '\0') {
        struct tls_server_options topts = {
            .cert_file = cfg->tls_cert_file,
            .key_file = cfg->tls_key_file,
        };
        ls->tls = tls_server_ctx_new(&topts, err);
        if (ls->tls == NULL) {
            mail_listeners_free(ls);
            return NULL;
        }
    }
    return ls;
}

struct bufferevent *mail_listeners_bufferevent(struct mail_listeners *ls, struct event_base *base,
                                               int fd, bool tls)
{
    /* The handshake is bounded by the session's login deadline
     * (mail_session_io_set_deadline), which input does not push back. */
    if (tls)
        return tls_conn_accept(base, fd, ls->tls); /* closes fd on failure */
    struct bufferevent *bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL)
        evutil_closesocket(fd);
    return bev;
}

void mail_listeners_release(struct mail_listeners *ls, const struct sockaddr *peer)
{
    conn_limits_release(ls->per_ip, peer);
    conn_slots_release(ls->slots);
}

/* The per-address count of a session, from the IP text it kept. */
static void release_ip_text(struct mail_listeners *ls, const char *ip)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1)
        v4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1)
        v6->sin6_family = AF_INET6;
    else
        return; /* "unix": never counted */
    conn_limits_release(ls->per_ip, (const struct sockaddr *)&ss);
}

int64_t mail_listeners_login_timeout(const struct mail_listeners *ls, int64_t configured_ms)
{
    if (conn_slots_pressed(ls->slots) && configured_ms > MAIL_PRESSED_LOGIN_TIMEOUT_MS)
        return MAIL_PRESSED_LOGIN_TIMEOUT_MS;
    return configured_ms;
}

static void accept_cb(void *arg, struct net_listener *l, const struct net_accepted *a)
{
    struct mail_listeners *ls = arg;
    evutil_socket_t fd = a->fd;
    const struct sockaddr *sa = a->peer;
    bool tls = a->tls;
    /* The slot is held until the session's detach (or a release). */
    if (!conn_slots_admit(ls->slots, l, a))
        return;
    if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) {
        /* mail-session-io sends a command's replies in one write, so Nagle
         * saves nothing; it would hold the short tagged reply that follows a
         * message sent from its file until the client's delayed ACK. */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (ls->p.accept_fd != NULL) {
        ls->p.accept_fd(ls->p.accept_arg, fd, tls, sa);
        return;
    }
    struct bufferevent *bev = mail_listeners_bufferevent(ls, ls->p.base, fd, tls);
    if (bev == NULL) {
        mail_listeners_release(ls, sa);
        return;
    }
    ls->p.accept(ls->p.accept_arg, bev, tls, sa);
}

static bool listen_on(struct mail_listeners *ls, const char *addr, bool tls,
                      struct petrel_error *err)
{
    char limit_key[64];
    snprintf(limit_key, sizeof(limit_key), "%s.max_connections_per_ip", ls->p.component);
    struct net_listener_config lcfg = {
        .component = ls->p.component,
        .limit_key = limit_key,
        .allowed = NULL, /* mail ports are open to the world */
        .limits = ls->per_ip,
        .per_ip_reply = ls->p.per_ip_reply,
        .tls = tls, /* no plain-text reply on an implicit-TLS port */
        .accept = accept_cb,
        .arg = ls,
    };
    return net_listener_set_listen(ls->set, addr, 0, &lcfg, err);
}

bool mail_listeners_open(struct mail_listeners *ls, struct petrel_error *err)
{
    const struct mail_login_config *cfg = ls->p.cfg;
    for (size_t i = 0; cfg->listen != NULL && cfg->listen[i] != NULL; i++) {
        if (!listen_on(ls, cfg->listen[i], false, err))
            return false;
    }
    for (size_t i = 0; cfg->listen_tls != NULL && cfg->listen_tls[i] != NULL; i++) {
        if (!listen_on(ls, cfg->listen_tls[i], true, err))
            return false;
    }
    if (net_listener_set_count(ls->set) == 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "%s: no listener configured",
                                ls->p.component);
    return true;
}

void mail_listeners_add_readiness(const struct mail_listeners *ls, struct readiness *r)
{
    net_listener_set_add_readiness(ls->set, r, ls->p.component);
}

void mail_listeners_close(struct mail_listeners *ls)
{
    if (ls->set != NULL)
        net_listener_set_stop(ls->set);
}

void mail_listeners_shutdown(struct mail_listeners *ls)
{
    mail_listeners_close(ls);
    mail_session_set_shutdown(&ls->main_set);
}

void mail_listeners_free_sessions(struct mail_listeners *ls)
{
    if (ls == NULL)
        return;
    mail_listeners_close(ls);
    mail_session_set_free_sessions(&ls->main_set);
}

void mail_listeners_free(struct mail_listeners *ls)
{
    if (ls == NULL)
        return;
    mail_listeners_close(ls);
    if (ls->tls != NULL)
        SSL_CTX_free(ls->tls);
    smap_free(ls->per_user, NULL);
    conn_slots_free(ls->slots);
    net_listener_set_free(ls->set);
    conn_limits_free(ls->per_ip);
    cidr_list_free(&ls->exempt);
    cidr_list_free(&ls->trusted);
    pthread_mutex_destroy(&ls->lock);
    free(ls);
}

const struct mail_listeners_params *mail_listeners_params(const struct mail_listeners *ls)
{
    return &ls->p;
}

SSL_CTX *mail_listeners_tls(const struct mail_listeners *ls)
{
    return ls->tls;
}

const char *mail_listeners_address(const struct mail_listeners *ls)
{
    return net_listener_set_address(ls->set, 0);
}

size_t mail_listeners_count(const struct mail_listeners *ls)
{
    return net_listener_set_count(ls->set);
}

void mail_listeners_instance(const struct mail_listeners *ls, char *out, size_t size)
{
    char host[256];
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    snprintf(out, size, "%s@%s:%s", ls->p.component, host, mail_listeners_address(ls));
}

/* ---------- open connections ---------- */

size_t mail_listeners_sessions(const struct mail_listeners *ls)
{
    return conn_slots_used(ls->slots);
}

struct mail_session_set *mail_listeners_main_set(struct mail_listeners *ls)
{
    return &ls->main_set;
}

struct mail_session_set *mail_session_set_new(struct mail_listeners *ls, struct event_base *base)
{
    struct mail_session_set *set = xcalloc(1, sizeof(*set));
    set->listeners = ls;
    set->base = base;
    return set;
}

void mail_session_set_free(struct mail_session_set *set)
{
    free(set);
}

struct event_base *mail_session_set_base(const struct mail_session_set *set)
{
    return set->base;
}

struct mail_listeners *mail_session_set_listeners(const struct mail_session_set *set)
{
    return set->listeners;
}

size_t mail_session_set_count(const struct mail_session_set *set)
{
    return set->count;
}

void mail_session_set_shutdown(struct mail_session_set *set)
{
    struct mail_session_io *io = set->sessions;
    while (io != NULL) {
        struct mail_session_io *next = io->next; /* the session may go meanwhile */
        io->ops->goodbye(io->owner, "Server shutting down.");
        io = next;
    }
}

void mail_session_set_free_sessions(struct mail_session_set *set)
{
    while (set->sessions != NULL)
        set->sessions->ops->free(set->sessions->owner);
}

bool mail_listeners_peer_trusted(const struct mail_listeners *ls, const struct sockaddr *peer)
{
    return peer->sa_family != AF_UNIX && cidr_list_match(&ls->trusted, peer);
}

void mail_listeners_attach(struct mail_session_set *set, struct mail_session_io *io)
{
    struct mail_listeners *ls = set->listeners;
    pthread_mutex_lock(&ls->lock);
    unsigned long long id = ++ls->session_ids;
    pthread_mutex_unlock(&ls->lock);
    snprintf(io->id, sizeof(io->id), "%llx", id);
    io->prev = NULL;
    io->next = set->sessions;
    if (set->sessions != NULL)
        set->sessions->prev = io;
    set->sessions = io;
    set->count++;
    metric_add(ls->p.connections_total, 1);
}

void mail_listeners_detach(struct mail_session_set *set, struct mail_session_io *io)
{
    DLIST_UNLINK(set->sessions, io);
    io->next = io->prev = NULL;
    set->count--;
    release_ip_text(set->listeners, io->conn_ip);
    conn_slots_release(set->listeners->slots);
}

bool mail_listeners_user_add(struct mail_listeners *ls, const char *username)
{
    pthread_mutex_lock(&ls->lock);
    uintptr_t n = (uintptr_t)smap_get(ls->per_user, username);
    int64_t limit = ls->p.cfg->max_connections_per_user;
    bool ok = limit <= 0 || n < (uintptr_t)limit;
    if (ok)
        smap_put(ls->per_user, username, (void *)(n + 1));
    pthread_mutex_unlock(&ls->lock);
    return ok;
}

void mail_listeners_user_remove(struct mail_listeners *ls, const char *username)
{
    pthread_mutex_lock(&ls->lock);
    uintptr_t n = (uintptr_t)smap_get(ls->per_user, username);
    if (n <= 1)
        smap_remove(ls->per_user, username);
    else
        smap_put(ls->per_user, username, (void *)(n - 1));
    pthread_mutex_unlock(&ls->lock);
}
