#!/usr/bin/env python3
"""Helpers for the `nightshift run` end-to-end tests (tests/e2e_run*.sh).

  run_check.py backlog OUT N SEED       write a mixed simple-JSONL backlog of N requests (a few bad lines)
  run_check.py files BACKLOG RESULTS ERRORS
      every non-blank backlog line is in exactly one of the two files, once; every line is valid JSON
  run_check.py same RESULTS_A ERRORS_A RESULTS_B ERRORS_B
      the same ids with the same results (content/text, finish_reason, usage) and the same errors
      (code, message, line); created timestamps and order may differ
  run_check.py integrity DB              PRAGMA integrity_check through python's sqlite3
Exit status 0 when the check holds; otherwise the first problems are printed.
"""
import json
import random
import sqlite3
import sys

WORDS = ("Once upon a time there was a little girl named Lily who loved to play in the park with her dog "
         "Max one day she saw a big red ball and wanted to share it with her friend Tom the sun was bright "
         "and the birds sang happy songs").split()


def make_backlog(path, n, seed):
    rnd = random.Random(seed)
    lines = []
    prompts = []
    for i in range(n):
        if prompts and rnd.random() < 0.08:
            prompt = rnd.choice(prompts)  # a duplicate prompt: folds when the key matches
        else:
            k = rnd.randint(2, 12)
            start = rnd.randint(0, len(WORDS) - k)
            prompt = " ".join(WORDS[start:start + k])
            prompts.append(prompt)
        req = {"id": "r%04d" % i, "prompt": prompt, "max_tokens": rnd.randint(8, 24)}
        r = rnd.random()
        if r < 0.5:
            req["temperature"] = 0
        elif r < 0.75:
            req["temperature"] = 0.8
            req["seed"] = rnd.randint(0, 1 << 30)
        else:
            req["temperature"] = 0.9  # sampled without a seed: derived from the id
            req["top_p"] = 0.95
        if rnd.random() < 0.05:
            req["n"] = 2
        if rnd.random() < 0.05:
            req["stop"] = [". "]
        lines.append(json.dumps(req))
    # a few bad lines among them
    bad = ['{"id": "bad-json", "prompt": ', '{"prompt": "no id"}', '{"id": "r0001", "prompt": "duplicate id"}',
           '{"id": "bad-temp", "prompt": "x", "temperature": 7}']
    for b in bad:
        lines.insert(rnd.randint(0, len(lines)), b)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def load_jsonl(path, problems):
    out = []
    with open(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        problems.append("%s does not end with a newline (torn last line)" % path)
    for k, raw in enumerate(data.split(b"\n")[:-1] if data else []):
        try:
            out.append(json.loads(raw.decode("utf-8")))
        except Exception as ex:  # noqa: BLE001
            problems.append("%s line %d is not JSON: %s" % (path, k + 1, ex))
    return out


def check_files(backlog, results, errors):
    problems = []
    with open(backlog, "rb") as f:
        nonblank = [i + 1 for i, l in enumerate(f.read().split(b"\n")) if l.strip()]
    res = load_jsonl(results, problems)
    err = load_jsonl(errors, problems)
    seen = {}
    # map lines to backlog lines: through custom_id (the first line with that id not yet mapped: a duplicate
    # id's error comes after its first line's result), or the line number of an unreadable line's error
    id_lines = {}
    with open(backlog, "rb") as f:
        for i, l in enumerate(f.read().split(b"\n")):
            try:
                o = json.loads(l)
                cid = o.get("custom_id", o.get("id")) if isinstance(o, dict) else None
                if cid is not None:
                    id_lines.setdefault(str(cid), []).append(i + 1)
            except Exception:  # noqa: BLE001
                pass

    def line_of(o):
        if o.get("error") is not None:
            return o["error"]["line"]
        cid = o.get("custom_id")
        if id_lines.get(cid):
            return id_lines[cid].pop(0)
        return int(cid) if isinstance(cid, str) and cid.isdigit() else "id:%s" % cid

    for o in res:
        line = line_of(o)
        if line in seen:
            problems.append("result for %s (line %s) is written twice" % (o.get("custom_id"), line))
        seen[line] = "results"
        if o.get("error") is not None or o["response"]["status_code"] != 200:
            problems.append("result line for %s has an error" % o.get("custom_id"))
    for o in err:
        line = line_of(o)
        if line in seen:
            problems.append("line %s is in %s and in the error file" % (line, seen[line]))
        seen[line] = "errors"
        if not error_of(o)[2]:
            problems.append("error for line %s has no message" % line)
    missing = [l for l in nonblank if l not in seen]
    if missing:
        problems.append("%d backlog lines are in neither file, e.g. %s" % (len(missing), missing[:5]))
    if len(seen) != len(nonblank):
        problems.append("%d lines in the files for %d backlog lines" % (len(seen), len(nonblank)))
    return problems


def error_of(o):
    """(status, code, message, line) of an error-file line: a failed request (the error object in the
    response body, as OpenAI writes it; line None) or an unreadable line (top-level error with its line)."""
    if o.get("error") is not None:
        return (None, o["error"]["code"], o["error"]["message"], o["error"]["line"])
    e = o["response"]["body"]["error"]
    return (o["response"]["status_code"], e["code"], e["message"], None)


def summary(results, errors):
    problems = []
    out = {}
    for o in load_jsonl(results, problems):
        b = o["response"]["body"]
        ch = [(c.get("text", c.get("message", {}).get("content")), c["finish_reason"]) for c in b["choices"]]
        usage = dict(b["usage"])
        usage.pop("prompt_tokens_details", None)  # cached_tokens depends on what ran before: scheduling
        out[o["custom_id"]] = ("ok", b["object"], tuple(ch), json.dumps(usage, sort_keys=True))
    for o in load_jsonl(errors, problems):
        e = error_of(o)
        key = "error:%s" % o["custom_id"] if o["custom_id"] is not None else "line:%d" % e[3]
        out[key] = ("error",) + e
    return out, problems


def check_same(ra, ea, rb, eb):
    a, pa = summary(ra, ea)
    b, pb = summary(rb, eb)
    problems = pa + pb
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            problems.append("%s differs:\n  %s\n  %s" % (k, a.get(k), b.get(k)))
    return problems


def main():
    cmd = sys.argv[1]
    if cmd == "backlog":
        make_backlog(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return 0
    if cmd == "files":
        problems = check_files(*sys.argv[2:5])
    elif cmd == "same":
        problems = check_same(*sys.argv[2:6])
    elif cmd == "integrity":
        db = sqlite3.connect(sys.argv[2])
        res = db.execute("PRAGMA integrity_check").fetchall()
        problems = [] if res == [("ok",)] else ["integrity_check: %s" % res]
    else:
        print("unknown command", cmd)
        return 2
    for p in problems[:10]:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
