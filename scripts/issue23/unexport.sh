#!/bin/sh
# Unexport gateway's names no other package uses (issue 23); run from the
# repository root. External tests reach the ones they need through
# gateway/export_test.go.
set -e
for pair in NewID:newID NoAcceptedDefinition:noAcceptedDefinition StoreWriteError:storeWriteError \
	IsOperator:isOperator DefaultMaxPending:defaultMaxPending ErrNotOperator:errNotOperator \
	ErrNotApprover:errNotApprover ErrNotPinned:errNotPinned ErrBadBudgetReset:errBadBudgetReset \
	AttrCallID:attrCallID AttrCaller:attrCaller AttrTool:attrTool AttrSession:attrSession \
	AttrOutcome:attrOutcome AttrErrorClass:attrErrorClass AttrStep:attrStep AttrStepMillis:attrStepMillis; do
	old=${pair%%:*} new=${pair##*:}
	for f in $(grep -l "package gateway$" gateway/*.go | grep -v export_test.go); do
		gofmt -r "$old -> $new" -w "$f"
		sed -i "s/\[$old\]/$new/g; s/\b$old\b/$new/g" "$f" # comments
	done
done
