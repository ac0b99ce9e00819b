/* The warden's session registry: every IMAP, POP3 and submission session
 * that some component registered, with indexes by session id, by user and
 * by owner (the connection that registered it), and counts by service.
 *
 * Ownership and stale entries: a connection becomes an owner when it says
 * HELLO with its instance name and boot id (warden_registry_attach). Its
 * sessions go when it detaches (the connection closed: the process exited
 * or was killed and the kernel closed the socket), and every session of an
 * instance goes when the instance attaches again with a different boot id
 * (the process restarted before the old connection was seen to close). An
 * owner whose boot id is no longer its instance's current one is stale and
 * cannot register sessions. These removals are "reaped" (the caller counts
 * them); DISCONNECT is not.
 *
 * Limits: at most `max_sessions` sessions; a CONNECT beyond that is
 * refused. The registry copies every string it keeps and is not
 * thread-safe (the warden runs on one event loop). */
#ifndef PETREL_SERVICES_WARDEN_REGISTRY_H
#define PETREL_SERVICES_WARDEN_REGISTRY_H

#include "core/error.h"
#include "clients/warden/warden-client.h"
#include "clients/warden/warden-protocol.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct warden_registry;
struct warden_owner;

struct warden_registry *warden_registry_new(size_t max_sessions);
/* Frees every owner and session. */
void warden_registry_free(struct warden_registry *reg);
/* Sessions registered now. */
size_t warden_registry_sessions(const struct warden_registry *reg);

/* A connection said HELLO. Sessions of `instance` registered under another
 * boot id are removed; *reaped gets their number. Returns the owner handle
 * (freed by warden_registry_detach). */
struct warden_owner *warden_registry_attach(struct warden_registry *reg, const char *instance,
                                            const char *boot_id, size_t *reaped);
/* The owner's connection closed: removes its sessions and frees the owner.
 * Returns how many sessions were removed. */
size_t warden_registry_detach(struct warden_registry *reg, struct warden_owner *owner);
/* The instance name the owner gave in HELLO. */
const char *warden_owner_instance(const struct warden_owner *owner);
/* Sessions the owner holds. */
size_t warden_owner_sessions(const struct warden_owner *owner);

/* CONNECT: registers `s` (fields validated by the protocol layer) for
 * `owner`. An id the same instance registered before is updated and moves
 * to `owner` (a client re-sends its sessions after reconnecting). False
 * with err: PETREL_ERR_UNAVAILABLE when the registry is full,
 * PETREL_ERR_CONFLICT when the owner is stale or another instance holds
 * the id. */
bool warden_registry_connect(struct warden_registry *reg, struct warden_owner *owner,
                             const struct warden_session_info *s, struct petrel_error *err);
/* DISCONNECT: false when no session has that id. */
bool warden_registry_disconnect(struct warden_registry *reg, const char *id);

/* Calls `visit` for every session matching `service` and `user` (NULL:
 * any), sorted by user, then connected_at, then id. The info is borrowed
 * for the call; `visit` must not change the registry. Returns the number
 * visited. */
typedef void warden_session_visit(const struct warden_session_info *s, void *ctx);
size_t warden_registry_list(const struct warden_registry *reg, const char *service,
                            const char *user, warden_session_visit *visit, void *ctx);

/* Counts sessions matching the filters. With `by` WARDEN_BY_PROTOCOL or
 * WARDEN_BY_USER, `item` is called for every group with at least one
 * matching session, sorted by key (services in warden_services order).
 * Returns the total. */
typedef void warden_count_visit(const char *key, uint64_t count, void *ctx);
uint64_t warden_registry_count(const struct warden_registry *reg, enum warden_count_by by,
                               const char *service, const char *user, warden_count_visit *item,
                               void *ctx);

#endif
