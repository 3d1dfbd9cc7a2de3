//go:build linux && !amd64 && !arm64

package sandbox

// The filter knows no other architecture: Status.UnixSockets is false.
var nativeArch seccompArch
