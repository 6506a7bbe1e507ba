/* fuzz_openai — libFuzzer target for the server's request path: a POST body through openai_parse_request
 * (jobs/input's body rules, genparam, chat rendering and tokenizing through jobs/ingest) on the stories260K
 * vocabulary (from $NIGHTSHIFT_SHARED or ../shared), then every response shape built from what it accepted.
 *
 * The first byte of an input picks the endpoint (bit 0: chat) and whether special-token text is parsed
 * (bit 1); the rest is the body. For any input: parsing either refuses it as a 400 with a code and a message
 * (whose error object must be valid JSON), or gives a request that fits the model (1 <= n_prompt < context,
 * every id in the vocabulary, 1 <= max_tokens, prompt + max_tokens within the context, 1..128 choices), and
 * the completion object, the stream chunks and the usage chunk built for it must all be valid JSON. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gguf/gguf.h"
#include "server/openai.h"
#include "util/log.h"

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

static tok_vocab *vocab;
static struct model_hparams hp;
static struct job_model model;
static struct gen_params defaults;

static void load(void)
{
    const char *root = getenv("NIGHTSHIFT_SHARED");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", root ? root : "../shared");
    struct err e;
    gguf_file *f = NULL;
    if (gguf_open(path, &f, &e) || tok_load(f, &vocab, &e)) {
        fprintf(stderr, "fuzz_openai: %s: %s\n", path, e.msg);
        abort();
    }
    gguf_close(f);
    log_set_level(LOG_QUIET);
    hp.n_ctx_train = 512;
    model = (struct job_model){
        .name = "tiny", .hp = &hp, .vocab = vocab, .chat = CHAT_CHATML, .chat_source = "fuzz"};
    defaults = genparam_defaults();
}

/* data: ... lines, each JSON or [DONE]. */
static void require_sse(const char *s, size_t len)
{
    REQUIRE(s && strlen(s) == len);
    while (*s) {
        REQUIRE(!strncmp(s, "data: ", 6));
        const char *end = strstr(s, "\n\n");
        REQUIRE(end);
        if (strncmp(s + 6, "[DONE]", 6)) {
            json_t *j = json_loadb(s + 6, (size_t)(end - s - 6), JSON_ALLOW_NUL, NULL);
            REQUIRE(j);
            json_decref(j);
        }
        s = end + 2;
    }
}

static void require_json(char *s, size_t len)
{
    REQUIRE(s);
    json_t *j = json_loadb(s, len, JSON_ALLOW_NUL, NULL); /* "\u0000" is valid JSON */
    REQUIRE(j);
    json_decref(j);
    free(s);
}

/* Every response shape for an accepted request whose choices "generated" text from the body's own bytes. */
static void responses(struct server_req *r, const uint8_t *data, size_t size)
{
    r->id = 1;
    for (int32_t c = 0; c < r->n_choices; c++) {
        struct server_choice *ch = &r->choices[c];
        ch->done = 1;
        ch->finish = c & 1 ? ENGINE_FINISH_STOP : ENGINE_FINISH_LENGTH;
        ch->text_len = size < 64 ? size : 64; /* any bytes: the writer must repair bad UTF-8 */
        ch->text = malloc(ch->text_len + 1);
        memcpy(ch->text, data, ch->text_len);
        ch->text[ch->text_len] = '\0';
        ch->n_tokens = 1;
    }
    size_t len;
    struct openai_error err;
    require_json(openai_response(r, "id", "tiny", 1, &len, &err), len);
    char *s = openai_stream_start(r, "id", "tiny", 1, &len);
    require_sse(s, len);
    free(s);
    struct server_event ev = {.choice = 0,
                              .text = r->choices[0].text,
                              .len = r->choices[0].text_len,
                              .finished = 1,
                              .finish = ENGINE_FINISH_STOP};
    s = openai_stream_event(r, "id", "tiny", 1, &ev, &len);
    require_sse(s, len);
    free(s);
    s = openai_stream_end(r, "id", "tiny", 1, &len);
    require_sse(s, len);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!vocab) load();
    if (size < 1) return 0;
    struct openai_ctx ctx = {&model, &defaults, (data[0] >> 1) & 1};
    struct server_req *r = NULL;
    struct openai_error err;
    struct err e;
    int rc = openai_parse_request(&ctx, data[0] & 1, (const char *)data + 1, size - 1, 7, &r, &err, &e);
    REQUIRE(rc >= 0); /* -1 is out of memory only */
    if (rc > 0) {
        REQUIRE(!r && err.status == 400 && err.code && err.message[0]);
        size_t len;
        require_json(openai_error_body(&err, &len), len);
        return 0;
    }
    REQUIRE(r && r->n_prompt >= 1 && r->n_prompt < hp.n_ctx_train && r->max_tokens >= 1);
    REQUIRE((int64_t)r->n_prompt + r->max_tokens <= hp.n_ctx_train);
    REQUIRE(r->n_choices >= 1 && r->n_choices <= GENPARAM_MAX_N && r->chat == (data[0] & 1));
    for (int32_t i = 0; i < r->n_prompt; i++)
        REQUIRE(r->prompt[i] >= 0 && r->prompt[i] < tok_n_vocab(vocab));
    responses(r, data + 1, size - 1);
    server_req_discard(r);
    return 0;
}
