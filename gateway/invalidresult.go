package gateway

import (
	"context"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// settleInvalidResult settles a call whose tool ran and answered a result
// that breaks its output schema: succeeded, class invalid_result (it ran,
// so its budget stays spent and it is never "failed", which says proven
// not run; like a result over the size limit), with the
// result as the tool answered it kept in the journal for the operator
// (`backplane journal show`). The caller gets the one error shape with
// every violation and its pointer into the structured content, never the
// result: a result the tool's own contract refuses is not a success.
func (c *call) settleInvalidResult(ctx context.Context, ir *tool.InvalidResultError) error {
	e := schemaError("invoke", ir.Err)
	e.Class = tool.ClassInvalidResult
	e.Message = "the tool's structured result does not match its output schema: " + e.Message
	e.Details["status"] = string(store.StatusSucceeded)
	return c.settle(ctx, store.Settlement{
		Status: store.StatusSucceeded, ErrorClass: string(tool.ClassInvalidResult), ErrorMessage: e.Message,
		Result: store.EncodeResult(store.Result{Content: ir.Result}), ErrorDetail: errorDetail(e),
	}, e)
}
