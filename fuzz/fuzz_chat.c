/* fuzz_chat — libFuzzer target for the chat-template renderer (tokenizer/chat) and template detection.
 *
 * Input: byte 0 picks the family (mod CHAT_FAMILY_COUNT, CHAT_NONE included); the rest, split at NUL bytes,
 * is: BOS text, EOS text, then (role, content) pairs, a role being "system", "user", "assistant" or anything
 * else. chat_render either fails with a message, or renders a NUL-terminated text that holds every message's
 * content (whitespace trimmed, as some templates do): none is dropped. The whole input, as a template text,
 * is detected as a known family or none.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat.h"

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

enum { MAX_PARTS = 34 };

/* s without leading and trailing whitespace: [*b, *e). */
static void trimmed(const char *s, const char **b, const char **e)
{
    const char *x = s, *y = s + strlen(s);
    while (x < y && strchr(" \t\n\r\f\v", *x)) x++;
    while (y > x && strchr(" \t\n\r\f\v", y[-1])) y--;
    *b = x;
    *e = y;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    enum chat_family f = (enum chat_family)(data[0] % CHAT_FAMILY_COUNT);
    char *text = malloc(size); /* the rest, NUL-terminated, split in place */
    REQUIRE(text);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    enum chat_family d = chat_detect(text);
    REQUIRE(d >= CHAT_NONE && d < CHAT_FAMILY_COUNT);

    const char *part[MAX_PARTS];
    int n = 0;
    for (char *p = text; n < MAX_PARTS && p <= text + size - 1;) {
        part[n++] = p;
        p += strlen(p) + 1;
    }
    static const char *const roles[] = {"system", "user", "assistant"};
    struct chat_msg msgs[(MAX_PARTS - 2) / 2];
    size_t n_msgs = 0;
    for (int i = 2; i + 1 < n; i += 2) {
        const char *r = part[i];
        if (strlen(r) == 1 && (unsigned char)r[0] < 3) r = roles[(unsigned char)r[0]]; /* a short form */
        msgs[n_msgs++] = (struct chat_msg){r, part[i + 1]};
    }
    const char *bos = n > 0 ? part[0] : "", *eos = n > 1 ? part[1] : "";
    char *out = (char *)1;
    struct err e;
    e.msg[0] = '\0';
    if (chat_render(f, msgs, n_msgs, bos, eos, &out, &e) != 0) {
        REQUIRE(e.msg[0]);
    } else {
        REQUIRE(out != NULL && out != (char *)1);
        for (size_t i = 0; i < n_msgs; i++) { /* no content is lost (trimmed or not; a system text may move
                                                 into the next user turn, after an assistant turn) */
            const char *b, *end;
            trimmed(msgs[i].content, &b, &end);
            if (b == end) continue;
            char *c = strndup(b, (size_t)(end - b));
            REQUIRE(c);
            REQUIRE(strstr(out, c) != NULL);
            free(c);
        }
        free(out);
    }
    free(text);
    return 0;
}
