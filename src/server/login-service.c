/* The login component: one director client for every front. */
#include "server/login-service.h"

#include "clients/ring/director-client.h"
#include "clients/ring/ring-auth.h"
#include "core/log.h"
#include "core/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct login_service {
    const struct login_config *cfg;
    struct director_client *directors;
    char address[128];
};

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
    return ls;
}

const char *login_service_address(const struct login_service *ls)
{
    return ls->address;
}

void login_service_stop_accepting(struct login_service *ls)
{
    (void)ls;
}

size_t login_service_in_flight(const struct login_service *ls)
{
    (void)ls;
    return 0;
}

void login_service_free(struct login_service *ls)
{
    if (ls == NULL)
        return;
    director_client_free(ls->directors);
    free(ls);
}
