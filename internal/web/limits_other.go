//go:build !unix

package web

// DefaultMaxConns is 1024 where the descriptor limit cannot be read.
func DefaultMaxConns() int { return 1024 }
