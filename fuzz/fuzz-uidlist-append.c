/* libFuzzer target: reading only the lines appended to a dovecot-uidlist
 * (uidlist_read_appended, storage/maildir/maildir-uidlist.h), checked
 * against reading the whole file.
 * Input: a file, a 0xFF byte, then bytes appended to it (no 0xFF: nothing
 * appended).
 *   The first part is written to a file and read whole. The second part is
 *   appended to the same file (same inode), then:
 *   - when uidlist_read_appended() says yes, reading the grown file whole
 *     must succeed and give exactly the same list (header values, entries,
 *     extensions, next UID, size read);
 *   - when it says no, the list must be exactly as it was. */
#include "storage/maildir/maildir-uidlist.h"
#include "uidlist-same.h"

#include <assert.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void assert_same(const struct uidlist *a, const struct uidlist *b)
{
    uidlist_assert_same(a, b);
    assert(a->file_size == b->file_size);
}

/* One file for the whole run, rewritten in place (its inode stays), and
 * removed when the run ends. */
static char scratch[64];

static void remove_scratch(void)
{
    unlink(scratch);
}

static const char *scratch_path(void)
{
    if (scratch[0] == '\0') {
        snprintf(scratch, sizeof(scratch), "/tmp/fuzz-uidlist-append-%ld", (long)getpid());
        atexit(remove_scratch);
    }
    return scratch;
}

static void write_at(int fd, const uint8_t *p, size_t len, off_t off)
{
    while (len > 0) {
        ssize_t w = pwrite(fd, p, len, off);
        assert(w > 0);
        p += w;
        len -= (size_t)w;
        off += w;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *cut = memchr(data, 0xff, size);
    size_t first = cut != NULL ? (size_t)(cut - data) : size;
    const uint8_t *more = cut != NULL ? cut + 1 : data + size;
    size_t more_len = cut != NULL ? size - first - 1 : 0;

    const char *path = scratch_path();
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert(fd >= 0);
    assert(ftruncate(fd, 0) == 0);
    write_at(fd, data, first, 0);

    struct uidlist list, before, whole;
    struct petrel_error err;
    if (!uidlist_read(AT_FDCWD, path, &list, &err)) {
        close(fd);
        return 0;
    }
    assert(uidlist_read(AT_FDCWD, path, &before, &err));
    write_at(fd, more, more_len, (off_t)first);
    close(fd);

    if (uidlist_read_appended(AT_FDCWD, path, &list)) {
        if (!uidlist_read(AT_FDCWD, path, &whole, &err)) {
            fprintf(stderr, "appended read accepted what a whole read refuses: %s\n", err.message);
            abort();
        }
        assert_same(&list, &whole);
        uidlist_free(&whole);
    } else {
        assert_same(&list, &before);
    }
    uidlist_free(&before);
    uidlist_free(&list);
    return 0;
}
