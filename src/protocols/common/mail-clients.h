/* The services a mail protocol server (imap, pop3) talks to, started with
 * its listeners: the auth service client and, when configured, the warden
 * client that registers its logged-in sessions.
 *
 * Ownership: the caller owns what is returned in *auth and *warden (also
 * after a failure, when one of them may already be set) and frees them
 * with auth_client_free() / warden_client_free(). */
#ifndef PETREL_PROTOCOLS_COMMON_MAIL_CLIENTS_H
#define PETREL_PROTOCOLS_COMMON_MAIL_CLIENTS_H

#include "core/error.h"
#include "protocols/common/mail-listeners.h"
#include "protocols/common/mail-login-config.h"
#include "clients/auth/auth-client.h"
#include "clients/warden/warden-client.h"

#include <event2/event.h>
#include <stdbool.h>

/* Creates the auth client (cfg->auth_addr) and, with cfg->warden_addr set,
 * the warden client under `instance` (*warden stays NULL without it), both
 * on `base`. False with err at the first failure. */
bool mail_clients_connect(struct event_base *base, const struct mail_login_config *cfg,
                          const char *instance, struct auth_client **auth,
                          struct warden_client **warden, struct petrel_error *err);
/* Opens `listeners`, then mail_clients_connect() under the listeners'
 * instance name (which outlives a restart, so the warden reaps the old
 * process's sessions when the new one says HELLO). */
bool mail_clients_start(struct event_base *base, const struct mail_login_config *cfg,
                        struct mail_listeners *listeners, struct auth_client **auth,
                        struct warden_client **warden, struct petrel_error *err);

#endif
