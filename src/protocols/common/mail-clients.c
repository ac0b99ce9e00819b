/* Auth and warden clients of a mail protocol server (see mail-clients.h). */
#include "protocols/common/mail-clients.h"

#include "clients/warden/warden-protocol.h"

bool mail_clients_connect(struct event_base *base, const struct mail_login_config *cfg,
                          const char *instance, struct auth_client **auth,
                          struct warden_client **warden, struct petrel_error *err)
{
    *auth = auth_client_new(base, cfg->auth_addr, cfg->auth_timeout_ms, err);
    if (*auth == NULL)
        return false;
    if (cfg->warden_addr == NULL || *cfg->warden_addr == '\0')
        return true;
    *warden = warden_client_new(base, cfg->warden_addr, instance, cfg->auth_timeout_ms, err);
    return *warden != NULL;
}

bool mail_clients_start(struct event_base *base, const struct mail_login_config *cfg,
                        struct mail_listeners *listeners, struct auth_client **auth,
                        struct warden_client **warden, struct petrel_error *err)
{
    if (!mail_listeners_open(listeners, err))
        return false;
    char instance[WARDEN_INSTANCE_MAX + 1]; /* "<protocol>@<host>:<first listener>" */
    mail_listeners_instance(listeners, instance, sizeof(instance));
    return mail_clients_connect(base, cfg, instance, auth, warden, err);
}
