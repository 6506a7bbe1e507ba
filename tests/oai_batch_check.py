#!/usr/bin/env python3
"""Checks nightshift's result and error files against OpenAI's Batch API documentation (stdlib only).

  oai_batch_check.py schema RESULTS ERRORS
      every line of both files matches the documented shapes: the batch output object (id, custom_id,
      response {status_code, request_id, body}, error), a chat.completion or text_completion body with
      usage (prompt_tokens_details, completion_tokens_details) and system_fingerprint (a choice's logprobs
      null, or chat's {content: [{token, logprob, bytes, top_logprobs}], refusal} or the legacy
      completions' {tokens, token_logprobs, top_logprobs, text_offset} of equal lengths), or an embeddings
      list (object "list", data of embedding objects: index in order, a list of floats or a base64 string
      of float32 values, all of one length; model; usage with prompt_tokens = total_tokens), the error object
      {message, type, param, code} of a failed request; ids unique per line (batch_req_, request_id) and per
      custom_id (body.id)
  oai_batch_check.py script BACKLOG RESULTS ERRORS
      plays a script written only from the documentation: it maps every backlog request (custom_id) to its
      answer or its error through custom_id alone, and prints "custom_id<TAB>ok|error<TAB>code-or-text"
      lines sorted by custom_id (the caller compares them)

The schemas below are written from the API reference (the Batch object's output file lines, the chat
completion and completion objects, CompletionUsage, the embedding object and CreateEmbeddingResponse, the
error object), not from nightshift's code.
Exit status 0 when every check holds; otherwise the first problems are printed.
"""
import base64
import json
import sys

STR, INT, OBJ, ARR, NULL, BOOL = str, int, dict, list, type(None), bool

# a schema is {"key": (types, sub-schema or None, required)}; objects allow no other keys
USAGE = {
    "prompt_tokens": (INT, None, True),
    "completion_tokens": (INT, None, True),
    "total_tokens": (INT, None, True),
    "prompt_tokens_details": (OBJ, {"cached_tokens": (INT, None, True), "audio_tokens": (INT, None, False)}, True),
    "completion_tokens_details": (OBJ, {
        "reasoning_tokens": (INT, None, True),
        "audio_tokens": (INT, None, False),
        "accepted_prediction_tokens": (INT, None, False),
        "rejected_prediction_tokens": (INT, None, False),
    }, True),
}
CHAT_MESSAGE = {
    "role": (STR, None, True),
    "content": ((STR, NULL), None, True),
    "refusal": ((STR, NULL), None, False),
    "annotations": (ARR, None, False),
    "tool_calls": (ARR, None, False),
}
NUM = (int, float)
TOP_LOGPROB = {"token": (STR, None, True), "logprob": (NUM, None, True), "bytes": ((ARR, NULL), None, True)}
TOKEN_LOGPROB = dict(TOP_LOGPROB, top_logprobs=(ARR, TOP_LOGPROB, True))
CHAT_LOGPROBS = {"content": ((ARR, NULL), TOKEN_LOGPROB, True), "refusal": ((ARR, NULL), TOKEN_LOGPROB, False)}
TEXT_LOGPROBS = {  # the legacy completions object; its lists are checked in check_text_logprobs
    "tokens": (ARR, None, True),
    "token_logprobs": (ARR, None, True),
    "top_logprobs": ((ARR, NULL), None, True),
    "text_offset": (ARR, None, True),
}
CHAT_CHOICE = {
    "index": (INT, None, True),
    "message": (OBJ, CHAT_MESSAGE, True),
    "logprobs": ((OBJ, NULL), CHAT_LOGPROBS, True),
    "finish_reason": (STR, None, True),
}
TEXT_CHOICE = {
    "index": (INT, None, True),
    "text": (STR, None, True),
    "logprobs": ((OBJ, NULL), TEXT_LOGPROBS, True),
    "finish_reason": (STR, None, True),
}
FINISH = {"stop", "length", "tool_calls", "content_filter", "function_call"}


def completion_body(choice):
    return {
        "id": (STR, None, True),
        "object": (STR, None, True),
        "created": (INT, None, True),
        "model": (STR, None, True),
        "choices": (ARR, choice, True),
        "usage": (OBJ, USAGE, True),
        "system_fingerprint": ((STR, NULL), None, False),
        "service_tier": ((STR, NULL), None, False),
    }


EMBEDDING = {
    "object": (STR, None, True),
    "index": (INT, None, True),
    "embedding": ((ARR, STR), None, True),
}
EMBEDDING_LIST = {
    "object": (STR, None, True),
    "data": (ARR, EMBEDDING, True),
    "model": (STR, None, True),
    "usage": (OBJ, {"prompt_tokens": (INT, None, True), "total_tokens": (INT, None, True)}, True),
}
ERROR_OBJECT = {
    "message": (STR, None, True),
    "type": (STR, None, True),
    "param": ((STR, NULL), None, True),
    "code": ((STR, NULL), None, True),
}
LINE_ERROR = {"code": (STR, None, True), "message": (STR, None, True), "line": (INT, None, False)}
RESPONSE = {"status_code": (INT, None, True), "request_id": (STR, None, True), "body": (OBJ, None, True)}
LINE = {
    "id": (STR, None, True),
    "custom_id": ((STR, NULL), None, True),
    "response": ((OBJ, NULL), RESPONSE, True),
    "error": ((OBJ, NULL), LINE_ERROR, True),
}


