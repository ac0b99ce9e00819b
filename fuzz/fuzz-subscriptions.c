/* libFuzzer target: Dovecot's subscriptions file (storage/subscriptions.h).
 * Input: file contents, any bytes (version 2 or version 0).
 *   The parsed list is sorted and unique, names are non-empty and never end
 *   in '/'; it formats as version 2 with only printable ASCII, TAB and LF,
 *   which parses back without skipping a line to the same list, and
 *   formatting that gives the same bytes again. */
#include "storage/subscriptions.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct subscriptions subs;
    (void)subscriptions_parse((const char *)data, size, &subs);
    for (size_t i = 0; i < subs.count; i++) {
        const char *name = subs.names[i];
        size_t len = strlen(name);
        assert(len > 0 && name[len - 1] != '/');
        assert(i == 0 || strcmp(subs.names[i - 1], name) < 0);
        assert(subscriptions_contains(&subs, name));
    }
    size_t len;
    char *text = subscriptions_format(&subs, &len);
    assert(len >= 5 && memcmp(text, "V\t2\n\n", 5) == 0);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        assert(c == '\t' || c == '\n' || (c >= 0x20 && c < 0x7f));
    }
    struct subscriptions back;
    bool clean = subscriptions_parse(text, len, &back);
    assert(clean);
    assert(back.count == subs.count);
    for (size_t i = 0; i < subs.count; i++)
        assert(strcmp(back.names[i], subs.names[i]) == 0);
    size_t len2;
    char *again = subscriptions_format(&back, &len2);
    assert(len2 == len && memcmp(again, text, len) == 0);
    free(again);
    free(text);
    subscriptions_free(&back);
    subscriptions_free(&subs);
    return 0;
}
