/* The `pop3` component: POP3 (RFC 1939) with CAPA (RFC 2449), STLS
 * (RFC 2595) and SASL (RFC 5034) over the INBOX of Petrel's mail storage,
 * authenticating through the auth service. Listens in plain text (with STLS
 * when a certificate is configured) and with implicit TLS (995-style). */
#ifndef PETREL_PROTOCOLS_POP3_SERVER_H
#define PETREL_PROTOCOLS_POP3_SERVER_H

#include "core/error.h"
#include "protocols/pop3/pop3-config.h"
#include "net/service-env.h"
#include "protocols/common/mail-proxy.h"
#include "storage/mail-storage.h"

#include <stddef.h>

struct pop3_server;

/* Binds every listener; connects (lazily) to the auth service and, when
 * `warden_addr` is set, to the warden. `cfg` and `storage` must outlive the
 * server. NULL with `err` set when a listener or the TLS files fail. */
struct pop3_server *pop3_server_start(const struct service_env *env, const struct pop3_config *cfg,
                                      struct mail_storage *storage, struct petrel_error *err);
/* Proxy mode (a login proxy's POP3 front, docs/login-proxy.md): the same
 * AUTHORIZATION state, no storage, each login routed through `front`
 * (borrowed, outlives the server) to the user's backend and relayed. */
struct pop3_server *pop3_server_start_proxy(const struct service_env *env,
                                            const struct pop3_config *cfg,
                                            struct mail_proxy_front *front,
                                            struct petrel_error *err);
/* The backend dialogue of POP3 for mail_proxy_front_new(). */
extern const struct mail_proxy_protocol pop3_proxy_protocol;
/* The first listener's address. */
const char *pop3_server_address(const struct pop3_server *srv);
/* Closes the listeners and ends every session with "-ERR" (no deletions
 * are applied: RFC 1939 enters UPDATE only on QUIT); they close once their
 * output has left. */
void pop3_server_stop_accepting(struct pop3_server *srv);
/* Sessions still open. */
size_t pop3_server_sessions(const struct pop3_server *srv);
/* Frees every session and the server (NULL is ignored). */
void pop3_server_free(struct pop3_server *srv);

#endif
