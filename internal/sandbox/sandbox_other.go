//go:build !linux

package sandbox

func probe() Status { return Status{Reason: "Landlock is Linux only"} }

// Main returns: there is no launcher on this platform.
func Main() {}

func removeCgroup(string) {}
