/* test_jinja_corpus — the chat templates of popular models (tests/jinja_templates.h: Llama 3 / 3.1 / 3.2,
 * Qwen2.5 / 3, Mistral v0.1 / Nemo, Gemma 2 / 3, Phi-3 / 3.5 / 4, DeepSeek R1 / LLM, SmolLM2) rendered with
 * the variables HF passes (messages, add_generation_prompt, bos_token, eos_token, tools, documents) for plain
 * chats, system prompts, tools, tool calls, thinking and the conversations the templates refuse. Each
 * expected text was written from the template's own logic (which default system prompt it adds, what it
 * trims, where it puts the system message or the tools, which thinking it drops) and cross-checked with
 * Jinja2 3.1 set up as HF sets it up. Token ids of the templates whose vocabularies the tests have are
 * checked in test_chat. */
#include "test.h"
#include "jinja_templates.h"
#include "tokenizer/jinja.h"

struct corpus_case {
    const char *name, *tmpl;
    const char *bos, *eos; /* the special tokens' text (bos NULL: the model has none, passed as "") */
    const char *messages;  /* JSON list */
    int tools;             /* tools = [get_weather] (else none) */
    const char *extra;     /* JSON object of more variables, or NULL */
    int rc;                /* 0 or JINJA_RAISED */
    const char *want;      /* the text, or raise_exception's message */
};

static const char tools_json[] = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                                 "\"parameters\": {\"type\": \"object\"}}}]";

static const char msgs_user[] = "[{\"role\": \"user\", \"content\": \"Hi\"}]";

static const char msgs_chat[] =
    "[{\"role\": \"system\", \"content\": \"SYS\"}, {\"role\": \"user\", \"content\": \" Hi \"}, {\"role\": "
    "\"assistant\", \"content\": \"Hello!\"}, {\"role\": \"user\", \"content\": \"Bye\"}]";

static const char msgs_nosys[] = "[{\"role\": \"user\", \"content\": \" Hi \"}, {\"role\": \"assistant\", "
                                 "\"content\": \"Hello!\"}, {\"role\": "
                                 "\"user\", \"content\": \"Bye\"}]";

static const char msgs_two_users[] =
    "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]";

static const char msgs_think[] =
    "[{\"role\": \"user\", \"content\": \"q1\"}, {\"role\": \"assistant\", \"content\": "
    "\"<think>\\nreason\\n</think>\\n\\nanswer1\"}, {\"role\": \"user\", \"content\": \"q2\"}]";

static const char msgs_last_think[] = "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                                      "\"content\": \"<think>r</think>a\"}]";

static const char msgs_toolcall[] =
    "[{\"role\": \"user\", \"content\": \"Weather in Paris?\"}, {\"role\": \"assistant\", \"content\": \"\", "
    "\"tool_calls\": [{\"id\": \"abcdefghi\", \"type\": \"function\", \"function\": {\"name\": "
    "\"get_weather\", "
    "\"arguments\": {\"city\": \"Paris\"}}}]}, {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 20}\", "
    "\"tool_call_id\": \"abcdefghi\"}]";

static const char msgs_parts[] =
    "[{\"role\": \"system\", \"content\": [{\"type\": \"text\", \"text\": \"SYS\"}]}, {\"role\": \"user\", "
    "\"content\": [{\"type\": \"image\"}, {\"type\": \"text\", \"text\": \" What is this? \"}]}]";

