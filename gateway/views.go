package gateway

// Views: what front ends (server, console, CLI) read of the gateway's
// state besides the operator actions' own reads (operator.go), as package
// opsview's types. They read only through these methods, never the store:
// the gateway decides what a front end may see and keeps the one
// definition of each figure.

// Incarnation names this process's incarnation in the store (what its
// started intents are recorded under), "" when the store keeps none.
func (g *Gateway) Incarnation() string {
	if s, ok := g.store.(interface{ Incarnation() string }); ok {
		return s.Incarnation()
	}
	return ""
}
