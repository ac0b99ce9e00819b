/* The login component: one hub (directors, backend TLS, the proxied
 * sessions) and the IMAP and POP3 fronts on it. */
#include "server/login-service.h"

#include "clients/ring/ring-auth.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/tls.h"
#include "protocols/common/mail-proxy.h"
#include "protocols/imap/imap-server.h"
#include "protocols/lmtp/lmtp-proxy.h"
#include "protocols/pop3/pop3-server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct login_service {
    const struct login_config *cfg;
    SSL_CTX *backend_tls;
    struct mail_proxy_hub *hub;
    struct imap_config imap_cfg; /* the front's keys as an imap: section */
    struct pop3_config pop3_cfg;
    struct mail_proxy_front *imap_front;
    struct mail_proxy_front *pop3_front;
    struct imap_server *imap;
    struct pop3_server *pop3;
    SSL_CTX *lmtp_backend_tls; /* login.backend_tls for the LMTP front */
    struct lmtp_proxy *lmtp;   /* the LMTP front, when login.lmtp is given */
    char address[128];
};

/* The front's mail keys, borrowed: the protocol servers read them as their
 * own section. */
static void imap_cfg_from(struct imap_config *ic, const struct login_front_config *f)
{
    memset(ic, 0, sizeof(*ic));
    ic->login = f->login;
    ic->login.idle_timeout_ms = 30 * 60 * 1000; /* before login the login deadline rules */
    ic->max_line_length = f->max_line_length;
    ic->max_literal_size = 16 * 1024; /* nothing big before login */
    ic->workers = 1;
}

static void pop3_cfg_from(struct pop3_config *pc, const struct login_front_config *f)
{
    memset(pc, 0, sizeof(*pc));
    pc->login = f->login;
    pc->login.idle_timeout_ms = 10 * 60 * 1000;
    pc->max_line_length = f->max_line_length;
    pc->max_auth_failures = f->max_auth_failures;
    /* Plain-text passwords: over TLS and from loopback, as IMAP's front
     * (pop3.secure_nets' default; the front has no key for it). */
    static char *const loopback[] = {"127.0.0.0/8", "::1/128", NULL};
    pc->secure_nets = (char **)loopback;
}

