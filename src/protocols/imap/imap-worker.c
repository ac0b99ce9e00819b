/* IMAP worker threads (see imap-worker.h): the hand-off queue from the
 * listeners' loop, the thread's loop, and the orderly stop. */
#include "protocols/imap/imap-worker.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "net/loop-drain.h"
#include "protocols/common/mail-clients.h"
#include "clients/warden/warden-protocol.h"
#include "storage/acl/acl-registry.h"
#include "storage/metadata/metadata-store.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <unistd.h>

/* An accepted connection on its way to the worker's loop. */
struct handoff {
    struct handoff *next;
    int fd;
    bool tls;
    struct sockaddr_storage peer;
};

struct imap_worker {
    struct imap_server_ctx ctx; /* this worker's loop, storage, clients, sessions */
    unsigned index;
    pthread_t thread;
    bool thread_started;
    int wake_fd; /* eventfd: the listeners' loop has put something in the queue */
    struct event *wake_ev;
    /* Written by the listeners' loop, read by the worker. */
    pthread_mutex_t lock;
    struct handoff *queue_head;
    struct handoff *queue_tail;
    bool shutdown_requested;
    bool stop_requested;
};

static void wake(struct imap_worker *w)
{
    uint64_t one = 1;
    while (write(w->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

/* Connections still queued when the worker stops never become sessions. */
static void drop_queue(struct imap_worker *w, struct handoff *h)
{
    while (h != NULL) {
        struct handoff *next = h->next;
        close(h->fd);
        mail_listeners_release(w->ctx.listeners, (const struct sockaddr *)&h->peer);
        free(h);
        h = next;
    }
}

static void start_sessions(struct imap_worker *w, struct handoff *h)
{
    while (h != NULL) {
        struct handoff *next = h->next;
        struct bufferevent *bev =
            mail_listeners_bufferevent(w->ctx.listeners, w->ctx.base, h->fd, h->tls);
        if (bev == NULL)
            mail_listeners_release(w->ctx.listeners, (const struct sockaddr *)&h->peer);
        else
            imap_session_start(&w->ctx, bev, h->tls, (const struct sockaddr *)&h->peer);
        free(h);
        h = next;
    }
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct imap_worker *w = arg;
    uint64_t n;
    while (read(fd, &n, sizeof(n)) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&w->lock);
    struct handoff *queued = w->queue_head;
    w->queue_head = w->queue_tail = NULL;
    bool shutdown = w->shutdown_requested;
    bool stop = w->stop_requested;
    w->shutdown_requested = false;
    pthread_mutex_unlock(&w->lock);
    if (stop) {
        drop_queue(w, queued);
        mail_session_set_free_sessions(w->ctx.sessions);
        event_base_loopbreak(w->ctx.base);
        return;
    }
    start_sessions(w, queued);
    if (shutdown)
        mail_session_set_shutdown(w->ctx.sessions);
}

static void *worker_main(void *arg)
{
    struct imap_worker *w = arg;
    event_base_loop(w->ctx.base, EVLOOP_NO_EXIT_ON_EMPTY);
    /* What belongs to this loop goes with it, on its own thread. */
    mailbox_watch_hub_free(w->ctx.watches); /* after the sessions' watches */
    w->ctx.watches = NULL;
    warden_client_free(w->ctx.warden); /* after the sessions' registrations */
    w->ctx.warden = NULL;
    auth_client_free(w->ctx.auth);
    w->ctx.auth = NULL;
    return NULL;
}

static void worker_free(struct imap_worker *w)
{
    drop_queue(w, w->queue_head);
    mailbox_watch_hub_free(w->ctx.watches);
    warden_client_free(w->ctx.warden);
    auth_client_free(w->ctx.auth);
    if (w->wake_ev != NULL)
        event_free(w->wake_ev);
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    mail_session_set_free(w->ctx.sessions);
    mail_storage_free(w->ctx.storage);
    if (w->ctx.base != NULL) {
        net_loop_drain(w->ctx.base); /* everything with an event on it is gone */
        event_base_free(w->ctx.base);
    }
    pthread_mutex_destroy(&w->lock);
    free(w);
}

struct imap_worker *imap_worker_start(const struct imap_server_ctx *shared,
                                      struct metrics_registry *metrics, const char *instance,
                                      unsigned index, struct petrel_error *err)
{
    struct imap_worker *w = xcalloc(1, sizeof(*w));
    pthread_mutex_init(&w->lock, NULL);
    w->index = index;
    w->wake_fd = -1;
    /* The shared parts only; the rest is this worker's own. */
    w->ctx = (struct imap_server_ctx){
        .cfg = shared->cfg,
        .listeners = shared->listeners,
        .tls = shared->tls,
        .limits = shared->limits,
        .m = shared->m,
    };
    w->ctx.base = event_base_new();
    if (w->ctx.base == NULL) {
        petrel_error_set(err, PETREL_ERR_IO, "imap: worker %u: cannot create an event loop", index);
        goto fail;
    }
    w->ctx.sessions = mail_session_set_new(shared->listeners, w->ctx.base);
    w->ctx.storage = mail_storage_new_sibling(shared->storage, metrics);
    metadata_storage_bind_loop(w->ctx.storage, w->ctx.base);
    acl_registry_storage_bind_loop(w->ctx.storage, w->ctx.base);
    w->ctx.watches = mailbox_watch_hub_new(w->ctx.base, true);
    char worker_instance[WARDEN_INSTANCE_MAX + 1];
    snprintf(worker_instance, sizeof(worker_instance), "%.*s#%u", WARDEN_INSTANCE_MAX - 12,
             instance, index);
    if (!mail_clients_connect(w->ctx.base, &shared->cfg->login, worker_instance, &w->ctx.auth,
                              &w->ctx.warden, err))
        goto fail;
    w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->wake_fd < 0) {
        petrel_error_set(err, PETREL_ERR_IO, "imap: worker %u: eventfd: %s", index,
                         strerror(errno));
        goto fail;
    }
    w->wake_ev = event_new(w->ctx.base, w->wake_fd, EV_READ | EV_PERSIST, wake_cb, w);
    if (w->wake_ev == NULL || event_add(w->wake_ev, NULL) != 0) {
        petrel_error_set(err, PETREL_ERR_IO, "imap: worker %u: cannot watch its queue", index);
        goto fail;
    }
    /* Signals stay with the main loop: the thread starts with all blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        petrel_error_set(err, PETREL_ERR_IO, "imap: worker %u: cannot start a thread: %s", index,
                         strerror(rc));
        goto fail;
    }
    w->thread_started = true;
    return w;
fail:
    worker_free(w);
    return NULL;
}

void imap_worker_hand(struct imap_worker *w, int fd, bool tls, const struct sockaddr *peer)
{
    struct handoff *h = xcalloc(1, sizeof(*h));
    h->fd = fd;
    h->tls = tls;
    size_t len = peer->sa_family == AF_INET6  ? sizeof(struct sockaddr_in6)
                 : peer->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                              : sizeof(struct sockaddr_un);
    memcpy(&h->peer, peer, len);
    pthread_mutex_lock(&w->lock);
    if (w->queue_tail != NULL)
        w->queue_tail->next = h;
    else
        w->queue_head = h;
    w->queue_tail = h;
    pthread_mutex_unlock(&w->lock);
    wake(w);
}

void imap_worker_shutdown(struct imap_worker *w)
{
    pthread_mutex_lock(&w->lock);
    w->shutdown_requested = true;
    pthread_mutex_unlock(&w->lock);
    wake(w);
}

void imap_worker_stop(struct imap_worker *w)
{
    if (w == NULL)
        return;
    if (w->thread_started) {
        pthread_mutex_lock(&w->lock);
        w->stop_requested = true;
        pthread_mutex_unlock(&w->lock);
        wake(w);
        pthread_join(w->thread, NULL);
    }
    worker_free(w);
}
