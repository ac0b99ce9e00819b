/* libFuzzer target: maildir file names (storage/maildir/maildir-filename.h).
 * Input: a file name (made NUL-terminated; an embedded NUL ends it).
 *   A parsed name rebuilds (flags in Dovecot's order) into a name that
 *   parses to the same base, sizes, flags, keywords and unknown letters, and
 *   rebuilding that gives the same name. The first bytes also choose flags
 *   and keywords for a second name on the same base, which must parse back
 *   to exactly those flags. */
#include "storage/maildir/maildir-filename.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void assert_same(const struct maildir_filename *a, const struct maildir_filename *b)
{
    assert(a->base_len == b->base_len && memcmp(a->base, b->base, a->base_len) == 0);
    assert(a->has_size == b->has_size && (!a->has_size || a->size == b->size));
    assert(a->has_vsize == b->has_vsize && (!a->has_vsize || a->vsize == b->vsize));
    assert(a->flags == b->flags && a->keywords == b->keywords);
    assert(strcmp(a->unknown_flags, b->unknown_flags) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *name = malloc(size + 1);
    memcpy(name, data, size);
    name[size] = '\0';
    struct maildir_filename fn;
    if (!maildir_filename_parse(name, &fn)) {
        free(name);
        return 0;
    }
    assert(fn.base_len > 0 && fn.base_len <= strlen(name));
    assert(memchr(fn.base, ':', fn.base_len) == NULL);
    assert((fn.flags & ~MAIL_FLAG_ALL) == 0 && fn.keywords < (1u << MAILDIR_MAX_KEYWORDS));
    assert(strlen(fn.unknown_flags) < sizeof(fn.unknown_flags));

    struct buf one = {0};
    maildir_filename_build(fn.base, fn.base_len, fn.flags, fn.keywords, fn.unknown_flags, &one);
    struct maildir_filename fn2;
    assert(maildir_filename_parse(one.data, &fn2));
    assert(fn2.has_info);
    assert_same(&fn, &fn2);
    struct buf two = {0};
    maildir_filename_build(fn2.base, fn2.base_len, fn2.flags, fn2.keywords, fn2.unknown_flags,
                           &two);
    assert(two.len == one.len && memcmp(two.data, one.data, one.len) == 0);

    /* Chosen flags on the same base come back exactly. */
    uint32_t flags = 0, keywords = 0;
    for (size_t i = 0; i < size && i < 4; i++)
        keywords = keywords << 8 | data[i];
    flags = keywords & MAIL_FLAG_ALL;
    keywords &= (1u << MAILDIR_MAX_KEYWORDS) - 1;
    buf_reset(&two);
    maildir_filename_build(fn.base, fn.base_len, flags, keywords, "", &two);
    struct maildir_filename fn3;
    assert(maildir_filename_parse(two.data, &fn3));
    assert(fn3.flags == flags && fn3.keywords == keywords && fn3.unknown_flags[0] == '\0');
    assert(fn3.base_len == fn.base_len);

    buf_free(&one);
    buf_free(&two);
    free(name);
    return 0;
}
