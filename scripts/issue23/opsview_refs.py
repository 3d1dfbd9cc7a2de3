#!/usr/bin/env python3
"""Step 2 of the views move (issue 23): every reference to a name that moved
from package gateway to package opsview is rewritten. Re-run it on code
added meanwhile, from the repository root:

    python3 fix_refs.py && gofmt -w $(git diff --name-only -- '*.go')

Outside package gateway, gateway.NAME becomes opsview.NEW (a qualified
name: exact). Inside package gateway, where the names were bare, the
compiler says where they are: `go test -gcflags=-e -run ^$ ./gateway/`
reports each "undefined: NAME" with its file:line:col, and opsview. is put
there; repeated until none is left."""
import os, re, subprocess

MOD = "github.com/agentbackplane/backplane"
SAME = """JournalQuery StatusToolError StatusRefused JournalEntry JournalPage MaxJournalScan
OutcomeSucceeded OutcomeToolError OutcomeFailed OutcomeUncertain OutcomeStarted OutcomeResolved
OutcomeRefused MaxOverviewScan Overview OverviewBucket Outcome ApprovalWhy HealthCheck CheckKind
CheckStore CheckRequired CheckOptional CheckAttention StateOK StateDegraded StateNotReady
StateFailing UpstreamState Healthy Ready State CheckState Accepted ToolReportedError
ApprovalEvent BudgetLine""".split()
RENAME = {n: n for n in SAME}
RENAME.update({"ApprovalView": "Approval", "PinView": "Pin", "SandboxView": "Sandbox"})

qual = re.compile(r"(?<!\w)(?:(?<=\.\.\.)|(?<!\.))gateway\.(" + "|".join(sorted(RENAME, key=len, reverse=True)) + r")\b")

def code(s):
    return re.sub(r"//.*", "", s)

def add_import(s, path):
    line = '\t"' + MOD + "/" + path + '"\n'
    if line in s:
        return s
    m = re.search(r'^\t"' + MOD + r'/[^"]*"\n', s, re.M)
    if m:
        return s[:m.start()] + line + s[m.start():]
    m = re.search(r"^import \(\n", s, re.M)
    if m:
        return s[:m.end()] + line + s[m.end():]
    m = re.search(r'^import (".*")\n', s, re.M)
    if m:
        return s[:m.start()] + "import (\n\t" + m.group(1) + "\n" + line + ")\n" + s[m.end():]
    m = re.search(r"^package \w+\n", s, re.M)
    return s[:m.end()] + "\nimport (\n" + line + ")\n" + s[m.end():]

def drop_unused(s, pkg):
    imp = re.compile(r'^\t"' + MOD + "/" + pkg + r'"\n', re.M)
    body = imp.sub("", s)
    if not re.search(r"(?<![.\w])" + pkg + r"\.", code(body)):
        return body
    return s

changed = set()
# 1. qualified references outside package gateway
for root, dirs, files in os.walk("."):
    dirs[:] = [d for d in dirs if d not in ("node_modules", ".git")]
    for f in files:
        if not f.endswith(".go"):
            continue
        p = os.path.join(root, f)
        s = open(p).read()
        pkg = re.search(r"^package (\w+)", s, re.M).group(1)
        if pkg == "gateway" or not qual.search(s):
            continue
        s = qual.sub(lambda m: "opsview." + RENAME[m.group(1)], s)
        s = add_import(s, "opsview")
        s = drop_unused(s, "gateway")
        open(p, "w").write(s)
        changed.add(p)

# 2. bare references inside package gateway, where the compiler finds them
undef = re.compile(r"^(?:vet: )?(\S+\.go):(\d+):(\d+): undefined: (\w+)$", re.M)
for _ in range(50):
    r = subprocess.run(["go", "test", "-gcflags=-e", "-count=1", "-run", "^$", "./gateway/"],
                       capture_output=True, text=True)
    hits = [(os.path.relpath(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4))
            for m in undef.finditer(r.stdout + r.stderr) if m.group(4) in RENAME]
    hits = [h for h in hits if h[0].startswith("gateway/")]
    if not hits:
        break
    byfile = {}
    for h in hits:
        byfile.setdefault(h[0], set()).add(h[1:])
    for p, hs in byfile.items():
        lines = open(p).read().split("\n")
        # right to left on a line, so earlier columns stay valid
        for line, col, name in sorted(hs, key=lambda h: (h[0], -h[1])):
            l = lines[line - 1]
            b = len(l[:].encode()[:col - 1].decode())  # col is a byte offset
            assert l[b:b + len(name)] == name, (p, line, col, name, l)
            lines[line - 1] = l[:b] + "opsview." + RENAME[name] + l[b + len(name):]
        s = add_import("\n".join(lines), "opsview")
        open(p, "w").write(s)
        changed.add(p)
for p in sorted(changed):
    print(p)
