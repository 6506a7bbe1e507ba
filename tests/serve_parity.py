#!/usr/bin/env python3
"""`nightshift serve` answers a body as `nightshift run` answers the same body in a backlog line (issue 35).

  serve_parity.py NIGHTSHIFT MODEL TMPDIR

One table of request bodies, each sent through both: written as OpenAI Batch API lines for `nightshift run`,
and POSTed to a server on 127.0.0.1 (--port 0, the port read from its log; killed at the end). Prints
"ok NAME" / "FAIL NAME: why" lines for tests/run:
  - bad bodies: the server's error object (code, message, param, type) is byte for byte the one in run's
    error file, and its HTTP status is the line's status_code
  - good bodies (structured output, logprobs, top_logprobs, echo, scoring, n, penalties, logit_bias, seeds):
    the server's choices (text or message, finish_reason, logprobs) and usage equal run's result line's
  - streamed: a stream with logprobs brings the same text and logprobs as the whole answer
  - README: the fields README's serve section lists as refused are refused by both, with run's codes, and
    each field it says works is in a good body that passed
"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

NS, MODEL, TMP = sys.argv[1], sys.argv[2], sys.argv[3]
README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")
failed = False


def ok(name):
    print("ok " + name, flush=True)


def fail(name, why):
    global failed
    failed = True
    print("FAIL %s: %s" % (name, why), flush=True)


C, H, E = "/v1/completions", "/v1/chat/completions", "/v1/embeddings"
M = '"messages":[{"role":"user","content":"Hi"}]'

# (name, url, raw JSON body): raw text, so that a body is sent exactly as written to both
BAD = [
    ("unknown_field", C, '{"prompt":"x","frobnicate":1}'),
    ("temperature_range", C, '{"prompt":"x","temperature":-1}'),
    ("temperature_type", C, '{"prompt":"x","temperature":"hot"}'),
    ("top_p_zero", C, '{"prompt":"x","top_p":0}'),
    ("top_k_negative", C, '{"prompt":"x","top_k":-5}'),
    ("min_p_range", C, '{"prompt":"x","min_p":2}'),
    ("max_tokens_zero", C, '{"prompt":"x","max_tokens":0}'),
    ("max_tokens_type", C, '{"prompt":"x","max_tokens":"many"}'),
    ("n_zero", C, '{"prompt":"x","n":0}'),
    ("n_too_many", C, '{"prompt":"x","n":1000}'),
    ("stop_type", C, '{"prompt":"x","stop":[1]}'),
    ("stop_too_many", C, '{"prompt":"x","stop":["a","b","c","d","e"]}'),
    ("logit_bias_key", C, '{"prompt":"x","logit_bias":{"abc":1}}'),
    ("logit_bias_range", C, '{"prompt":"x","logit_bias":{"5":500}}'),
    ("logit_bias_vocab", C, '{"prompt":"x","logit_bias":{"99999":1}}'),
    ("presence_penalty_range", C, '{"prompt":"x","presence_penalty":3}'),
    ("frequency_penalty_type", C, '{"prompt":"x","frequency_penalty":"a"}'),
    ("seed_type", C, '{"prompt":"x","seed":"s"}'),
    ("ignore_eos_type", C, '{"prompt":"x","ignore_eos":1}'),
    ("logprobs_over_5", C, '{"prompt":"x","logprobs":9}'),
    ("top_logprobs_on_completions", C, '{"prompt":"x","logprobs":1,"top_logprobs":2}'),
    ("echo_type", C, '{"prompt":"x","echo":"yes"}'),
    ("best_of", C, '{"prompt":"x","best_of":3}'),
    ("suffix", C, '{"prompt":"x","suffix":"end"}'),
    ("audio", C, '{"prompt":"x","audio":{"voice":"x"}}'),
    ("tool_choice", C, '{"prompt":"x","tool_choice":"auto"}'),
    ("model_type", C, '{"prompt":"x","model":5}'),
    ("prompt_empty_list", C, '{"prompt":[]}'),
    ("prompt_token_outside_vocab", C, '{"prompt":[1,99999]}'),
    ("prompt_several", C, '{"prompt":["a","b"]}'),
    ("prompt_type", C, '{"prompt":5}'),
    ("no_prompt", C, '{"max_tokens":3}'),
    ("messages_on_completions", C, '{' + M + '}'),
    ("prompt_and_messages", C, '{"prompt":"x",' + M + '}'),
    ("prompt_too_long", C, '{"prompt":"' + "and then " * 700 + '"}'),
    ("response_format_type", C, '{"prompt":"x","response_format":{"type":"xml"}}'),
    ("json_schema_bad", C, '{"prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":'
                           '{"type":"frob"}}}}'),
    ("guided_regex_bad", C, '{"prompt":"x","guided_regex":"(["}'),
    ("guided_choice_empty", C, '{"prompt":"x","guided_choice":[]}'),
    ("guided_grammar_bad", C, '{"prompt":"x","guided_grammar":"root ::= missing"}'),
    ("two_constraints", C, '{"prompt":"x","guided_regex":"a","guided_choice":["b"]}'),
    ("chat_echo", H, '{' + M + ',"echo":true}'),
    ("chat_messages_empty", H, '{"messages":[]}'),
    ("chat_role", H, '{"messages":[{"role":"wizard","content":"x"}]}'),
    ("chat_no_content", H, '{"messages":[{"role":"user"}]}'),
    ("chat_image_part", H, '{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}'),
    ("chat_messages_type", H, '{"messages":"hi"}'),
    ("chat_prompt", H, '{"prompt":"x"}'),
    ("chat_tools", H, '{' + M + ',"tools":[{"type":"function"}]}'),
    ("chat_top_logprobs_alone", H, '{' + M + ',"top_logprobs":3}'),
    ("chat_top_logprobs_range", H, '{' + M + ',"logprobs":true,"top_logprobs":21}'),
    ("chat_logprobs_type", H, '{' + M + ',"logprobs":"yes"}'),
    ("embeddings_empty", E, '{"input":[]}'),
    ("embeddings_type", E, '{"input":5}'),
    ("embeddings_dimensions_zero", E, '{"input":"x","dimensions":0}'),
    ("embeddings_dimensions_over", E, '{"input":"x","dimensions":100000}'),
    ("embeddings_unknown_field", E, '{"input":"x","frob":1}'),
    ("embeddings_token_outside_vocab", E, '{"input":["a",[1,99999]]}'),
    ("embeddings_encoding", E, '{"input":"x","encoding_format":"int8"}'),
]

GOOD = [
    ("greedy_logprobs", C, '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"logprobs":2}'),
    ("echo_logprobs", C, '{"prompt":"Once upon a time","max_tokens":8,"temperature":0,"echo":true,"logprobs":1}'),
    ("echo_only", C, '{"prompt":"Once upon a time","max_tokens":6,"temperature":0,"echo":true}'),
    ("scoring", C, '{"prompt":"Once upon a time there was","max_tokens":0,"echo":true,"logprobs":0}'),
    ("n_seeded", C, '{"prompt":"Once","max_tokens":10,"n":3,"seed":7,"temperature":0.9}'),
    ("penalties", C, '{"prompt":"Once","max_tokens":16,"temperature":0,"presence_penalty":1.5,'
                     '"frequency_penalty":1,"repetition_penalty":1.3}'),
    ("logit_bias", C, '{"prompt":"Once","max_tokens":8,"temperature":0,"logit_bias":{"100":50}}'),
    ("guided_choice", C, '{"prompt":"The answer is","max_tokens":8,"temperature":0,"guided_choice":["yes","no"]}'),
    ("guided_regex", C, '{"prompt":"Number:","max_tokens":8,"temperature":0,"guided_regex":"[0-9]{3}"}'),
    ("guided_grammar", C, '{"prompt":"Say","max_tokens":8,"temperature":0,"guided_grammar":"root ::= \\"yes\\" | \\"no\\""}'),
    ("chat_json_object", H, '{' + M + ',"max_tokens":24,"temperature":0,"response_format":{"type":"json_object"}}'),
    ("chat_guided_json", H, '{' + M + ',"max_tokens":16,"temperature":0,"guided_json":{"type":"object",'
                            '"properties":{"a":{"type":"integer"}},"required":["a"]}}'),
    ("chat_json_schema", H, '{' + M + ',"max_tokens":16,"temperature":0,"response_format":{"type":"json_schema",'
                            '"json_schema":{"name":"x","schema":{"type":"object","properties":{"b":{"type":"boolean"}},'
                            '"required":["b"]}}}}'),
    ("chat_logprobs", H, '{' + M + ',"max_tokens":12,"temperature":0,"logprobs":true,"top_logprobs":3}'),
    ("chat_end_token", H, '{' + M + ',"max_tokens":8,"temperature":0,"logprobs":true,"guided_regex":"[a-z]{1,6}",'
                          '"logit_bias":{"2":100}}'),  # </s> as soon as the regex allows it
    ("embeddings_one", E, '{"input":"Once upon a time"}'),
    ("embeddings_many_dimensions", E, '{"input":["Once","upon a time there was"],"dimensions":8}'),
    ("embeddings_ids_base64", E, '{"input":[[1,2,3],[4]],"encoding_format":"base64"}'),
    ("chat_sampled_n", H, '{' + M + ',"max_tokens":8,"n":2,"seed":11,"temperature":1,"top_k":40,"top_p":0.9}'),
]


def run_backlog(rows, tag):
    """Runs `nightshift run` on rows; returns {custom_id: line} from its result and error files."""
    backlog = os.path.join(TMP, tag + ".jsonl")
    with open(backlog, "w") as f:
        for i, (_, url, body) in enumerate(rows):
            f.write('{"custom_id":"r%d","method":"POST","url":"%s","body":%s}\n' % (i, url, body))
    out = os.path.join(TMP, tag + ".results.jsonl")
    p = subprocess.run([NS, "run", backlog, "-m", MODEL, "-o", out, "-t", "1", "--chat-template", "chatml"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
    if p.returncode not in (0, 3):  # 3: some lines failed
        fail("parity_run_" + tag, "run exited %d: %s" % (p.returncode, p.stderr.decode()[-400:]))
    lines = {}
    for path in (out, out + ".errors.jsonl"):
        if os.path.exists(path):
            for line in open(path):
                d = json.loads(line)
                lines[d["custom_id"]] = d
    return lines


def start_server():
    log = open(os.path.join(TMP, "parity.log"), "w")
    p = subprocess.Popen([NS, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0", "-t", "1",
                          "--chat-template", "chatml", "--data-dir", os.path.join(TMP, "parity.data")],
                         stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(200):
        text = open(os.path.join(TMP, "parity.log")).read()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
        if "ready:" in text and m:
            return p, "http://127.0.0.1:" + m.group(1)
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    raise SystemExit("FAIL parity_serve_start: " + open(os.path.join(TMP, "parity.log")).read()[-400:])


def post(base, url, body):
    req = urllib.request.Request(base + url, data=body.encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def choices_of(body, chat):
    """What must agree: each choice's text, finish_reason and logprobs (an embeddings list's data); the usage's
    token counts."""
    if body.get("object") == "list":
        return body["data"], body["usage"]
    out = []
    for c in body["choices"]:
        out.append((c["index"], c["message"]["content"] if chat else c["text"], c["finish_reason"], c["logprobs"]))
    u = body["usage"]
    return out, (u["prompt_tokens"], u["completion_tokens"])


def check_bad(base, run):
    for i, (name, url, body) in enumerate(BAD):
        line = run.get("r%d" % i)
        if not line or line["response"] is None or line["response"]["status_code"] == 200:
            fail("parity_bad_" + name, "run did not refuse it with an error object: %s" % json.dumps(line)[:300])
            continue
        want = line["response"]["body"]["error"]
        status, text = post(base, url, body)
        try:
            got = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            got = None
        if status == line["response"]["status_code"] and got == want:
            ok("parity_bad_" + name)
        else:
            fail("parity_bad_" + name, "serve %d %s, run %d %s" % (status, text[:300], line["response"]["status_code"],
                                                                  json.dumps(want)[:300]))


def check_good(base, run):
    passed = set()
    for i, (name, url, body) in enumerate(GOOD):
        line = run.get("r%d" % i)
        chat = url == H
        if not line or not line["response"] or line["response"]["status_code"] != 200:
            fail("parity_good_" + name, "run failed it: %s" % json.dumps(line)[:300])
            continue
        status, text = post(base, url, body)
        if status != 200:
            fail("parity_good_" + name, "serve %d %s" % (status, text[:300]))
            continue
        want, got = choices_of(line["response"]["body"], chat), choices_of(json.loads(text), chat)
        if want == got:
            ok("parity_good_" + name)
            passed.add(name)
        else:
            fail("parity_good_" + name, "serve %s\n   run %s" % (json.dumps(got)[:600], json.dumps(want)[:600]))
        if name == "chat_end_token":
            check_end_token(line["response"]["body"])
    return passed


def check_end_token(body):
    """OpenAI and vLLM do not list the end token: the tokens' bytes are the message's text (usage counts it)."""
    c = body["choices"][0]
    text = "".join(t["token"] for t in c["logprobs"]["content"])
    listed = len(c["logprobs"]["content"]) == body["usage"]["completion_tokens"] - 1
    if c["finish_reason"] == "stop" and text == c["message"]["content"] and listed:
        ok("parity_logprobs_no_end_token")
    else:
        fail("parity_logprobs_no_end_token", "%s: tokens %r, text %r" % (c["finish_reason"], text[-80:],
                                                                        c["message"]["content"][-80:]))


def check_stream(base):
    """A stream with logprobs: each choice's text and logprobs arrive with its end, equal to the whole answer."""
    for url, body in ((C, '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"logprobs":2,"n":2}'),
                      (H, '{' + M + ',"max_tokens":12,"temperature":0,"logprobs":true,"top_logprobs":2}')):
        chat = url == H
        _, whole = post(base, url, body)
        status, text = post(base, url, body[:-1] + ',"stream":true}')
        texts, lps = {}, {}
        for ev in text.split("\n\n"):
            if not ev.startswith("data: {"):
                continue
            for c in json.loads(ev[6:]).get("choices", []):
                k = c["index"]
                texts[k] = texts.get(k, "") + ((c["delta"].get("content") or "") if chat else c["text"])
                if c.get("logprobs"):
                    lps[k] = c["logprobs"]
        w = json.loads(whole)["choices"]
        same = status == 200 and all(texts.get(c["index"]) == (c["message"]["content"] if chat else c["text"]) and
                                     lps.get(c["index"]) == c["logprobs"] for c in w)
        name = "parity_stream_logprobs_" + ("chat" if chat else "completions")
        if same:
            ok(name)
        else:
            fail(name, "stream %d %s vs %s" % (status, json.dumps([texts, lps])[:300], whole[:300]))


