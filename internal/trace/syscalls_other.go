//go:build !amd64

package trace

// syscallNames is empty off x86_64: SyscallName falls back to "syscall_N".
var syscallNames = map[int]string{}
