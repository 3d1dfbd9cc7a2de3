#!/usr/bin/env python3
"""Fold package approval into gateway (issue 23). Re-runnable on code added
meanwhile: run from the repository root, then gofmt -w on the files it names.
approval/approval.go itself is moved by hand (git mv to gateway/approval.go,
package clause and names rewritten by the same table)."""
import os, re, subprocess, sys

MOD = "github.com/agentbackplane/backplane"
# old approval name -> (new package, new name); package "gateway" names are
# bare inside package gateway.
RENAME = {
    "Options": ("gateway", "ApprovalOptions"),
    "Approver": ("gateway", "Approver"),
    "Answer": ("gateway", "ApprovalAnswer"),
    "ErrNoDecision": ("gateway", "ErrNoDecision"),
    "MaxWait": ("gateway", "MaxApprovalWait"),
    "DefaultSelfApproveTimeout": ("gateway", "DefaultSelfApproveTimeout"),
    "DefaultMaxPending": ("gateway", "DefaultMaxPending"),
    "DefaultReadTimeout": ("gateway", "defaultApprovalReadTimeout"),
    "DefaultPollInterval": ("gateway", "defaultPollInterval"),
    "MaxSelfApproveTimeout": ("policy", "MaxSelfApproveTimeout"),
}
ref = re.compile(r"(?<![.\w])approval\.(" + "|".join(RENAME) + r")\b")
imp = re.compile(r'^\s*"' + MOD + r'/approval"\n', re.M)

def add_import(s, path):
    line = '\t"' + MOD + "/" + path + '"\n'
    if line in s:
        return s
    m = re.search(r'^\t"' + MOD + r'/[^"]*"\n', s, re.M)
    if m:
        return s[:m.start()] + line + s[m.start():]
    m = re.search(r"^import \(\n", s, re.M)
    return s[:m.end()] + line + s[m.end():]

changed = []
for root, dirs, files in os.walk("."):
    dirs[:] = [d for d in dirs if d not in ("node_modules", ".git", "approval")]
    for f in files:
        if not f.endswith(".go"):
            continue
        p = os.path.join(root, f)
        s = open(p).read()
        if not imp.search(s) and not (p.startswith("./gateway/") and ref.search(s)):
            continue
        pkg = re.search(r"^package (\w+)", s, re.M).group(1)
        inside = pkg == "gateway"
        used = set()
        def sub(m):
            newpkg, name = RENAME[m.group(1)]
            if inside and newpkg == "gateway":
                return name
            used.add(newpkg)
            return newpkg + "." + name
        s = ref.sub(sub, s)
        s = imp.sub("", s)
        for u in used:
            s = add_import(s, u)
        open(p, "w").write(s)
        changed.append(p)
print("\n".join(changed))
