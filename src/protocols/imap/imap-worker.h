/* An IMAP worker: a thread running an event loop of its own, with its own
 * storage, auth client, warden client and IDLE watch hub, for the sessions
 * the server hands it (imap.workers > 1). A session never leaves its
 * worker, so nothing of a session is shared between threads; what workers
 * share (the configuration, the listeners' counts, the TLS context, the
 * metrics) is read-only or locked.
 *
 * Why threads: a command that blocks (fsync under mail.fsync: always, a
 * cold disk read) stalls only its own worker's sessions, and the sessions
 * use every core. Folder state is on disk under file locks, as between
 * processes, so two workers' sessions on one folder see each other's
 * changes exactly as two processes would. */
#ifndef PETREL_PROTOCOLS_IMAP_WORKER_H
#define PETREL_PROTOCOLS_IMAP_WORKER_H

#include "core/error.h"
#include "protocols/imap/imap-private.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct imap_worker;

/* Starts worker `index` (from 0) of `count`: copies the shared parts of
 * `shared` (cfg, listeners, tls, limits, metrics), makes its loop, a
 * storage with the configuration of `storage`, and its clients (warden
 * instance `instance` + "#<index>"), then starts the thread. NULL with err
 * when any of it fails. */
struct imap_worker *imap_worker_start(const struct imap_server_ctx *shared,
                                      struct metrics_registry *metrics, const char *instance,
                                      unsigned index, struct petrel_error *err);
/* Hands an accepted descriptor (counted by the listeners) to the worker,
 * which starts a session on it; from the listeners' loop. */
void imap_worker_hand(struct imap_worker *w, int fd, bool tls, const struct sockaddr *peer);
/* Asks the worker to say BYE to each of its sessions (they close once their
 * output has left); returns at once. */
void imap_worker_shutdown(struct imap_worker *w);
/* Frees the worker's sessions now, stops its loop, waits for the thread and
 * frees the worker (NULL is ignored). */
void imap_worker_stop(struct imap_worker *w);

#endif
