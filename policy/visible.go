package policy

// Visibility is implemented by a Policy that can say whether a caller may
// know of a tool at all: whether some rule could allow it or put it to an
// approval. A tool that is not visible to a caller must look, to that
// caller, exactly like one that does not exist (no forbidden, no schema,
// no validation errors), so that probing names reveals nothing.
type Visibility interface {
	Visible(caller, tool string) bool
}

// Visible reports whether tool is visible to caller under p: p's own
// answer when it implements [Visibility], else whether p allows the call
// (a policy that cannot tell shows only what it allows).
func Visible(p Policy, caller, tool string) bool {
	if v, ok := p.(Visibility); ok {
		return v.Visible(caller, tool)
	}
	return p.Decide(Request{Caller: caller, Tool: tool}).Allow
}

// Visible is false: DenyAll lets no one know of any tool.
func (DenyAll) Visible(caller, tool string) bool { return false }