static const struct corpus_case cases[] = {
    {"smollm2_default_system", tmpl_smollm2, NULL, "<|im_end|>", msgs_user, 0, NULL, 0,
     "<|im_start|>system\n"
     "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
     "<|im_start|>user\n"
     "Hi<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"smollm2_own_system", tmpl_smollm2, NULL, "<|im_end|>", msgs_chat, 0, NULL, 0,
     "<|im_start|>system\n"
     "SYS<|im_end|>\n"
     "<|im_start|>user\n"
     " Hi <|im_end|>\n"
     "<|im_start|>assistant\n"
     "Hello!<|im_end|>\n"
     "<|im_start|>user\n"
     "Bye<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"llama3_trims", tmpl_llama3, "<|begin_of_text|>", "<|eot_id|>", msgs_chat, 0, NULL, 0,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "SYS<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Bye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"llama3_no_generation_prompt", tmpl_llama3, "<|begin_of_text|>", "<|eot_id|>", msgs_user, 0,
     "{\"add_generation_prompt\": false}", 0,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hi<|eot_id|>"},
    {"llama31_dated_system", tmpl_llama31, "<|begin_of_text|>", "<|eot_id|>", msgs_user, 0, NULL, 0,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Cutting Knowledge Date: December 2023\n"
     "Today Date: 26 Jul 2024\n"
     "\n"
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"llama31_system", tmpl_llama31, "<|begin_of_text|>", "<|eot_id|>", msgs_chat, 0, NULL, 0,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Cutting Knowledge Date: December 2023\n"
     "Today Date: 26 Jul 2024\n"
     "\n"
     "SYS<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Bye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"llama31_tools_in_first_user", tmpl_llama31, "<|begin_of_text|>", "<|eot_id|>", msgs_user, 1, NULL, 0,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Environment: ipython\n"
     "Cutting Knowledge Date: December 2023\n"
     "Today Date: 26 Jul 2024\n"
     "\n"
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Given the following functions, please respond with a JSON for a function call with its proper "
     "arguments that "
     "best answers the given prompt.\n"
     "\n"
     "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
     "value}.Do not use variables.\n"
     "\n"
     "{\n"
     "    \"type\": \"function\",\n"
     "    \"function\": {\n"
     "        \"name\": \"get_weather\",\n"
     "        \"parameters\": {\n"
     "            \"type\": \"object\"\n"
     "        }\n"
     "    }\n"
     "}\n"
     "\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"llama31_tool_call", tmpl_llama31, "<|begin_of_text|>", "<|eot_id|>", msgs_toolcall, 0, NULL, 0,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Cutting Knowledge Date: December 2023\n"
     "Today Date: 26 Jul 2024\n"
     "\n"
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": "
     "\"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
     "\n"
     "\"{\\\"temp\\\": 20}\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"llama32_no_clock", tmpl_llama32, "<|begin_of_text|>", "<|eot_id|>", msgs_chat, 0, NULL, 0,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Cutting Knowledge Date: December 2023\n"
     "Today Date: 26 Jul 2024\n"
     "\n"
     "SYS<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Bye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"llama32_date_string", tmpl_llama32, "<|begin_of_text|>", "<|eot_id|>", msgs_user, 0,
     "{\"date_string\": \"01 Jan 2025\"}", 0,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Cutting Knowledge Date: December 2023\n"
     "Today Date: 01 Jan 2025\n"
     "\n"
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"qwen25_default_system", tmpl_qwen25, NULL, "<|im_end|>", msgs_user, 0, NULL, 0,
     "<|im_start|>system\n"
     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\n"
     "Hi<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"qwen25_system", tmpl_qwen25, NULL, "<|im_end|>", msgs_chat, 0, NULL, 0,
     "<|im_start|>system\n"
     "SYS<|im_end|>\n"
     "<|im_start|>user\n"
     " Hi <|im_end|>\n"
     "<|im_start|>assistant\n"
     "Hello!<|im_end|>\n"
     "<|im_start|>user\n"
     "Bye<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"qwen25_tools", tmpl_qwen25, NULL, "<|im_end|>", msgs_user, 1, NULL, 0,
     "<|im_start|>system\n"
     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n"
     "\n"
     "# Tools\n"
     "\n"
     "You may call one or more functions to assist with the user query.\n"
     "\n"
     "You are provided with function signatures within <tools></tools> XML tags:\n"
     "<tools>\n"
     "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": "
     "\"object\"}}}\n"
     "</tools>\n"
     "\n"
     "For each function call, return a json object with function name and arguments within "
     "<tool_call></tool_call> "
     "XML tags:\n"
     "<tool_call>\n"
     "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "Hi<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"qwen25_tool_call", tmpl_qwen25, NULL, "<|im_end|>", msgs_toolcall, 0, NULL, 0,
     "<|im_start|>system\n"
     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\n"
     "Weather in Paris?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "<tool_response>\n"
     "{\"temp\": 20}\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"qwen3_drops_old_thinking", tmpl_qwen3, NULL, "<|im_end|>", msgs_think, 0, NULL, 0,
     "<|im_start|>user\n"
     "q1<|im_end|>\n"
     "<|im_start|>assistant\n"
     "answer1<|im_end|>\n"
     "<|im_start|>user\n"
     "q2<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"qwen3_thinking_off", tmpl_qwen3, NULL, "<|im_end|>", msgs_user, 0, "{\"enable_thinking\": false}", 0,
     "<|im_start|>user\n"
     "Hi<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "\n"
     "</think>\n"
     "\n"},
    {"qwen3_keeps_last_thinking", tmpl_qwen3, NULL, "<|im_end|>", msgs_last_think, 0,
     "{\"add_generation_prompt\": false}", 0,
     "<|im_start|>user\n"
     "q<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "r\n"
     "</think>\n"
     "\n"
     "a<|im_end|>\n"},
    {"qwen3_system_and_tools", tmpl_qwen3, NULL, "<|im_end|>", msgs_chat, 1, NULL, 0,
     "<|im_start|>system\n"
     "SYS\n"
     "\n"
     "# Tools\n"
     "\n"
     "You may call one or more functions to assist with the user query.\n"
     "\n"
     "You are provided with function signatures within <tools></tools> XML tags:\n"
     "<tools>\n"
     "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": "
     "\"object\"}}}\n"
     "</tools>\n"
     "\n"
     "For each function call, return a json object with function name and arguments within "
     "<tool_call></tool_call> "
     "XML tags:\n"
     "<tool_call>\n"
     "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     " Hi <|im_end|>\n"
     "<|im_start|>assistant\n"
     "Hello!<|im_end|>\n"
     "<|im_start|>user\n"
     "Bye<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"mistral_v01", tmpl_mistral01, "<s>", "</s>", msgs_nosys, 0, NULL, 0,
     "<s>[INST]  Hi  [/INST]Hello!</s>[INST] Bye [/INST]"},
    {"mistral_v01_alternation", tmpl_mistral01, "<s>", "</s>", msgs_chat, 0, NULL, JINJA_RAISED,
     "Conversation roles must alternate user/assistant/user/assistant/..."},
    {"mistral_nemo_system_in_last_user", tmpl_nemo, "<s>", "</s>", msgs_chat, 0, NULL, 0,
     "<s>[INST] Hi [/INST]Hello!</s>[INST]SYS\n"
     "\n"
     "Bye[/INST]"},
    {"mistral_nemo_tools", tmpl_nemo, "<s>", "</s>", msgs_user, 1, NULL, 0,
     "<s>[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
     "\"parameters\": "
     "{\"type\": \"object\"}}}][/AVAILABLE_TOOLS][INST]Hi[/INST]"},
    {"mistral_nemo_alternation", tmpl_nemo, "<s>", "</s>", msgs_two_users, 0, NULL, JINJA_RAISED,
     "After the optional system message, conversation roles must alternate "
     "user/assistant/user/assistant/..."},
    {"gemma2", tmpl_gemma2, "<bos>", "<eos>", msgs_nosys, 0, NULL, 0,
     "<bos><start_of_turn>user\n"
     "Hi<end_of_turn>\n"
     "<start_of_turn>model\n"
     "Hello!<end_of_turn>\n"
     "<start_of_turn>user\n"
     "Bye<end_of_turn>\n"
     "<start_of_turn>model\n"},
    {"gemma2_no_system_role", tmpl_gemma2, "<bos>", "<eos>", msgs_chat, 0, NULL, JINJA_RAISED,
     "System role not supported"},
    {"gemma3_system_into_first_user", tmpl_gemma3, "<bos>", "<eos>", msgs_chat, 0, NULL, 0,
     "<bos><start_of_turn>user\n"
     "SYS\n"
     "\n"
     "Hi<end_of_turn>\n"
     "<start_of_turn>model\n"
     "Hello!<end_of_turn>\n"
     "<start_of_turn>user\n"
     "Bye<end_of_turn>\n"
     "<start_of_turn>model\n"},
    {"gemma3_content_parts", tmpl_gemma3, "<bos>", "<eos>", msgs_parts, 0, NULL, 0,
     "<bos><start_of_turn>user\n"
     "SYS\n"
     "\n"
     "<start_of_image>What is this?<end_of_turn>\n"
     "<start_of_turn>model\n"},
    {"gemma3_alternation", tmpl_gemma3, "<bos>", "<eos>", msgs_two_users, 0, NULL, JINJA_RAISED,
     "Conversation roles must alternate user/assistant/user/assistant/..."},
    {"phi3_gguf", tmpl_phi3vocab, "<s>", "<|endoftext|>", msgs_chat, 0, NULL, 0,
     "<s><|user|>\n"
     " Hi <|end|>\n"
     "<|assistant|>\n"
     "Hello!<|end|>\n"
     "<|user|>\n"
     "Bye<|end|>\n"
     "<|assistant|>\n"},
    {"phi35", tmpl_phi35, "<s>", "<|endoftext|>", msgs_chat, 0, NULL, 0,
     "<|system|>\n"
     "SYS<|end|>\n"
     "<|user|>\n"
     " Hi <|end|>\n"
     "<|assistant|>\n"
     "Hello!<|end|>\n"
     "<|user|>\n"
     "Bye<|end|>\n"
     "<|assistant|>\n"},
    {"phi35_no_generation_prompt", tmpl_phi35, "<s>", "<|endoftext|>", msgs_user, 0,
     "{\"add_generation_prompt\": false}", 0,
     "<|user|>\n"
     "Hi<|end|>\n"
     "<|endoftext|>"},
    {"phi4", tmpl_phi4, "<|endoftext|>", "<|im_end|>", msgs_chat, 0, NULL, 0,
     "<|im_start|>system<|im_sep|>SYS<|im_end|><|im_start|>user<|im_sep|> Hi "
     "<|im_end|><|im_start|>assistant<|im_sep|>Hello!<|im_end|><|im_start|>user<|im_sep|>Bye<|im_end|><|im_"
     "start|>"
     "assistant<|im_sep|>"},
    {"deepseek_r1", tmpl_r1distill, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", msgs_chat, 0, NULL, 0,
     "<｜begin▁of▁sentence｜>SYS<｜User｜> Hi "
     "<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜><think>\n"},
    {"deepseek_r1_drops_thinking", tmpl_r1distill, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
     msgs_think, 0, NULL, 0,
     "<｜begin▁of▁sentence｜><｜User｜>q1<｜Assistant｜>\n"
     "\n"
     "answer1<｜end▁of▁sentence｜><｜User｜>q2<｜Assistant｜><think>\n"},
    {"deepseek_llm", tmpl_deepseek_llm, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", msgs_chat, 0,
     NULL, 0,
     "<｜begin▁of▁sentence｜>SYS\n"
     "\n"
     "User:  Hi \n"
     "\n"
     "Assistant: Hello!<｜end▁of▁sentence｜>User: Bye\n"
     "\n"
     "Assistant:"},
};

static json_t *case_vars(const struct corpus_case *c)
{
    json_t *v = c->extra ? json_loads(c->extra, 0, NULL) : json_object();
    json_t *msgs = json_loads(c->messages, 0, NULL);
    if (!v || !msgs) {
        json_decref(v);
        json_decref(msgs);
        return NULL;
    }
    json_object_set_new(v, "messages", msgs);
    if (!json_object_get(v, "add_generation_prompt"))
        json_object_set_new(v, "add_generation_prompt", json_true());
    json_object_set_new(v, "bos_token", json_string(c->bos ? c->bos : ""));
    json_object_set_new(v, "eos_token", json_string(c->eos));
    json_object_set_new(v, "tools", c->tools ? json_loads(tools_json, 0, NULL) : json_null());
    json_object_set_new(v, "documents", json_null());
    return v;
}

/* Renders every case of template tmpl: the number that matched, or -1 (msg says which did not). */
static int run_cases(const char *tmpl, char *msg, size_t cap)
{
    jinja_template *t = NULL;
    struct err e = {{0}};
    if (jinja_compile(tmpl, strlen(tmpl), &t, &e) != 0 || jinja_check(t, &e) != 0) {
        snprintf(msg, cap, "compile: %.300s", e.msg);
        jinja_free(t);
        return -1;
    }
    int n = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct corpus_case *c = &cases[i];
        if (c->tmpl != tmpl) continue;
        json_t *v = case_vars(c);
        char *out = NULL;
        int rc = v ? jinja_render(t, v, NULL, &out, NULL, &e) : -9;
        json_decref(v);
        const char *got = rc == 0 ? out : e.msg;
        if (rc != c->rc || strcmp(got, c->want) != 0) {
            snprintf(msg, cap, "%s: rc %d (want %d): got \"%.700s\"", c->name, rc, c->rc,
                     rc == -9 ? "bad vars" : got);
            free(out);
            jinja_free(t);
            return -1;
        }
        free(out);
        n++;
    }
    jinja_free(t);
    return n;
}

#define CORPUS(name, tmpl, n_cases)                                                                          \
    TEST(name)                                                                                               \
    {                                                                                                        \
        char msg_[1024];                                                                                     \
        int n_ = run_cases(tmpl, msg_, sizeof msg_);                                                         \
        CHECK_MSG(n_ >= 0, "%s", msg_);                                                                      \
        CHECK_EQ_INT(n_, n_cases);                                                                           \
    }

CORPUS(smollm2, tmpl_smollm2, 2)
CORPUS(llama3, tmpl_llama3, 2)
CORPUS(llama31, tmpl_llama31, 4)
CORPUS(llama32, tmpl_llama32, 2)
CORPUS(qwen25, tmpl_qwen25, 4)
CORPUS(qwen3, tmpl_qwen3, 4)
CORPUS(mistral_v01, tmpl_mistral01, 2)
CORPUS(mistral_nemo, tmpl_nemo, 3)
CORPUS(gemma2, tmpl_gemma2, 2)
CORPUS(gemma3, tmpl_gemma3, 3)
CORPUS(phi3, tmpl_phi3vocab, 1)
CORPUS(phi35, tmpl_phi35, 2)
CORPUS(phi4, tmpl_phi4, 1)
CORPUS(deepseek_r1, tmpl_r1distill, 2)
CORPUS(deepseek_llm, tmpl_deepseek_llm, 1)

int main(void)
{
    RUN(smollm2);
    RUN(llama3);
    RUN(llama31);
    RUN(llama32);
    RUN(qwen25);
    RUN(qwen3);
    RUN(mistral_v01);
    RUN(mistral_nemo);
    RUN(gemma2);
    RUN(gemma3);
    RUN(phi3);
    RUN(phi35);
    RUN(phi4);
    RUN(deepseek_r1);
    RUN(deepseek_llm);
    return test_summary();
}
