//go:build unix

package web

import "syscall"

// DefaultMaxConns is a quarter of the process's file descriptor limit,
// between 64 and 1024: the rest stays for NATS connections, stores and
// logs (an embedded NATS server shares the process).
func DefaultMaxConns() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return int(min(max(lim.Cur/4, 64), 1024))
}
