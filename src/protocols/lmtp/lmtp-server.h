/* The `lmtp` component: LMTP (RFC 2033) delivery into Petrel's mail storage
 * over TCP and Unix sockets, recipients looked up through the auth service,
 * messages written by a pool of delivery threads (docs/lmtp.md). */
#ifndef PETREL_PROTOCOLS_LMTP_SERVER_H
#define PETREL_PROTOCOLS_LMTP_SERVER_H

#include "core/error.h"
#include "protocols/lmtp/lmtp-config.h"
#include "net/service-env.h"
#include "storage/mail-storage.h"

#include <stddef.h>

struct lmtp_server;

/* Binds every listener, starts the delivery threads (each with its own
 * storage built from `storage`'s configuration) and connects lazily to the
 * auth service. */
struct lmtp_server *lmtp_server_start(const struct service_env *env, const struct lmtp_config *cfg,
                                      struct mail_storage *storage, struct petrel_error *err);
struct lmtp_front_ops;
/* The same server as a front (lmtp-private.h): no storage, no delivery
 * threads; `ops` routes recipients and messages. Logs, listener refusals
 * and readiness go under `component`; the petrel_lmtp_* metrics are kept
 * apart (the front has its own), so a process running both counts only
 * its deliveries there. */
struct lmtp_server *lmtp_server_start_front(const struct service_env *env,
                                            const struct lmtp_config *cfg,
                                            const struct lmtp_front_ops *ops, void *arg,
                                            const char *component, struct petrel_error *err);
/* The first listener's address. */
const char *lmtp_server_address(const struct lmtp_server *srv);
/* Closes the listeners; idle sessions get "421" now, busy ones after their
 * transaction. */
void lmtp_server_stop_accepting(struct lmtp_server *srv);
/* Sessions still open. */
size_t lmtp_server_sessions(const struct lmtp_server *srv);
/* Frees sessions first, then waits for deliveries still running. */
void lmtp_server_free(struct lmtp_server *srv);

#endif
