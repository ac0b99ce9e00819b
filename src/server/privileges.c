#include "server/privileges.h"

#include "core/log.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

bool privileges_drop(const char *user, const char *group, bool allow_root,
                     struct petrel_error *err)
{
    if (geteuid() != 0)
        return true;
    if (user == NULL || *user == '\0') {
        if (allow_root) {
            log_warn("petreld", "running as root", "reason=\"allow_root is true\"");
            return true;
        }
        return petrel_error_set(err, PETREL_ERR_PERMISSION,
                                "refusing to run as root: set `user:` (and `group:`) in the "
                                "configuration, or `allow_root: true` for a test machine");
    }
    struct passwd *pw = getpwnam(user);
    if (pw == NULL)
        return petrel_error_set(err, PETREL_ERR_INVALID, "user '%s' does not exist", user);
    gid_t gid = pw->pw_gid;
    if (group != NULL && *group != '\0') {
        struct group *gr = getgrnam(group);
        if (gr == NULL)
            return petrel_error_set(err, PETREL_ERR_INVALID, "group '%s' does not exist", group);
        gid = gr->gr_gid;
    }
    if (pw->pw_uid == 0)
        return petrel_error_set(err, PETREL_ERR_PERMISSION, "user '%s' is root", user);
    if (setgroups(1, &gid) != 0 || setgid(gid) != 0 || setuid(pw->pw_uid) != 0)
        return petrel_error_set(err, PETREL_ERR_PERMISSION, "cannot switch to %s: %s", user,
                                strerror(errno));
    /* Prove it is permanent. */
    if (setuid(0) == 0 || geteuid() == 0)
        return petrel_error_set(err, PETREL_ERR_PERMISSION, "root privileges not dropped");
    log_info("petreld", "dropped privileges", "user=%s uid=%u gid=%u", user,
             (unsigned)pw->pw_uid, (unsigned)gid);
    return true;
}