struct login_service *login_service_start(const struct service_env *env,
                                          const struct login_config *cfg, const char *internal_ca,
                                          struct petrel_error *err)
{
    struct login_service *ls = xcalloc(1, sizeof(*ls));
    ls->cfg = cfg;
    if (cfg->backend_tls) {
        const char *ca =
            cfg->backend_tls_ca_file[0] != '\0' ? cfg->backend_tls_ca_file : internal_ca;
        if (ca == NULL || ca[0] == '\0') {
            petrel_error_set(err, PETREL_ERR_INVALID,
                             "login.backend_tls: no CA (set login.backend_tls_ca_file or "
                             "internal_tls.ca_file)");
            goto fail;
        }
        ls->backend_tls = tls_client_ctx_new(ca, NULL, NULL, err);
        if (ls->backend_tls == NULL)
            goto fail;
    }
    char *secret = NULL;
    if (!login_config_ring_secret(cfg, &secret, err))
        goto fail;
    char host[128] = "localhost", name[192];
    gethostname(host, sizeof(host) - 1);
    snprintf(name, sizeof(name), "login@%.120s", host);
    const struct mail_proxy_hub_config hc = {
        .directors = (const char *const *)cfg->directors,
        .name = name,
        .ring_secret = secret,
        .director_timeout_ms = cfg->director_timeout_ms,
        .transient_retries = (int)cfg->transient_retries,
        .backend_tls = ls->backend_tls,
        .backend_timeout_ms = cfg->backend_timeout_ms,
        .idle_timeout_ms = cfg->idle_timeout_ms,
    };
    ls->hub = mail_proxy_hub_new(env->base, &hc, err);
    ring_secret_free(secret);
    if (ls->hub == NULL)
        goto fail;
    if (cfg->imap.enabled) {
        imap_cfg_from(&ls->imap_cfg, &cfg->imap);
        ls->imap_front = mail_proxy_front_new(ls->hub, &imap_proxy_protocol, cfg->imap.backend_port,
                                              env->metrics);
        ls->imap = imap_server_start_proxy(env, &ls->imap_cfg, ls->imap_front, err);
        if (ls->imap == NULL)
            goto fail;
        snprintf(ls->address, sizeof(ls->address), "%s", imap_server_address(ls->imap));
    }
    if (cfg->pop3.enabled) {
        pop3_cfg_from(&ls->pop3_cfg, &cfg->pop3);
        ls->pop3_front = mail_proxy_front_new(ls->hub, &pop3_proxy_protocol, cfg->pop3.backend_port,
                                              env->metrics);
        ls->pop3 = pop3_server_start_proxy(env, &ls->pop3_cfg, ls->pop3_front, err);
        if (ls->pop3 == NULL)
            goto fail;
        if (ls->address[0] == '\0')
            snprintf(ls->address, sizeof(ls->address), "%s", pop3_server_address(ls->pop3));
    }
    if (cfg->lmtp.enabled) { /* merge resolution in the fleet branch (testing only) */
        if (cfg->backend_tls) {
            ls->lmtp_backend_tls = tls_client_ctx_new(cfg->backend_tls_ca_file, NULL, NULL, err);
            if (ls->lmtp_backend_tls == NULL)
                goto fail;
        }
        struct lmtp_proxy_deps deps = {
            .directors = mail_proxy_hub_directors(ls->hub),
            .backend_tls = ls->lmtp_backend_tls,
            .transient_retries = (int)cfg->transient_retries,
            .director_timeout_ms = cfg->director_timeout_ms,
            .backend_timeout_ms = cfg->backend_timeout_ms,
        };
        ls->lmtp = lmtp_proxy_start(env, &cfg->lmtp, &deps, err);
        if (ls->lmtp == NULL)
            goto fail;
        if (ls->address[0] == '\0')
            snprintf(ls->address, sizeof(ls->address), "%s", lmtp_proxy_address(ls->lmtp));
    }
    if (ls->address[0] == '\0')
        snprintf(ls->address, sizeof(ls->address), "%s", cfg->directors[0]);
    return ls;
fail:
    login_service_free(ls);
    return NULL;
}

const char *login_service_address(const struct login_service *ls)
{
    return ls->address;
}

void login_service_stop_accepting(struct login_service *ls)
{
    if (ls->imap != NULL)
        imap_server_stop_accepting(ls->imap);
    if (ls->pop3 != NULL)
        pop3_server_stop_accepting(ls->pop3);
    if (ls->lmtp != NULL)
        lmtp_proxy_stop_accepting(ls->lmtp);
}

size_t login_service_in_flight(const struct login_service *ls)
{
    size_t n = 0;
    if (ls->imap != NULL)
        n += imap_server_sessions(ls->imap);
    if (ls->pop3 != NULL)
        n += pop3_server_sessions(ls->pop3);
    if (ls->lmtp != NULL)
        n += lmtp_proxy_sessions(ls->lmtp);
    return n;
}

void login_service_free(struct login_service *ls)
{
    if (ls == NULL)
        return;
    lmtp_proxy_free(ls->lmtp); /* before the director client it uses */
    if (ls->lmtp_backend_tls != NULL)
        SSL_CTX_free(ls->lmtp_backend_tls);
    imap_server_free(ls->imap);
    pop3_server_free(ls->pop3);
    mail_proxy_front_free(ls->imap_front);
    mail_proxy_front_free(ls->pop3_front);
    mail_proxy_hub_free(ls->hub);
    if (ls->backend_tls != NULL)
        SSL_CTX_free(ls->backend_tls);
    free(ls);
}