def check(v, types, sub, where, problems):
    if not isinstance(types, tuple):
        types = (types,)
    if isinstance(v, bool) and BOOL not in types:
        problems.append("%s: a boolean where %s is wanted" % (where, types))
        return
    if not isinstance(v, types):
        problems.append("%s: %s where %s is wanted" % (where, type(v).__name__, [t.__name__ for t in types]))
        return
    if isinstance(v, dict) and sub:
        for k, (t, s, req) in sub.items():
            if k in v:
                check(v[k], t, s, where + "." + k, problems)
            elif req:
                problems.append("%s: no %r" % (where, k))
        for k in v:
            if k not in sub:
                problems.append("%s: %r is not in the documented object" % (where, k))
    if isinstance(v, list) and sub:
        for i, x in enumerate(v):
            check(x, OBJ, sub, "%s[%d]" % (where, i), problems)


def load(path, problems):
    out = []
    with open(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        problems.append("%s: the last line has no newline" % path)
    for k, raw in enumerate(data.split(b"\n")[:-1] if data else []):
        try:
            out.append(("%s:%d" % (path, k + 1), json.loads(raw.decode("utf-8"))))
        except ValueError as ex:
            problems.append("%s:%d is not JSON: %s" % (path, k + 1, ex))
    return out


def check_embeddings(where, b, problems):
    check(b, OBJ, EMBEDDING_LIST, where + " body", problems)
    lengths = set()
    for i, d in enumerate(b.get("data", [])):
        v = d.get("embedding")
        if d.get("object") != "embedding" or d.get("index") != i:
            problems.append("%s: data[%d]: object %r, index %r" % (where, i, d.get("object"), d.get("index")))
        if isinstance(v, str):
            try:
                raw = base64.b64decode(v, validate=True)
            except ValueError:
                raw = b"?"
            if len(raw) % 4:
                problems.append("%s: data[%d]: base64 of %d bytes is not float32 values" % (where, i, len(raw)))
            lengths.add(len(raw) // 4)
        elif isinstance(v, list):
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
                problems.append("%s: data[%d]: an embedding value that is not a number" % (where, i))
            lengths.add(len(v))
    if len(lengths) > 1 or 0 in lengths:
        problems.append("%s: embeddings of lengths %s" % (where, sorted(lengths)))
    u = b.get("usage", {})
    if u.get("prompt_tokens") != u.get("total_tokens") or not b.get("data"):
        problems.append("%s: an embeddings list needs data and total_tokens = prompt_tokens" % where)


def check_logprob_values(where, values, problems):
    """logprobs are numbers <= 0 (null only for a prompt's first token: echo)"""
    for i, x in enumerate(values):
        if x is None and i == 0:
            continue
        if isinstance(x, bool) or not isinstance(x, NUM) or x > 0:
            problems.append("%s[%d]: logprob %r" % (where, i, x))


def check_text_logprobs(where, lp, problems):
    toks, lps, tops, offs = lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], lp["text_offset"]
    if not (len(toks) == len(lps) == len(offs) and (tops is None or len(tops) == len(toks))):
        problems.append("%s: tokens, token_logprobs, top_logprobs, text_offset of unequal lengths" % where)
        return
    if not all(isinstance(t, str) for t in toks) or any(b < a for a, b in zip(offs, offs[1:])):
        problems.append("%s: tokens must be strings and text_offset non-decreasing" % where)
    check_logprob_values(where + ".token_logprobs", lps, problems)
    for i, d in enumerate(tops or []):
        if d is None and lps[i] is None:
            continue
        if not isinstance(d, dict):
            problems.append("%s.top_logprobs[%d]: %r is no object" % (where, i, d))
            continue
        check_logprob_values("%s.top_logprobs[%d]" % (where, i), list(d.values()), problems)


def check_chat_logprobs(where, lp, problems):
    for i, t in enumerate(lp.get("content") or []):
        vals = [t["logprob"]] + [a["logprob"] for a in t["top_logprobs"]]
        check_logprob_values("%s.content[%d]" % (where, i), [0.0] + vals, problems)
        for a in [t] + t["top_logprobs"]:
            if a["bytes"] is not None and (not all(isinstance(x, int) and 0 <= x < 256 for x in a["bytes"])):
                problems.append("%s.content[%d]: bytes %r" % (where, i, a["bytes"]))
        if any(b["logprob"] > a["logprob"] for a, b in zip(t["top_logprobs"], t["top_logprobs"][1:])):
            problems.append("%s.content[%d]: top_logprobs not best first" % (where, i))


def check_result(where, o, problems):
    r = o.get("response") or {}
    if o.get("error") is not None or r.get("status_code") != 200 or o.get("custom_id") is None:
        problems.append("%s: a result line must have status 200, a custom_id and error null" % where)
        return
    b = r["body"]
    if b.get("object") == "list":
        check_embeddings(where, b, problems)
        return
    chat = b.get("object") == "chat.completion"
    if b.get("object") not in ("chat.completion", "text_completion"):
        problems.append("%s: body.object %r" % (where, b.get("object")))
        return
    check(b, OBJ, completion_body(CHAT_CHOICE if chat else TEXT_CHOICE), where + " body", problems)
    if not b["id"].startswith("chatcmpl-" if chat else "cmpl-"):
        problems.append("%s: body.id %r" % (where, b["id"]))
    u = b.get("usage", {})
    if u.get("total_tokens") != u.get("prompt_tokens", 0) + u.get("completion_tokens", 0):
        problems.append("%s: total_tokens is not prompt + completion" % where)
    cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    if not 0 <= cached <= u.get("prompt_tokens", 0):
        problems.append("%s: cached_tokens %r outside [0, prompt_tokens]" % (where, cached))
    for i, c in enumerate(b.get("choices", [])):
        if c.get("index") != i or c.get("finish_reason") not in FINISH:
            problems.append("%s: choice %d: index %r, finish_reason %r" % (where, i, c.get("index"), c.get("finish_reason")))
        if chat and c.get("message", {}).get("role") != "assistant":
            problems.append("%s: choice %d: role is not assistant" % (where, i))
        lp = c.get("logprobs")
        if isinstance(lp, dict) and not problems:
            (check_chat_logprobs if chat else check_text_logprobs)("%s: choice %d logprobs" % (where, i), lp, problems)


def check_error(where, o, problems):
    if o.get("error") is not None:  # a line that could not be read as a request: no response
        if o.get("response") is not None or o.get("custom_id") is not None:
            problems.append("%s: a top-level error with a response or a custom_id" % where)
        return
    r = o.get("response")
    if r is None or o.get("custom_id") is None or not 400 <= r.get("status_code", 0) < 600:
        problems.append("%s: a failed request needs a custom_id and a 4xx/5xx response" % where)
        return
    check(r["body"], OBJ, {"error": (OBJ, ERROR_OBJECT, True)}, where + " body", problems)
    e = r["body"].get("error", {})
    if not e.get("message") or not e.get("code"):
        problems.append("%s: the error object has no message or code" % where)


def check_schema(results, errors):
    problems = []
    lines = [(w, o, 0) for w, o in load(results, problems)] + [(w, o, 1) for w, o in load(errors, problems)]
    ids, req_ids, body_ids = {}, {}, {}
    for where, o, is_err in lines:
        check(o, OBJ, LINE, where, problems)
        if problems:
            break
        (check_error if is_err else check_result)(where, o, problems)
        if not o["id"].startswith("batch_req_"):
            problems.append("%s: id %r does not start with batch_req_" % (where, o["id"]))
        for seen, v in ((ids, o["id"]), (req_ids, (o.get("response") or {}).get("request_id"))):
            if v is not None and v in seen:
                problems.append("%s: %r is also the id of %s" % (where, v, seen[v]))
            seen[v] = where
        bid = ((o.get("response") or {}).get("body") or {}).get("id")
        if bid is not None:
            if bid in body_ids and body_ids[bid] != o["custom_id"]:
                problems.append("%s: body.id %r is also that of custom_id %r" % (where, bid, body_ids[bid]))
            body_ids[bid] = o["custom_id"]
    return problems


def play_script(backlog, results, errors):
    """What a user's script does with the two files, knowing only the documentation."""
    problems = []
    wanted = []
    with open(backlog, "rb") as f:
        for raw in f.read().split(b"\n"):
            try:
                wanted.append(json.loads(raw)["custom_id"])
            except (ValueError, KeyError, TypeError):
                pass
    answers = {}
    with open(results) as f:
        for line in f:
            o = json.loads(line)
            body = o["response"]["body"]
            if body["object"] == "list":  # embeddings: how many
                answers.setdefault(o["custom_id"], ("ok", "%d embeddings" % len(body["data"])))
                continue
            choice = body["choices"][0]
            text = choice["message"]["content"] if body["object"] == "chat.completion" else choice["text"]
            answers.setdefault(o["custom_id"], ("ok", text))
    with open(errors) as f:
        for line in f:
            o = json.loads(line)
            if o["response"] is not None and o["response"]["status_code"] != 200:
                err = o["response"]["body"]["error"]
                answers.setdefault(o["custom_id"], ("error", err["code"]))
            elif o["error"] is not None:
                answers.setdefault(o["custom_id"] or "line:%s" % o["error"].get("line"), ("error", o["error"]["code"]))
    for cid in sorted(set(wanted) | set(answers)):
        kind, what = answers.get(cid, ("missing", ""))
        print("%s\t%s\t%s" % (cid, kind, what.replace("\n", " ")[:40]))
    return problems


def main():
    if sys.argv[1] == "schema":
        problems = check_schema(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "script":
        problems = play_script(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        print("unknown command", sys.argv[1])
        return 2
    for p in problems[:10]:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
