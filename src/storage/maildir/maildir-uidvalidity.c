/* UIDVALIDITY for new folders: the time, but always above the last value
 * handed out in the same namespace root, so a folder deleted and created
 * again within a second never gets its predecessor's value (RFC 3501
 * 2.3.1.1: UIDs that did not persist need a greater UIDVALIDITY; a client
 * would otherwise keep its cache of the old folder's messages). The last
 * value lives in <root>/petrel-uidvalidity ("%08x\n"), read and written
 * under an exclusive flock so two processes creating folders agree. */
#include "storage/maildir/maildir-private.h"

#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define UIDVALIDITY_FILE "petrel-uidvalidity"

static uint32_t next_after(uint32_t last, uint32_t now)
{
    uint32_t next = now > last ? now : last + 1;
    return next == 0 ? 1 : next;
}

uint32_t maildir_uid_validity_next(struct mailbox *box)
{
    uint32_t now = (uint32_t)time(NULL);
    struct buf path = {0};
    struct petrel_error err;
    if (!mail_user_namespace_root(box->common.user, box->common.ns, &path, &err)) {
        buf_free(&path);
        return next_after(0, now);
    }
    buf_append_str(&path, "/" UIDVALIDITY_FILE);
    int fd = open(path.data, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        log_warn("storage", "cannot use the UIDVALIDITY file, using the time",
                 "path=%s error=\"%s\"", path.data, strerror(errno));
        if (fd >= 0)
            close(fd);
        buf_free(&path);
        return next_after(0, now);
    }
    char text[16] = {0};
    ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    uint32_t last = 0;
    if (n > 0) {
        char *end = NULL;
        unsigned long v = strtoul(text, &end, 16);
        if (end != text && (*end == '\n' || *end == '\0') && v <= UINT32_MAX)
            last = (uint32_t)v;
    }
    uint32_t next = next_after(last, now);
    char out[16];
    int len = snprintf(out, sizeof(out), "%08x\n", next);
    if (pwrite(fd, out, (size_t)len, 0) != len || ftruncate(fd, len) != 0)
        log_warn("storage", "cannot update the UIDVALIDITY file", "path=%s error=\"%s\"", path.data,
                 strerror(errno));
    flock(fd, LOCK_UN);
    close(fd);
    buf_free(&path);
    return next;
}
