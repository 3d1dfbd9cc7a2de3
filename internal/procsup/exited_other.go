//go:build !linux

package procsup

import "errors"

// waitExited: only Linux's waitid is used to wait without reaping here.
func waitExited(int) error { return errors.ErrUnsupported }
