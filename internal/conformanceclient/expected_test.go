package conformanceclient

// An outcome is how one scenario ended: the worst status among its checks
// (SKIPPED and INFO count as passing: a check the scenario could not
// exercise).
type outcome string

const (
	pass outcome = "pass"
	warn outcome = "warn"
	fail outcome = "fail"
)

// expected lists the client scenarios that do not pass, with the reason.
// The test fails on an unlisted scenario that does not pass and on a
// listed one that now ends otherwise: shrink the list as Backplane grows.
var expected = map[string]struct {
	outcome outcome
	reason  string
}{}
