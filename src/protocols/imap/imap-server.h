/* The `imap` component: IMAP4rev1/IMAP4rev2 over Petrel's mail storage,
 * authenticating through the auth service. Listens in plain text (with
 * STARTTLS when a certificate is configured) and with implicit TLS. */
#ifndef PETREL_PROTOCOLS_IMAP_SERVER_H
#define PETREL_PROTOCOLS_IMAP_SERVER_H

#include "core/error.h"
#include "protocols/imap/imap-config.h"
#include "net/service-env.h"
#include "protocols/common/mail-proxy.h"
#include "storage/mail-storage.h"

#include <stddef.h>

struct imap_server;

/* Binds every listener and connects (lazily) to the auth service. */
struct imap_server *imap_server_start(const struct service_env *env, const struct imap_config *cfg,
                                      struct mail_storage *storage, struct petrel_error *err);
/* Proxy mode (a login proxy's IMAP front, docs/login-proxy.md): the same
 * sessions before login, no storage, each login routed through `front`
 * (borrowed, outlives the server) to the user's backend and relayed. On
 * the process's loop (imap.workers does not apply). */
struct imap_server *imap_server_start_proxy(const struct service_env *env,
                                            const struct imap_config *cfg,
                                            struct mail_proxy_front *front,
                                            struct petrel_error *err);
/* The backend dialogue of IMAP for mail_proxy_front_new(). */
extern const struct mail_proxy_protocol imap_proxy_protocol;
/* The first listener's address. */
const char *imap_server_address(const struct imap_server *srv);
/* Closes the listeners and says BYE to every session (they close once
 * their output has left). */
void imap_server_stop_accepting(struct imap_server *srv);
/* Sessions still open. */
size_t imap_server_sessions(const struct imap_server *srv);
void imap_server_free(struct imap_server *srv);

#endif