def readme_refused():
    """The fields README's serve section lists as refused: the names in `code` on its 'Refused' line."""
    text = open(README).read()
    m = re.search(r"^Refused fields[^:]*:(.*?)\.\n", text, re.M | re.S)  # to the sentence's end
    return re.findall(r"`([a-z_]+)`", m.group(1)) if m else []


def readme_documented():
    """The fields README's serve section says work: the names in `code` of its 'Every generation field' sentence."""
    m = re.search(r"^Every generation field works[^:]*:(.*?)\.\s", open(README).read(), re.M | re.S)
    return [n for n in re.findall(r"`([a-z_]+)`", m.group(1))] if m else []


def check_documented(passed):
    """Each field README documents is in a good body that served as run wrote it."""
    names = readme_documented()
    if len(names) < 8:
        fail("parity_readme_documented_list", "README has no 'Every generation field works' sentence naming them")
    for n in names:
        used = [g for g in GOOD if '"%s"' % n in g[2]]
        if used and all(g[0] in passed for g in used):
            ok("parity_readme_works_" + n)
        else:
            fail("parity_readme_works_" + n, "no good body with it passed (%s)" % [g[0] for g in used])


def check_readme(base):
    names = readme_refused()
    if len(names) < 3:
        fail("parity_readme_refused_list", "README has no 'Refused fields' line naming them")
        return
    rows = [(n, C, '{"prompt":"x","%s":%s}' % (n, json.dumps({"x": 1}))) for n in names]
    run = run_backlog(rows, "readme")
    for i, (n, url, body) in enumerate(rows):
        line = run.get("r%d" % i)
        status, text = post(base, url, body)
        want = line and line["response"] and line["response"].get("body", {}).get("error")
        got = json.loads(text).get("error") if status != 200 else None
        if want and got == want and got["code"] == "unsupported_parameter" and got["param"] == n:
            ok("parity_readme_refuses_" + n)
        else:
            fail("parity_readme_refuses_" + n, "serve %d %s; run %s" % (status, text[:200], json.dumps(want)[:200]))


def main():
    bad_run = run_backlog(BAD, "bad")
    good_run = run_backlog(GOOD, "good")
    srv, base = start_server()
    try:
        check_bad(base, bad_run)
        check_documented(check_good(base, good_run))
        check_stream(base)
        check_readme(base)
    finally:
        srv.kill()
        srv.wait()
    sys.exit(1 if failed else 0)


main()
