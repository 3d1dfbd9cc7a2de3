#!/usr/bin/env python3
"""Budget windows owned by budget (issue 23): store.Window, WindowAt,
CheckWindow, MaxWindow, WindowOf and store.Reservation become budget's;
store imports budget for the types. Re-runnable on code added meanwhile
(run from the repository root, then gofmt -w the files it lists). The
declarations themselves were moved by hand (store/window.go's window half
to budget/window.go, Reservation from store/store.go)."""
import os, re

MOD = "github.com/agentbackplane/backplane"
NAMES = ["Reservation", "WindowAt", "WindowOf", "CheckWindow", "MaxWindow", "Window"]
# store.X not preceded by a letter or a selector's dot (a variadic's ... is
# fine)
qual = re.compile(r"(?<!\w)(?:(?<=\.\.\.)|(?<!\.))store\.(" + "|".join(NAMES) + r")\b")

def add_import(s, path):
    line = '\t"' + MOD + "/" + path + '"\n'
    if line in s or not re.search(r"(?<![.\w])" + path + r"\.", re.sub(r"//.*", "", s)):
        return s
    m = re.search(r'^\t"' + MOD + r'/[^"]*"\n', s, re.M)
    if m:
        return s[:m.start()] + line + s[m.start():]
    m = re.search(r"^import \(\n", s, re.M)
    if m:
        return s[:m.end()] + line + s[m.end():]
    m = re.search(r'^import (".*")\n', s, re.M)
    return s[:m.start()] + "import (\n\t" + m.group(1) + "\n" + line + ")\n" + s[m.end():]

def drop_unused(s, pkg):
    imp = re.compile(r'^\t"' + MOD + "/" + pkg + r'"\n', re.M)
    body = imp.sub("", s)
    code = re.sub(r"//.*", "", body)  # a comment's mention is no use
    if not re.search(r"(?<![.\w])" + pkg + r"\.", code):
        return body
    return s

changed = []
for root, dirs, files in os.walk("."):
    dirs[:] = [d for d in dirs if d not in ("node_modules", ".git")]
    for f in files:
        if not f.endswith(".go"):
            continue
        p = os.path.join(root, f)
        s = open(p).read()
        orig = s
        pkg = re.search(r"^package (\w+)", s, re.M).group(1)
        if pkg == "budget":
            s = qual.sub(lambda m: m.group(1), s)
            s = drop_unused(s, "store")
        elif qual.search(s):
            s = qual.sub(lambda m: "budget." + m.group(1), s)
            s = add_import(s, "budget")
            s = drop_unused(s, "store")
        if os.path.dirname(p) == "./store" and pkg == "store":
            # package store itself: its uses of the moved types
            s = re.sub(r"\[\]Reservation\b", "[]budget.Reservation", s)
            s = re.sub(r"\bWindow Window\b", "Window budget.Window", s)
            if "budget." in s:
                s = add_import(s, "budget")
        if s != orig:
            open(p, "w").write(s)
            changed.append(p)
print("\n".join(changed))
