#include "ctl/ctl.h"

#include "core/slice.h"
#include "version.h"

#include <limits.h>
#include <curl/curl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ctl_main(int argc, char **argv);

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? v : fallback;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: petrelctl [options] backend <command> [args]\n"
            "       petrelctl [options] auth test|user <user> [args]   (auth service)\n"
            "       petrelctl [options] director <command> [args]      (director admin API)\n"
            "options:\n"
            "  --backend-url URL     backend-plane API (env PETREL_BACKEND_URL, "
            "default http://127.0.0.1:9105)\n"
            "  --backend-token TOK   bearer token (env BACKEND_API_TOKEN)\n"
            "  --admin-url URL       director admin API (env PETREL_ADMIN_URL, "
            "default http://localhost:9103)\n"
            "  --admin-token TOK     (env PETREL_ADMIN_TOKEN, fallback DIRECTOR_API_TOKEN)\n"
            "  --cacert FILE         CA for https URLs; --cert FILE --key FILE for mTLS\n"
            "  --timeout SECS        request timeout (default 60)\n"
            "  --json                print raw JSON\n"
            "exit codes: 0 ok, 1 the server said no, 2 usage, 3 cannot connect\n");
}

int ctl_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"backend-url", required_argument, NULL, 'b'},
        {"backend-token", required_argument, NULL, 't'},
        {"admin-url", required_argument, NULL, 'a'},
        {"admin-token", required_argument, NULL, 'T'},
        {"cacert", required_argument, NULL, 'C'},
        {"cert", required_argument, NULL, 'E'},
        {"key", required_argument, NULL, 'K'},
        {"timeout", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, 'j'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct ctl_options opts;
    memset(&opts, 0, sizeof(opts));
    opts.backend.url = env_or("PETREL_BACKEND_URL", "http://127.0.0.1:9105");
    opts.backend.token = env_or("BACKEND_API_TOKEN", NULL);
    opts.admin.url = env_or("PETREL_ADMIN_URL", "http://localhost:9103");
    opts.admin.token = env_or("PETREL_ADMIN_TOKEN", env_or("DIRECTOR_API_TOKEN", NULL));
    long timeout = 60;
    int c;
    /* '+' stops at the first non-option so subcommands keep their own flags. */
    while ((c = getopt_long(argc, argv, "+hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            opts.backend.url = optarg;
            break;
        case 't':
            opts.backend.token = optarg;
            break;
        case 'a':
            opts.admin.url = optarg;
            break;
        case 'T':
            opts.admin.token = optarg;
            break;
        case 'C':
            opts.backend.cacert = opts.admin.cacert = optarg;
            break;
        case 'E':
            opts.backend.cert = opts.admin.cert = optarg;
            break;
        case 'K':
            opts.backend.key = opts.admin.key = optarg;
            break;
        case 'o': {
            int64_t v = 0;
            if (!str_parse_i64(optarg, 1, LONG_MAX, &v)) {
                fprintf(stderr, "petrelctl: --timeout needs a positive number of seconds\n");
                return CTL_USAGE;
            }
            timeout = (long)v;
            break;
        }
        case 'j':
            opts.json = true;
            break;
        case 'V':
            printf("petrelctl %s\n", PETREL_VERSION);
            return CTL_OK;
        case 'h':
            usage(stdout);
            return CTL_OK;
        default:
            usage(stderr);
            return CTL_USAGE;
        }
    }
    opts.backend.timeout_secs = timeout;
    opts.admin.timeout_secs = timeout;
    if (optind >= argc) {
        usage(stderr);
        return CTL_USAGE;
    }
    const char *group = argv[optind];
    int rest_argc = argc - optind - 1;
    char **rest_argv = argv + optind + 1;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc;
    if (strcmp(group, "backend") == 0) {
        rc = ctl_backend_main(&opts, rest_argc, rest_argv);
    } else if (strcmp(group, "auth") == 0) {
        rc = ctl_auth_main(&opts, rest_argc, rest_argv);
    } else if (strcmp(group, "director") == 0) {
        rc = ctl_director_main(&opts, rest_argc, rest_argv);
    } else {
        fprintf(stderr, "petrelctl: unknown command group '%s'\n", group);
        usage(stderr);
        rc = CTL_USAGE;
    }
    curl_global_cleanup();
    return rc;
}
