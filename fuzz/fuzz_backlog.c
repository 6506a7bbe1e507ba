/* fuzz_backlog — libFuzzer target for the backlog reader: format detection, line bounds, every bad-line
 * class and request validation (jobs/input through runtime/genparam).
 *
 * Input: byte 0 picks the format (bits 0-1: auto, openai, jsonl, text) and the line bound (bit 2: 64 bytes,
 * else 4096); the rest is the backlog file (written to a memfd). For any file: input_open either refuses it
 * with a message (a binary file) or every non-blank line yields one item, in increasing line order; a bad
 * item has a known code and a message; a request has an id, a prompt and parameters that pass
 * genparam_check and the sampler's own check (what the reader accepts, the engine accepts); and reading the
 * line again at its offset (input_reread) gives the same item (code, id, prompt length).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/sampler.h"
#include "jobs/input.h"
#include "jobs/ledger.h"
#include "util/log.h"

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static void check_item(input_reader *r, const struct input_item *it)
{
    struct err e;
    if (it->code) {
        REQUIRE(ledger_code_index(it->code) >= 0); /* one the ledger can keep */
        REQUIRE(it->message && it->message[0]);
    } else {
        REQUIRE(it->custom_id && it->custom_id[0]);
        REQUIRE(it->prompt || it->prompt_ids || it->n_msgs);
        REQUIRE(genparam_check(&it->gen, &e) == 0);
        struct sampler_params sp;
        genparam_to_sampler(&it->gen, 1, &sp);
        REQUIRE(sampler_check_params(&sp, INT32_MAX, &e) == 0);
    }
    struct input_item again;
    REQUIRE(input_reread(r, it->off, it->line, &again, &e) == 0);
    REQUIRE(same_str(again.code, it->code) && same_str(again.custom_id, it->custom_id));
    REQUIRE(again.prompt_len == it->prompt_len && again.n_prompt_ids == it->n_prompt_ids && again.n_msgs == it->n_msgs);
    input_item_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        log_set_level(LOG_QUIET);
        fd = memfd_create("backlog", 0);
        REQUIRE(fd >= 0);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (size == 0) return 0;
    REQUIRE(ftruncate(fd, 0) == 0);
    REQUIRE(pwrite(fd, data + 1, size - 1, 0) == (ssize_t)(size - 1));
    static const enum input_format formats[] = {INPUT_FORMAT_AUTO, INPUT_FORMAT_OPENAI, INPUT_FORMAT_JSONL,
                                                INPUT_FORMAT_TEXT};
    struct input_opts o = input_default_opts();
    o.format = formats[data[0] & 3];
    o.max_line_bytes = data[0] & 4 ? 64 : 4096;
    input_reader *r = NULL;
    struct err e;
    e.msg[0] = '\0';
    if (input_open(path, &o, &r, &e) != 0) {
        REQUIRE(r == NULL && e.msg[0]);
        return 0;
    }
    REQUIRE(input_get_format(r) != INPUT_FORMAT_AUTO);
    struct input_item it;
    int64_t last = 0;
    int rc;
    while ((rc = input_next(r, &it, &e)) == 1) {
        REQUIRE(it.line > last && it.off >= 0 && (uint64_t)it.off < size);
        last = it.line;
        check_item(r, &it);
        input_item_free(&it);
    }
    REQUIRE(rc == 0 || e.msg[0]); /* an I/O error (a binary block) has a message */
    REQUIRE(rc != 0 || input_n_lines(r) >= last);
    input_close(r);
    return 0;
}
