/* fuzz_jinja — libFuzzer target for the Jinja interpreter (template parser and renderer).
 *
 * An input is a template, optionally followed by a NUL byte and a JSON object of variables; without one the
 * template renders with a chat context (messages with a system prompt, a tool call and a tool result, tools,
 * bos/eos tokens, add_generation_prompt). Compiling may fail; rendering, with small limits so that every
 * input runs in milliseconds, returns 0, -1 or JINJA_RAISED. Checked: a compiled tree passes jinja_check;
 * an error always has a message; a success gives text of exactly n_out bytes with no NUL inside; a second
 * render of the same template and variables gives the same result (renders share nothing but the compiled
 * template). ASan and UBSan watch the rest. Seeds: fuzz/seed-jinja (real chat templates and language
 * samples; scripts/fuzz copies them into the corpus).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja.h"

static const char chat_vars[] =
    "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true, \"documents\": null,"
    " \"messages\": [{\"role\": \"system\", \"content\": \" Be brief. \"},"
    " {\"role\": \"user\", \"content\": \"What is the weather in Paris? \\u00e9\\u4e2d\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nhm\\n</think>\\n\\n\", \"tool_calls\": [{\"id\": "
    "\"abcdefghi\","
    " \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 20}\", \"tool_call_id\": \"abcdefghi\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"thanks\"}, {\"type\": "
    "\"image\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
    "\"Weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
    "\"required\": [\"city\"]}}}]}";

static json_t *default_vars;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!default_vars && !(default_vars = json_loads(chat_vars, 0, NULL))) abort();
    const char *src = (const char *)data;
    const char *nul = memchr(src, '\0', size);
    size_t len = nul ? (size_t)(nul - src) : size;
    json_t *vars = default_vars, *own = NULL;
    if (nul) {
        own = json_loadb(nul + 1, size - len - 1, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(own)) {
            json_decref(own);
            return 0;
        }
        vars = own;
    }
    struct err e = {{0}};
    jinja_template *t = NULL;
    if (jinja_compile(src, len, &t, &e) != 0) {
        if (t || !e.msg[0]) abort();
        json_decref(own);
        return 0;
    }
    if (jinja_check(t, &e) != 0) abort();
    struct jinja_limits lim = jinja_default_limits();
    lim.max_steps = 200000;
    lim.max_output = 64 << 10;
    lim.max_memory = 16 << 20;
    char *out[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    int rc[2];
    struct err e2 = {{0}};
    e.msg[0] = '\0';
    for (int k = 0; k < 2; k++) {
        rc[k] = jinja_render(t, vars, &lim, &out[k], &n[k], k ? &e2 : &e);
        if (rc[k] != 0 && rc[k] != -1 && rc[k] != JINJA_RAISED) abort();
        if (rc[k] != 0 && (out[k] || (k ? e2.msg[0] : e.msg[0]) == '\0')) abort();
        if (rc[k] == 0 && (!out[k] || strlen(out[k]) != n[k])) abort();
    }
    if (rc[0] != rc[1] || (rc[0] == 0 && (n[0] != n[1] || memcmp(out[0], out[1], n[0]) != 0))) abort();
    if (rc[0] != 0 && strcmp(e.msg, e2.msg) != 0) abort();
    free(out[0]);
    free(out[1]);
    jinja_free(t);
    json_decref(own);
    return 0;
}
