/* Benchmark clients' user lists: "user<TAB>password" lines written by the
 * bench scripts. Shared by auth-bench and imap-bench. */
#ifndef PETREL_BENCH_USERS_H
#define PETREL_BENCH_USERS_H

#include <stddef.h>

struct bench_credential {
    char *user;
    char *password;
};

/* Loads `path`; exits 2 (naming `prog`) when it cannot be read or holds no user. */
size_t bench_users_load(const char *prog, const char *path, struct bench_credential **out);
void bench_users_free(struct bench_credential *users, size_t count);

#endif
