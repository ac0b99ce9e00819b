/* The login component: one director client for every front. */
#include "server/login-service.h"

#include "clients/ring/director-client.h"
#include "clients/ring/ring-auth.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/tls.h"
#include "protocols/lmtp/lmtp-proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct login_service {
    const struct login_config *cfg;
    struct director_client *directors;
    char address[128];
    SSL_CTX *lmtp_backend_tls; /* login.backend_tls for the LMTP front */
    struct lmtp_proxy *lmtp;   /* the LMTP front, when login.lmtp is given */
};

/* The LMTP front (protocols/lmtp/lmtp-proxy.h) on the shared director
 * client. */
static bool start_lmtp(struct login_service *ls, const struct service_env *env,
                       struct petrel_error *err)
{
    const struct login_config *cfg = ls->cfg;
    if (!cfg->lmtp.enabled)
        return true;
    if (cfg->backend_tls) {
        ls->lmtp_backend_tls = tls_client_ctx_new(cfg->backend_tls_ca_file, NULL, NULL, err);
        if (ls->lmtp_backend_tls == NULL)
            return false;
    }
    struct lmtp_proxy_deps deps = {
        .directors = ls->directors,
        .backend_tls = ls->lmtp_backend_tls,
        .transient_retries = (int)cfg->transient_retries,
        .director_timeout_ms = cfg->director_timeout_ms,
        .backend_timeout_ms = cfg->backend_timeout_ms,
    };
    ls->lmtp = lmtp_proxy_start(env, &cfg->lmtp, &deps, err);
    return ls->lmtp != NULL;
}

struct login_service *login_service_start(const struct service_env *env,
                                          const struct login_config *cfg, struct petrel_error *err)
{
    struct login_service *ls = xcalloc(1, sizeof(*ls));
    ls->cfg = cfg;
    char *secret = NULL;
    if (!login_config_ring_secret(cfg, &secret, err)) {
        free(ls);
        return NULL;
    }
    char host[128] = "localhost", name[192];
    gethostname(host, sizeof(host) - 1);
    snprintf(name, sizeof(name), "login@%.120s", host);
    struct director_client_config dcc = {
        .addresses = (const char *const *)cfg->directors,
        .name = name,
        .secret = secret,
        .timeout_ms = cfg->director_timeout_ms,
    };
    ls->directors = director_client_new(env->base, &dcc, NULL, NULL, err);
    ring_secret_free(secret);
    if (ls->directors == NULL) {
        free(ls);
        return NULL;
    }
    snprintf(ls->address, sizeof(ls->address), "%s", cfg->directors[0]);
    if (!start_lmtp(ls, env, err)) {
        login_service_free(ls);
        return NULL;
    }
    if (ls->lmtp != NULL)
        snprintf(ls->address, sizeof(ls->address), "%s", lmtp_proxy_address(ls->lmtp));
    return ls;
}

const char *login_service_address(const struct login_service *ls)
{
    return ls->address;
}

void login_service_stop_accepting(struct login_service *ls)
{
    if (ls->lmtp != NULL)
        lmtp_proxy_stop_accepting(ls->lmtp);
}

size_t login_service_in_flight(const struct login_service *ls)
{
    return ls->lmtp != NULL ? lmtp_proxy_sessions(ls->lmtp) : 0;
}

void login_service_free(struct login_service *ls)
{
    if (ls == NULL)
        return;
    lmtp_proxy_free(ls->lmtp); /* before the director client it uses */
    if (ls->lmtp_backend_tls != NULL)
        SSL_CTX_free(ls->lmtp_backend_tls);
    director_client_free(ls->directors);
    free(ls);
}
