/* The component table (component.h): one line per component, in start
 * order. */
#include "server/component.h"

#include <string.h>

extern const struct component_def component_auth;
extern const struct component_def component_director;
extern const struct component_def component_monitor;
extern const struct component_def component_warden;
extern const struct component_def component_imap;
extern const struct component_def component_lmtp;
extern const struct component_def component_pop3;
extern const struct component_def component_quota_status;
extern const struct component_def component_backend_api;

const struct component_def *const component_table[] = {
    &component_auth,         /* the front ends ask it at login */
    &component_director,     /* routes users to backends */
    &component_monitor,      /* probes backends, tells the directors */
    &component_warden,       /* the session registry */
    &component_imap,         /* mail front end */
    &component_lmtp,         /* delivery */
    &component_pop3,         /* mail front end */
    &component_quota_status, /* Postfix's policy service */
    &component_backend_api,  /* last: reports on the others */
    NULL,
};

size_t component_count(void)
{
    return sizeof(component_table) / sizeof(component_table[0]) - 1;
}

const struct component_def *component_find(const char *name)
{
    for (size_t i = 0; component_table[i] != NULL; i++) {
        if (strcmp(component_table[i]->name, name) == 0)
            return component_table[i];
    }
    return NULL;
}
