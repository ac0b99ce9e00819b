/* Whole-file advisory locks (flock) with a deadline.
 *
 * flock has no timeout of its own: a blocking LOCK_EX waits for ever on a
 * stuck holder, and a signal-based alarm is process-wide state. So the lock
 * is tried without blocking and retried with a growing sleep (50 us
 * doubling to 5 ms, never past the deadline), which keeps the wait short
 * for the usual brief holder and cheap for a long one. flock locks belong
 * to the open file description: threads sharing one descriptor share the
 * lock, so each holder needs its own open(). */
#ifndef PETREL_CORE_FILE_LOCK_H
#define PETREL_CORE_FILE_LOCK_H

#include <stdbool.h>
#include <stdint.h>

enum file_lock_result {
    FILE_LOCK_TAKEN,
    FILE_LOCK_TIMEOUT, /* still held by someone else at the deadline */
    FILE_LOCK_ERROR,   /* errno says why (EBADF, ENOLCK, ...) */
};

/* Takes a shared or exclusive lock on `fd`, waiting at most `timeout_ms`
 * (0: one try). *waited_ms (may be NULL): how long it waited. */
enum file_lock_result file_lock_take(int fd, bool exclusive, int64_t timeout_ms,
                                     int64_t *waited_ms);
/* Releases the lock (closing the descriptor releases it too). */
void file_lock_release(int fd);

#endif
