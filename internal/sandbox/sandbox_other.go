//go:build !linux

package sandbox

import (
	"errors"
	"os"
	"os/exec"
)

func probe() Status { return Status{Reason: "Landlock is Linux only"} }

// Main returns: there is no launcher on this platform.
func Main() {}

func removeCgroup(string) {}

func newCgroups(Limits) (string, string) { return "", "" }

// RemoveStale does nothing: there are no call cgroups here.
func RemoveStale() {}

func specFile(*launchSpec) (*os.File, error) { return nil, errors.ErrUnsupported }

func supervisable() bool { return false }

func isolateAttr(*exec.Cmd) int { return 0 }

// OwnPdeathsig reports whether cmd's launcher sets the parent-death signal
// itself: never here.
func OwnPdeathsig(*exec.Cmd) bool { return false }
