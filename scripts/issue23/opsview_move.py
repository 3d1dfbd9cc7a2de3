#!/usr/bin/env python3
"""Step 1 of the views move (issue 23): cut the view declarations out of
package gateway into package gateway/view. One-off (the declarations);
step 2, fix_refs.py, rewrites the references and is the part to re-run."""
import re, os

MOVES = {  # file -> (view file, [start markers])
    "gateway/journalview.go": ("journal.go", [
        "type JournalQuery struct", "const (\n\tStatusToolError", "type JournalEntry struct",
        "func (e JournalEntry) At()", "func (e JournalEntry) ID()", "type JournalPage struct",
        "const MaxJournalScan"]),
    "gateway/overview.go": ("overview.go", [
        "const (\n\tOutcomeSucceeded", "const MaxOverviewScan", "type Overview struct",
        "type OverviewBucket struct", "func Outcome("]),
    "gateway/why.go": ("why.go", ["type ApprovalWhy struct", "type SandboxView struct"]),
    "gateway/health.go": ("health.go", [
        "type HealthCheck struct", "type CheckKind int", "const (\n\t// CheckStore", "const (\n\tStateOK",
        "type UpstreamState struct", "func Healthy(", "func Ready(", "func firstFailed(", "func State(",
        "func CheckState("]),
    "gateway/operator.go": ("operator.go", [
        "type Accepted struct", "type ApprovalView struct", "func ToolReportedError(", "type PinView struct",
        "type ApprovalEvent struct"]),
    "gateway/budget_ops.go": ("budget.go", ["type BudgetLine struct"]),
}

def cut(s, marker):
    i = s.index(marker)
    # the comment block right above
    start = i
    while True:
        j = s.rfind("\n", 0, start - 1)
        line = s[j + 1:start - 1] if start > 0 else ""
        if start > 0 and line.startswith("//"):
            start = j + 1
        else:
            break
    first = s[i:s.index("\n", i)]
    if first.endswith("{") or first.endswith("("):
        close = "\n}\n" if first.endswith("{") else "\n)\n"
        end = s.index(close, i) + len(close)
    else:
        end = s.index("\n", i) + 1
    decl = s[start:end]
    rest = s[:start] + s[end:]
    rest = re.sub(r"\n{3,}", "\n\n", rest)
    return decl, rest

out = {}
for f, (vf, markers) in MOVES.items():
    s = open(f).read()
    for m in markers:
        d, s = cut(s, m)
        out.setdefault(vf, []).append(d)
    open(f, "w").write(s)
os.makedirs("gateway/view", exist_ok=True)
for vf, decls in out.items():
    open("gateway/view/" + vf, "w").write("package view\n\n" + "\n".join(decls))
