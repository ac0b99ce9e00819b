/* The `imap` component: IMAP4rev1/IMAP4rev2 over Petrel's mail storage,
 * authenticating through the auth service. Listens in plain text (with
 * STARTTLS when a certificate is configured) and with implicit TLS. */
#ifndef PETREL_PROTOCOLS_IMAP_SERVER_H
#define PETREL_PROTOCOLS_IMAP_SERVER_H

#include "core/error.h"
#include "protocols/imap/imap-config.h"
#include "net/service-env.h"
#include "storage/mail-storage.h"

#include <stddef.h>

struct imap_server;

/* Binds every listener and connects (lazily) to the auth service. */
struct imap_server *imap_server_start(const struct service_env *env, const struct imap_config *cfg,
                                      struct mail_storage *storage, struct petrel_error *err);
/* The first listener's address. */
const char *imap_server_address(const struct imap_server *srv);
/* Closes the listeners and says BYE to every session (they close once
 * their output has left). */
void imap_server_stop_accepting(struct imap_server *srv);
/* Sessions still open. */
size_t imap_server_sessions(const struct imap_server *srv);
void imap_server_free(struct imap_server *srv);

#endif
