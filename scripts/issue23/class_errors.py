#!/usr/bin/env python3
"""gateway's per-class sentinels replaced by the classes themselves (issue
23): tool.Class is an error, and a *gateway.Error matches its class
(errors.Is(err, tool.ClassForbidden)); gateway.ErrNotFound is
store.ErrNotFound, gateway.ErrMalformedResult tool.ErrMalformedResult, the
sentinels they already were. Re-runnable from the repository root (then
gofmt -w the files it lists)."""
import os, re

MOD = "github.com/agentbackplane/backplane"
CLASSES = {"Validation": "Validation", "Unsupported": "Unsupported", "Forbidden": "Forbidden",
           "ApprovalRequired": "ApprovalRequired", "BudgetExceeded": "BudgetExceeded",
           "ResourceConflict": "ResourceConflict", "Timeout": "Timeout", "Cancelled": "Cancelled",
           "ExecutionFailure": "ExecutionFailure", "UnknownOutcome": "UnknownOutcome",
           "InvalidResult": "InvalidResult"}
MAP = {"Err" + k: ("tool", "Class" + v) for k, v in CLASSES.items()}
MAP["ErrNotFound"] = ("store", "ErrNotFound")
MAP["ErrMalformedResult"] = ("tool", "ErrMalformedResult")
qual = re.compile(r"(?<!\w)(?:(?<=\.\.\.)|(?<!\.))gateway\.(" + "|".join(sorted(MAP, key=len, reverse=True)) + r")\b")

def code(s):
    return re.sub(r"//.*", "", s)

def add_import(s, path):
    line = '\t"' + MOD + "/" + path + '"\n'
    if line in s or not re.search(r"(?<![.\w])" + path + r"\.", code(s)):
        return s
    m = re.search(r'^\t"' + MOD + r'/[^"]*"\n', s, re.M)
    if m:
        return s[:m.start()] + line + s[m.start():]
    m = re.search(r"^import \(\n", s, re.M)
    return s[:m.end()] + line + s[m.end():]

def drop_unused(s, pkg):
    imp = re.compile(r'^\t"' + MOD + "/" + pkg + r'"\n', re.M)
    body = imp.sub("", s)
    if not re.search(r"(?<![.\w])" + pkg + r"\.", code(body)):
        return body
    return s

for root, dirs, files in os.walk("."):
    dirs[:] = [d for d in dirs if d not in ("node_modules", ".git")]
    for f in files:
        p = os.path.join(root, f)
        if not (f.endswith(".go") or f.endswith(".md")):
            continue
        s = open(p).read()
        if not qual.search(s):
            continue
        s = qual.sub(lambda m: MAP[m.group(1)][0] + "." + MAP[m.group(1)][1], s)
        if f.endswith(".go"):
            pkg = re.search(r"^package (\w+)", s, re.M).group(1)
            if pkg == "tool":
                s = s.replace("tool.Class", "Class").replace("tool.ErrMalformedResult", "ErrMalformedResult")
            for imp in ("tool", "store"):
                if pkg != imp:
                    s = add_import(s, imp)
            s = drop_unused(s, "gateway")
        open(p, "w").write(s)
        print(p)
