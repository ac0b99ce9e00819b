#include "bench-users.h"

#include "core/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t bench_users_load(const char *prog, const char *path, struct bench_credential **out)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        exit(2);
    }
    size_t n = 0, cap = 0;
    struct bench_credential *v = NULL;
    char line[1024];
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        char *tab = strchr(line, '\t');
        if (tab == NULL)
            continue;
        *tab = '\0';
        v = xgrow(v, &cap, n + 1, sizeof(*v));
        v[n].user = xstrdup(line);
        v[n].password = xstrdup(tab + 1);
        n++;
    }
    fclose(f);
    if (n == 0) {
        fprintf(stderr, "%s: no users in %s\n", prog, path);
        exit(2);
    }
    *out = v;
    return n;
}

void bench_users_free(struct bench_credential *users, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        free(users[i].user);
        free(users[i].password);
    }
    free(users);
}
